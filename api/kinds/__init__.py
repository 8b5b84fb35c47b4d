"""What the API checks of a kind's input at submission, beyond its schema: one check per kind that has any, behind
one registry, called once from every submission path (``api/job_submit.py:stage``) before anything is written.

A kind's media are checked by their media's checker (``api/media/checkers.py``), never here: staging a picture
passes through no text check. Adding a kind with checks of its own = its wing ``api/kinds/<kind>/`` and a line in
``CHECKS``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from api.kinds import rerank, speech_to_text, text_generation
from tasks.kinds import KINDS, AnyInput, JobKind
from tasks.models_file import ModelsFile, ModelSpec

#: models, the job's model, its parsed input -> None, or ``InvalidInput`` naming the field.
KindCheck = Callable[[ModelsFile, ModelSpec, Any], None]

CHECKS: dict[JobKind, KindCheck] = {
    JobKind.text_generation: text_generation.check_input,
    JobKind.rerank: rerank.check_input,
    JobKind.speech_to_text: speech_to_text.check_input,
}


def check_input(models: ModelsFile, spec: ModelSpec, inp: AnyInput) -> None:
    """Raise ``InvalidInput`` naming the first field of ``inp`` its kind's check refuses."""
    check = CHECKS.get(spec.kind)
    if check is None:
        return
    expected = KINDS[spec.kind].input
    if not isinstance(inp, expected):  # the route parsed it with its model's kind: a mismatch is a bug of ours
        raise TypeError(f"{spec.id} takes {expected.__name__}, not {type(inp).__name__}")
    check(models, spec, inp)
