"""Text streamed row by row from the text-generation runtime joins to exactly each job's output."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: never reach for a hub

from tasks.kinds import TextGenerationInput
from tests.unit.text_sinks import Collected
from worker.runtimes.text.runtime import TextGenerationRuntime

PROMPTS = ["Hello", "Once upon a time", "The weather today is", "A", "def main():", "Numbers 0, 1, 2", "q", "fox"]


def stream(runtime: TextGenerationRuntime, inputs: list[TextGenerationInput]) -> tuple[list[dict], list[Collected]]:
    sinks = [Collected() for _ in inputs]
    outputs = [p.output for p in runtime.predict(inputs, text_sinks=sinks)]
    return outputs, sinks


def test_pieces_join_to_each_rows_output_in_a_batch(textgen: TextGenerationRuntime) -> None:
    inputs = [
        TextGenerationInput(prompt=p, max_new_tokens=12 + 3 * i, do_sample=True, seed=i) for i, p in enumerate(PROMPTS)
    ]
    outputs, sinks = stream(textgen, inputs)
    assert outputs == [p.output for p in textgen.predict(inputs)]  # streaming changes nothing in the results
    for output, sink in zip(outputs, sinks, strict=True):
        assert sink.text == output["text"]
        assert len(sink.pieces) > 1  # text arrives as it is generated, not in one piece at the end
        assert [offset for offset, _, _ in sink.pieces] == sorted(offset for offset, _, _ in sink.pieces)
        tokens = [t for _, _, t in sink.pieces]
        assert tokens == sorted(tokens) and tokens[-1] <= output["tokens"]


def test_a_stop_string_is_never_streamed(textgen: TextGenerationRuntime) -> None:
    full = textgen.predict([TextGenerationInput(prompt="The weather", do_sample=True, seed=3, max_new_tokens=24)])[
        0
    ].output["text"]
    start = next(i for i in range(3, len(full) - 3) if full[i : i + 3].isascii() and full[i : i + 3].strip())
    stop = full[start : start + 3]
    inputs = [
        TextGenerationInput(prompt="The weather", do_sample=True, seed=3, max_new_tokens=24, stop=[stop]),
        TextGenerationInput(prompt="Hello", do_sample=True, seed=4, max_new_tokens=24),
    ]
    outputs, sinks = stream(textgen, inputs)
    assert outputs[0]["text"] == full[: full.find(stop)] and outputs[0]["finish_reason"] == "stop"
    assert sinks[0].text == outputs[0]["text"] and sinks[1].text == outputs[1]["text"]
    assert all(stop not in piece for _, piece, _ in sinks[0].pieces)
    assert all(offset + len(piece) <= len(outputs[0]["text"]) for offset, piece, _ in sinks[0].pieces)


def test_greedy_rows_that_end_early_stream_their_whole_text(textgen: TextGenerationRuntime) -> None:
    inputs = [TextGenerationInput(prompt=p, max_new_tokens=1 + i) for i, p in enumerate(PROMPTS[:4])]
    outputs, sinks = stream(textgen, inputs)
    assert [s.text for s in sinks] == [o["text"] for o in outputs]


def test_text_is_detokenized_off_the_model_thread_and_complete_when_a_row_is_handed_back(
    textgen: TextGenerationRuntime,
) -> None:
    """worker/runtimes/text/stream_thread.py: the pieces are made on the stream thread, and a session drains it
    before it returns a finished row (or drops one), so the row's text is all in its sink by then."""
    import threading

    from worker.runtimes.base import Row

    threads: set[str] = set()

    class Watched(Collected):
        def __call__(self, offset: int, text: str, tokens: int, index: int | None = None) -> None:
            threads.add(threading.current_thread().name)
            super().__call__(offset, text, tokens)

    session = textgen.open_session(())
    short, long, dropped = Watched(), Watched(), Watched()
    inputs = {
        "short": TextGenerationInput(prompt=PROMPTS[1], max_new_tokens=6, do_sample=True, seed=1),
        "long": TextGenerationInput(prompt=PROMPTS[2], max_new_tokens=30, do_sample=True, seed=2),
        "dropped": TextGenerationInput(prompt=PROMPTS[3], max_new_tokens=30, do_sample=True, seed=3),
    }
    session.admit([Row(h, inp, sink) for (h, inp), sink in zip(inputs.items(), (short, long, dropped), strict=True)])
    ended = []
    while not ended:
        ended = session.step()
    assert [r.handle for r in ended] == ["short"] and ended[0].prediction is not None
    assert short.text == ended[0].prediction.output["text"]  # all of it, at the moment it is handed back
    session.step()
    session.drop(["dropped"])
    sent = dropped.text
    for _ in range(3):
        session.step()
    assert dropped.text == sent  # nothing arrives after it left
    assert threads == {"genq-text-streams"}
    while session.handles:
        session.step()
