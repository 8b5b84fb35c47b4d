"""``python -m worker.demo_models DIR [--force] [--only NAME ...]``: build the demo models into DIR."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from worker.demo_models import DEMO_MODELS, build_demo_models


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, build the models, print one ``name<TAB>path`` line per model."""
    parser = argparse.ArgumentParser(prog="python -m worker.demo_models", description=__doc__)
    parser.add_argument("dir", type=Path, help="folder to build into (one subfolder per model)")
    parser.add_argument("--force", action="store_true", help="rebuild models that are already complete")
    parser.add_argument("--only", nargs="+", choices=DEMO_MODELS, default=list(DEMO_MODELS), help="models to build")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local; never wait on a hub
    folders = build_demo_models(args.dir, force=args.force, names=tuple(args.only))
    for name, folder in folders.items():
        print(f"{name}\t{folder.resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
