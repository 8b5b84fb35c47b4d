"""OpenAI clients and their own timeouts and retries.

The ``openai`` package gives up on a call after its read timeout (600 s by default, sent as
``x-stainless-read-timeout``) and then sends it again, with ``x-stainless-retry-count`` counting the retries and no
key of its own. A server that answers exactly at that timeout is never heard, and each retry would start another
job. So an OpenAI-style call answers before its caller's deadline (``answer_within_s``), and a call whose wait ran
out sets its job aside under the request's identity (owner, path, model, input, priority): a retry
(``x-stainless-retry-count`` > 0) takes one such job instead of starting another.

Nothing the package sends ties a retry to its first attempt, so identical calls of one key cannot be told apart:
only a job whose answer nobody has had is taken, each at most once (tasks/store/idempotency.py). Two identical
calls at once are two jobs, and a retry never gets an answer another call was given.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from flask import request

from tasks.settings import ApiSettings

#: The openai package's default read timeout: a client that does not say its own is assumed to wait this long.
DEFAULT_CLIENT_TIMEOUT_S = 600.0
#: Answer this much before the caller's deadline (at most; a tenth of a short one), so that the answer is heard.
ANSWER_MARGIN_S = 10.0


def caller_timeout_s() -> float:
    """The caller's own read timeout: ``x-stainless-read-timeout`` when sent and sane, else the package default."""
    try:
        sent = float(request.headers.get("x-stainless-read-timeout", ""))
    except ValueError:
        return DEFAULT_CLIENT_TIMEOUT_S
    return sent if 0 < sent < 1e6 else DEFAULT_CLIENT_TIMEOUT_S


def answer_within_s(settings: ApiSettings) -> float:
    """How long this call may wait for its job: ``GENQ_OPENAI_WAIT_S``, and never past the caller's deadline less a
    margin (``ANSWER_MARGIN_S``, or a tenth of a short timeout)."""
    timeout = caller_timeout_s()
    return max(1.0, min(settings.openai_wait_s, timeout - min(ANSWER_MARGIN_S, timeout / 10)))


def retry_count() -> int:
    """The openai package's count of this call's retries (0: a first attempt, or a client that does not say)."""
    try:
        return max(0, int(request.headers.get("x-stainless-retry-count", "0")))
    except ValueError:
        return 0


def identity(model: str, inp: dict[str, Any], priority: str) -> str:
    """What makes two calls the same call: the path, model, input and priority (the owner keys the binding)."""
    text = json.dumps([request.path, model, inp, priority], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()
