"""What ``/openapi.json`` says of the OpenAI-compatible routes, under ``x-openai-compatible``.

They follow OpenAI's published API (its bodies, its error shape), not this document's schemas, so they are not
``paths`` of genq's spec (a fuzzer would hold them to genq's error body): an extension lists what each supports.
"""

from __future__ import annotations

from typing import Any

from api.openai_compat.chat_request import UNSUPPORTED
from api.openai_compat.text_params import NO_EFFECT
from tasks.kinds.text_generation.messages import MAX_CHOICES, MAX_TOP_LOGPROBS
from tasks.openai_batches import BATCH_ENDPOINTS

IMAGE_EXTRAS = ["seed", "num_inference_steps", "negative_prompt", "guidance_scale", "scheduler", "priority"]

OPENAI_COMPATIBLE: dict[str, Any] = {
    "prefix": "/openai/v1",
    "description": "OpenAI's request and response shapes, each call a genq job underneath (X-Genq-Job-Id names "
    'it); errors in OpenAI\'s body {"error": {"message", "type", "param", "code"}}. '
    "genq's own parameters go in extra_body.",
    "routes": [
        {
            "method": "POST",
            "path": "/images/generations",
            "genq_kind": "text-to-image",
            "content_type": "application/json",
            "supported": ["prompt", "model", "n", "size (WIDTHxHEIGHT or auto)", "response_format (b64_json, url)"],
            "genq_extras": [*IMAGE_EXTRAS, "loras"],
        },
        {
            "method": "POST",
            "path": "/images/edits",
            "genq_kind": "text-to-image (image-to-image, inpainting)",
            "content_type": "multipart/form-data",
            "supported": [
                "image (one PNG, JPEG or WebP file, at most GENQ_MAX_UPLOAD_BYTES)",
                "mask (optional, the image's size: white = repaint)",
                "prompt",
                "model",
                "n",
                "size (WIDTHxHEIGHT or auto; absent or auto: the image's size)",
                "response_format (b64_json, url)",
            ],
            "genq_extras": ["strength", *IMAGE_EXTRAS],
        },
        {
            "method": "POST",
            "path": "/embeddings",
            "genq_kind": "embedding",
            "content_type": "application/json",
            "supported": ["input (a string or a list of strings)", "model", "encoding_format (float, base64)"],
        },
        {
            "method": "POST",
            "path": "/rerank",
            "genq_kind": "rerank",
            "content_type": "application/json",
            "supported": [
                "query",
                "documents (strings or {text} objects)",
                "top_n",
                "return_documents",
                "model",
            ],
            "refused": ["max_chunks_per_doc (above 1)", "rank_fields", "a pair longer than the model's context"],
            "also_at": "/v1/rerank",
        },
        *(
            {
                "method": "POST",
                "path": f"/audio/{route}",
                "genq_kind": f"speech-to-text (task {task})",
                "content_type": "multipart/form-data",
                "supported": [
                    "file (flac, mp3, mp4, m4a, ogg, wav or webm; at most GENQ_MAX_UPLOAD_BYTES)",
                    "model",
                    *(["language"] if task == "transcribe" else []),
                    "prompt",
                    "response_format (json, text, srt, vtt, verbose_json)",
                    "temperature",
                    "timestamp_granularities[] (segment, word; with verbose_json)",
                    "stream (json, text: transcript.text.delta and transcript.text.done events)",
                    "chunking_strategy (auto)",
                ],
                "genq_extras": ["seed", "priority"],
                "refused": ["include[] (logprobs)", "chunking_strategy other than auto"],
            }
            for route, task in (("transcriptions", "transcribe"), ("translations", "translate"))
        ),
        {
            "method": "POST",
            "path": "/score",
            "genq_kind": "rerank",
            "content_type": "application/json",
            "supported": [
                "text_1 (one text or a list: one for all of text_2, or one for each)",
                "text_2 (one text or a list)",
                "model",
            ],
            "refused": [
                "text_1 and text_2 lists of different lengths (but 1)",
                "a pair longer than the model's context",
            ],
            "also_at": "/v1/score",
        },
        {
            "method": "POST",
            "path": "/chat/completions",
            "genq_kind": "text-generation (messages)",
            "content_type": "application/json",
            "supported": [
                "messages (system, developer, user, assistant, tool; text content; the model's chat template)",
                "model",
                "max_tokens",
                "max_completion_tokens (the smaller of the two)",
                "temperature (0: greedy)",
                "top_p",
                "seed",
                "stop (a string or up to 4)",
                f"n (at most {MAX_CHOICES}: rows of one job, seeded seed + i)",
                "presence_penalty",
                "frequency_penalty",
                "logit_bias",
                "logprobs",
                f"top_logprobs (at most {MAX_TOP_LOGPROBS})",
                "stream",
                "stream_options.include_usage",
                "response_format, tools, tool_choice, parallel_tool_calls (when the text runtime takes them)",
            ],
            "accepted_without_effect": list(NO_EFFECT),
            "refused": sorted([*UNSUPPORTED, "modalities (other than text)", "image or audio content parts"]),
            "genq_extras": ["priority", "chat_template_kwargs"],
        },
        {
            "method": "POST",
            "path": "/completions",
            "genq_kind": "text-generation",
            "content_type": "application/json",
            "supported": [
                "prompt (one)",
                "model",
                "max_tokens",
                "max_completion_tokens (the smaller of the two)",
                "temperature",
                "top_p",
                "stop",
                "seed",
                f"n (at most {MAX_CHOICES})",
                "presence_penalty",
                "frequency_penalty",
                "logit_bias",
                f"logprobs (an int, at most {MAX_TOP_LOGPROBS}: the legacy shape)",
                "stream",
                "stream_options.include_usage",
            ],
            "refused": ["echo", "suffix", "best_of (above 1)"],
        },
        {"method": "GET", "path": "/models"},
        {"method": "GET", "path": "/models/{id}"},
        {
            "method": "POST",
            "path": "/files",
            "content_type": "multipart/form-data",
            "supported": [
                "file (JSONL, at most GENQ_MAX_FILE_BYTES and GENQ_BATCH_MAX_LINES lines)",
                "purpose (batch)",
            ],
        },
        {"method": "GET", "path": "/files", "supported": ["purpose", "limit", "after"]},
        {"method": "GET", "path": "/files/{id}"},
        {"method": "GET", "path": "/files/{id}/content"},
        {"method": "DELETE", "path": "/files/{id}"},
        {
            "method": "POST",
            "path": "/batches",
            "genq_kind": "one job per line, low priority",
            "content_type": "application/json",
            "supported": [
                f"endpoint ({', '.join(BATCH_ENDPOINTS)})",
                "input_file_id",
                "completion_window (24h)",
                "metadata",
            ],
        },
        {"method": "GET", "path": "/batches", "supported": ["limit", "after"]},
        {"method": "GET", "path": "/batches/{id}"},
        {"method": "POST", "path": "/batches/{id}/cancel"},
    ],
}
