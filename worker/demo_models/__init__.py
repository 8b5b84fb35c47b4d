"""Small random-weight demo models built by code, loaded through the real ``from_pretrained`` paths."""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path

DEMO_MODELS = ("bert-demo", "gpt2-demo", "sd-demo", "rerank-demo", "whisper-demo")

#: Which module builds each model: its ``build(path: Path) -> None``, or ``module:function``.
_BUILDERS = {
    "bert-demo": "worker.demo_models.bert",
    "gpt2-demo": "worker.demo_models.gpt2",
    "sd-demo": "worker.demo_models.stable_diffusion",
    "rerank-demo": "worker.demo_models.bert:build_cross_encoder",
    "whisper-demo": "worker.demo_models.whisper",
}

#: Written last: a folder without it is a build that was interrupted, and is built again.
COMPLETE_MARKER = ".complete"
#: What the marker holds per model: a folder whose marker says another version (an older checkout's cache) is
#: built again. gpt2-demo 2: its tokenizer has a chat template (the weights are the same).
VERSIONS = {"bert-demo": "", "gpt2-demo": "2", "sd-demo": "", "rerank-demo": "", "whisper-demo": "1"}


def build_demo_models(root: Path, *, force: bool = False, names: tuple[str, ...] = DEMO_MODELS) -> dict[str, Path]:
    """Build each missing demo model into ``root/<name>``; return every model's folder by name."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    folders = {}
    for name in names:
        folder = root / name
        if force or not _complete(folder, VERSIONS[name]):
            if folder.exists():  # leftovers of an interrupted build (or force): start clean
                shutil.rmtree(folder)
            # Imported here: builders need torch/transformers/diffusers, and `import worker` must stay light.
            module, _, function = _BUILDERS[name].partition(":")
            getattr(importlib.import_module(module), function or "build")(folder)
            (folder / COMPLETE_MARKER).write_text(VERSIONS[name])
        _build_adapters(name, folder, force=force)
        folders[name] = folder
    return folders


def _build_adapters(name: str, folder: Path, *, force: bool) -> None:
    """Each demo LoRA of model ``name`` missing its own marker (a model built before adapters existed gains them)."""
    from worker.demo_models.adapters import DEMO_ADAPTERS, adapter_folders, build_adapter

    specs = {adapter.name: adapter for adapter in DEMO_ADAPTERS.get(name, ())}
    for adapter_name, adapter_folder in adapter_folders(name, folder).items():
        if force or not (adapter_folder / COMPLETE_MARKER).exists():
            if adapter_folder.exists():
                shutil.rmtree(adapter_folder)
            build_adapter(name, folder, specs[adapter_name], adapter_folder)
            (adapter_folder / COMPLETE_MARKER).write_text("")


def _complete(folder: Path, version: str) -> bool:
    marker = folder / COMPLETE_MARKER
    try:
        return marker.read_text().strip() == version
    except OSError:  # no marker: never finished
        return False
