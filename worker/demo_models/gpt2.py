"""A random-weight GPT-2 (~16M parameters) with a byte-level BPE tokenizer trained by code, and a chat template.

The chat template (``CHAT_TEMPLATE``) is ChatML-like, in plain text (the markers are ordinary bytes to this
tokenizer, so the vocabulary and the weights stay those of a model without it)::

    <|im_start|>system
    {system or developer content}
    # Tools
    Call a tool with <tool_call>{"name": ..., "arguments": {...}}</tool_call>. Tools:
    {one JSON tool definition per line}<|im_end|>
    <|im_start|>user
    {content}<|im_end|>
    <|im_start|>assistant
    {content}<tool_call>{"name": "f", "arguments": {...}}</tool_call><|im_end|>
    <|im_start|>tool
    {content}<|im_end|>
    <|im_start|>assistant

The system part appears when there is a system (or developer) message or tools; tools are listed only when a
request passes them; an assistant's earlier tool calls render as one ``<tool_call>`` each, its ``arguments`` as
sent (a JSON string). ``add_generation_prompt`` ends with the assistant's opening line. The weights are random:
what the model answers is noise, only the rendering is meaningful.
"""

from __future__ import annotations

import json
from pathlib import Path

from worker.demo_models.bert import WORDS

EOS = "<|endoftext|>"
VOCAB_SIZE = 4096  # an upper bound: the small corpus below yields fewer merges

# Deterministic training text: a few paragraphs plus the BERT demo's word list.
CORPUS = """
A task queue sits between a web server and a model. The server accepts many small requests
and answers at once; the model wants one process that owns the whole accelerator and is fed
full batches. Workers pull jobs from the queue, group the compatible ones, run them together
and store each result on its own. Clients poll for results or wait on them.
The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.
Once upon a time there was a little robot who wanted to learn how to paint the sky.
Every morning it climbed the hill behind the old house and watched the sun rise over the sea.
It tried red, then orange, then a deep blue, and every picture came out a little different.
The weather today is sunny with a light wind from the west. Tomorrow it will rain in the
morning and clear up in the afternoon. Temperatures stay between ten and eighteen degrees.
Hello world! How are you today? I am fine, thank you. What is your name? My name is Ada.
In 1842 she wrote the first program; in 1936 Turing described his machine; in 2017 the
transformer arrived. Numbers like 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 100 and 1000 appear often.
def main(): return {"status": "ok", "items": [1, 2, 3]}  # code also shows up in prompts
Machine learning models generate text one token at a time. Sampling with a temperature
and a top-p cutoff keeps the output varied; a fixed seed makes it reproducible.
The library opens at nine o'clock. Borrowed books are due back within three weeks, and
overdue notices arrive by email. Quiet study rooms can be reserved at the front desk.
Chop the onions, garlic and peppers; fry them gently in olive oil until golden, then add
tomatoes, beans, cumin, paprika and a pinch of salt. Simmer for twenty minutes and serve.
Mountains, rivers, forests and deserts cover the continent; volcanoes, glaciers, canyons
and beaches attract travellers, photographers, geologists and biologists every summer.
Error: connection refused (errno 111). Retrying in 5 seconds... Warning: queue depth 256.
GET /v1/jobs/42 HTTP/1.1 200 OK; POST /v1/jobs 202 Accepted; 503 Service Unavailable.
Physics, chemistry, mathematics, astronomy, economics, philosophy, history, literature,
medicine, engineering, architecture and psychology are taught at the university.
"""


CHAT_TEMPLATE = """\
{%- set first = messages[0] if messages else none -%}
{%- set has_system = first is not none and first.role in ["system", "developer"] -%}
{%- if has_system or tools -%}
<|im_start|>system
{% if has_system %}{{ first.content }}
{% endif -%}
{%- if tools -%}
# Tools
Call a tool with <tool_call>{"name": ..., "arguments": {...}}</tool_call>. Tools:
{% for tool in tools %}{{ tool | tojson }}
{% endfor -%}
{%- endif -%}
<|im_end|>
{% endif -%}
{%- for message in messages -%}
{%- if not (loop.first and has_system) -%}
<|im_start|>{{ "system" if message.role == "developer" else message.role }}
{{ message.content or "" }}
{%- for call in message.tool_calls or [] -%}
<tool_call>{"name": {{ call.function.name | tojson }}, "arguments": \
{{ call.function.arguments if call.function.arguments is string else call.function.arguments | tojson }}}</tool_call>
{%- endfor -%}
<|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% endif -%}
"""


def _training_text() -> list[str]:
    lines = [line for line in CORPUS.splitlines() if line.strip()]
    lines += [" ".join(WORDS[i : i + 16]) for i in range(0, len(WORDS), 16)]
    return lines


def build(path: Path) -> None:
    """Write a deterministic random-weight GPT2LMHeadModel and its tokenizer into ``path``."""
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2Tokenizer

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        _training_text(), vocab_size=VOCAB_SIZE, min_frequency=1, show_progress=False, special_tokens=[EOS]
    )
    # vocab.json + merges.txt is the original GPT-2 layout; keep it beside tokenizer.json.
    bpe.save_model(str(path))
    vocab = json.loads((path / "vocab.json").read_text())
    lines = (path / "merges.txt").read_text().splitlines()
    merges = [tuple(line.split(" ")) for line in lines if line and not line.startswith("#")]
    # transformers 5: GPT2Tokenizer is the tokenizers-backed ("fast") class; GPT2TokenizerFast is an alias.
    # The tokenizers backend takes pairs; transformers' annotation says str (a file) or list[str].
    tokenizer = GPT2Tokenizer(
        vocab=vocab,
        merges=merges,  # type: ignore[arg-type]
        eos_token=EOS,
        bos_token=EOS,
        unk_token=EOS,
    )
    tokenizer.model_max_length = 512
    tokenizer.chat_template = CHAT_TEMPLATE

    torch.manual_seed(0)  # the same weights on every build
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=512,
        n_embd=384,
        n_layer=8,
        n_head=6,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = GPT2LMHeadModel(config).eval()
    model.generation_config.pad_token_id = tokenizer.eos_token_id
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
