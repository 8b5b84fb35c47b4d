"""Model runtimes by job kind; imported lazily so that importing ``worker`` never loads torch.

A model's runtime is its kind's default here, or its own ``runtime = "module:Class"`` in the models file: any
importable subclass of ``Runtime`` whose ``kind`` is the model's (docs/architecture.md).
"""

from __future__ import annotations

import importlib
from typing import Any

from tasks.kinds import JobKind
from tasks.models_file import ModelSpec
from worker.runtimes.base import Blob, Prediction, ProgressFn, Runtime

DEFAULT_RUNTIMES: dict[JobKind, str] = {
    JobKind.fill_mask: "worker.runtimes.fill_mask:FillMaskRuntime",
    JobKind.text_generation: "worker.runtimes.text.runtime:TextGenerationRuntime",
    JobKind.embedding: "worker.runtimes.embedding:EmbeddingRuntime",
    JobKind.rerank: "worker.runtimes.rerank:RerankRuntime",
    JobKind.speech_to_text: "worker.runtimes.speech.runtime:SpeechToTextRuntime",
    JobKind.text_to_image: "worker.runtimes.image.runtime:TextToImageRuntime",
}


def runtime_class(spec: ModelSpec) -> type[Runtime]:
    """The runtime class for ``spec``: its own ``runtime = "module:Class"`` or the kind's default."""
    module_name, _, class_name = (spec.runtime or DEFAULT_RUNTIMES[spec.kind]).partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    if not (isinstance(cls, type) and issubclass(cls, Runtime)):
        raise TypeError(f"{spec.runtime} is not a worker.runtimes.base.Runtime")
    kind = getattr(cls, "kind", None)
    if kind != spec.kind:
        raise TypeError(
            f"model {spec.id} is a {spec.kind.value} model, but its runtime {module_name}:{class_name} "
            f"runs {kind.value if isinstance(kind, JobKind) else 'no kind'} jobs (set its class's kind)"
        )
    return cls


def create_runtime(spec: ModelSpec, source: str, options: Any) -> Runtime:
    return runtime_class(spec)(spec, source, options)


__all__ = ["DEFAULT_RUNTIMES", "Blob", "Prediction", "ProgressFn", "Runtime", "create_runtime", "runtime_class"]
