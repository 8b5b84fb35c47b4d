"""LangChain's ``ChatOpenAI`` and LlamaIndex's ``OpenAILike(is_chat_model=True)`` against genq's chat route:
real workers (the demo GPT-2), real HTTP, no mocks."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_openai")
pytest.importorskip("llama_index.llms.openai_like")

from langchain_core.messages import HumanMessage, SystemMessage  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from llama_index.core.llms import ChatMessage  # noqa: E402
from llama_index.llms.openai_like import OpenAILike  # noqa: E402

MESSAGES = [SystemMessage("Be brief."), HumanMessage("Tell me about the sea.")]


def test_langchain_invoke_stream_and_batch(live_api, worker_for):
    worker_for("gpt2-demo")
    llm = ChatOpenAI(
        model="gpt2-demo",
        base_url=f"{live_api}/openai/v1",
        api_key="unused",
        max_tokens=12,  # sent as max_completion_tokens
        temperature=0,
        max_retries=0,
        stream_usage=True,
    )
    answer = llm.invoke(MESSAGES)
    assert answer.content and answer.usage_metadata["output_tokens"] <= 12
    assert answer.response_metadata["finish_reason"] in ("stop", "length")
    chunks = list(llm.stream(MESSAGES))
    whole = chunks[0]
    for chunk in chunks[1:]:
        whole = whole + chunk
    assert whole.content == answer.content  # greedy: the same text
    assert whole.usage_metadata["output_tokens"] == answer.usage_metadata["output_tokens"]
    batch = llm.batch([MESSAGES, [HumanMessage("Hello")]])
    assert len(batch) == 2 and batch[0].content == answer.content and batch[1].content


def test_llamaindex_chat_and_stream_chat(live_api, worker_for):
    worker_for("gpt2-demo")
    llm = OpenAILike(
        model="gpt2-demo",
        api_base=f"{live_api}/openai/v1",
        api_key="unused",
        is_chat_model=True,
        max_tokens=12,
        temperature=0,
        max_retries=0,
        context_window=1024,
    )
    messages = [
        ChatMessage(role="system", content="Be brief."),
        ChatMessage(role="user", content="Tell me about the sea."),
    ]
    answer = llm.chat(messages)
    assert answer.message.role == "assistant" and answer.message.content
    streamed = list(llm.stream_chat(messages))
    assert streamed and streamed[-1].message.content == answer.message.content
