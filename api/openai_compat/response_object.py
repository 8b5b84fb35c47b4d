"""A genq text job as an OpenAI Response object (issue 32): its status, output items and usage."""

from __future__ import annotations

from typing import Any

from tasks.schemas import JobStatus

_STATUS = {
    JobStatus.queued: "queued",
    JobStatus.running: "in_progress",
    JobStatus.succeeded: "completed",
    JobStatus.failed: "failed",
    JobStatus.canceled: "cancelled",
    JobStatus.expired: "failed",
}


def response_id(job_id: str) -> str:
    return f"resp_{job_id}"


def job_id_of(resp_id: str) -> str | None:
    return resp_id.removeprefix("resp_") if resp_id.startswith("resp_") else None


def output_items(job_id: str, out: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The response's ``output``: the assistant's message (its text) and/or its function calls."""
    if not out:
        return []
    message = out.get("message") or {"content": out.get("text", "")}
    items: list[dict[str, Any]] = []
    if message.get("content") is not None:
        items.append(message_item(job_id, str(message["content"]), "completed"))
    for call in message.get("tool_calls") or []:
        items.append(_call_item(call, "completed"))
    return items


def response_object(record: Any, background: bool = False, stored: bool = True) -> dict[str, Any]:
    """The Response of a job record (``JobRecord`` or a public ``Job``)."""
    status = _STATUS[JobStatus(record.status)]
    out = record.output if isinstance(record.output, dict) else (record.output.model_dump() if record.output else None)
    inp = record.input if isinstance(record.input, dict) else record.input.model_dump(by_alias=True)
    incomplete = None
    if status == "completed" and out and out.get("finish_reason") == "length":
        status, incomplete = "incomplete", {"reason": "max_output_tokens"}
    items = output_items(record.id, out) if status in ("completed", "incomplete") else []
    error = None
    if status == "failed" and getattr(record, "error", None) is not None:
        error = {"code": "server_error", "message": f"{record.error.code}: {record.error.message}"}
    messages = inp.get("messages") or []
    instructions = messages[0]["content"] if messages and messages[0].get("role") == "system" else None
    prompt_tokens, tokens = int((out or {}).get("prompt_tokens", 0)), int((out or {}).get("tokens", 0))
    return {
        "id": response_id(record.id),
        "object": "response",
        "created_at": int(record.created_at),
        "status": status,
        "background": background,
        "model": record.model,
        "output": items,
        "output_text": "".join(part["text"] for item in items if item["type"] == "message" for part in item["content"]),
        "instructions": instructions,
        "max_output_tokens": inp.get("max_new_tokens"),
        "temperature": inp.get("temperature", 1.0) if inp.get("do_sample") else 0.0,
        "top_p": inp.get("top_p", 1.0),
        "tools": [{"type": "function", **tool["function"]} for tool in inp.get("tools") or []],
        "tool_choice": inp.get("tool_choice") or "auto",
        "parallel_tool_calls": inp.get("parallel_tool_calls", True),
        "text": {"format": _flat_format(inp.get("response_format"))},
        "error": error,
        "incomplete_details": incomplete,
        "metadata": record.metadata or {},
        "previous_response_id": None,
        "store": stored,
        "usage": {
            "input_tokens": prompt_tokens,
            "output_tokens": tokens,
            "total_tokens": prompt_tokens + tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def message_id(job_id: str) -> str:
    return f"msg_{job_id}"


def message_item(job_id: str, text: str, status: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": message_id(job_id),
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _call_item(call: dict[str, Any], status: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call['id'].removeprefix('call_')}",
        "call_id": call["id"],
        "name": call["function"]["name"],
        "arguments": call["function"]["arguments"],
        "status": status,
    }


def _flat_format(fmt: dict[str, Any] | None) -> dict[str, Any]:
    if not fmt:
        return {"type": "text"}
    if fmt.get("type") == "json_schema":
        return {"type": "json_schema", **fmt["json_schema"]}
    return dict(fmt)
