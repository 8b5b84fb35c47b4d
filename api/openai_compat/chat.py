"""``POST /chat/completions`` onto a text-generation job with ``messages``; ``n`` choices are rows of that job.

Non-streamed: the completion once the job is done. Streamed (``chat_stream.py``): OpenAI's chunks from the job's
live events. The messages are checked as genq's ``input.messages`` (errors name OpenAI's parameter).
"""

from __future__ import annotations

from flask import Response, jsonify, request

from api.openai_compat.chat_completion import chat_completion, chat_job
from api.openai_compat.chat_request import ChatCompletionRequest
from api.openai_compat.chat_stream import stream_chat
from api.openai_compat.jobs import parse, run
from api.openai_compat.text_params import PARAMS


def create_chat_completion() -> Response:
    """The chat completion once its job is done, or (``stream``) server-sent chunks as the text is generated."""
    req: ChatCompletionRequest = parse(ChatCompletionRequest, request.get_json(silent=True))
    spec, inp = chat_job(req)
    if req.stream:
        return stream_chat(req, spec, inp)
    return jsonify(chat_completion(spec, run(spec, inp, req.priority, PARAMS)))
