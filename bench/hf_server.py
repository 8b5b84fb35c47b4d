"""transformers' continuous batching manager behind a small HTTP server: the peer bench/text_vs_hf.py measures
genq's whole stack against.

One process, one torch thread (as a genq CPU worker), the model loaded from a demo folder, one manager for the
server's life, its paged cache sized as ``bench/text_hf_batching.py``'s ``HFContinuous`` sizes it. Each request's
handler thread adds it to the manager and waits; one collector thread reads the manager's results and wakes the
waiting handler::

    POST /generate {"prompt": "...", "max_new_tokens": 16, "temperature": 0.7}   (temperature null: greedy)
    -> 200 {"tokens": [...], "text": "..."} once the request has finished
    GET /healthz -> 200 once the manager runs

The manager samples all requests or none (``do_sample`` is one per manager): it samples, and a greedy request asks
for ``top_k = 1`` (the argmax, whatever the draw). Per-request temperature and top_p; no per-request seed (one
generator per manager, bench/README.md's contract table)::

    python bench/hf_server.py --folder .genq/models/gpt2-demo --port 8765 [--slots 16]
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

WAIT_S = 120.0
START_TIMEOUT_S = 120.0


class Waiters:
    """Requests in flight: the handler parks on an event, the collector fills the result and sets it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: dict[str, threading.Event] = {}
        self.results: dict[str, Any] = {}

    def expect(self, request_id: str) -> threading.Event:
        with self.lock:
            event = self.events[request_id] = threading.Event()
        return event

    def deliver(self, request_id: str, result: Any) -> None:
        with self.lock:
            event = self.events.pop(request_id, None)
            if event is not None:
                self.results[request_id] = result
        if event is not None:
            event.set()

    def take(self, request_id: str) -> Any:
        with self.lock:
            self.events.pop(request_id, None)
            return self.results.pop(request_id, None)


def collect(manager: Any, waiters: Waiters, stop: threading.Event) -> None:
    """The manager's results to their waiting handlers, until ``stop``."""
    while not stop.is_set():
        result = manager.get_result(timeout=0.5)
        if result is not None and (result.is_finished() or result.error):
            waiters.deliver(result.request_id, result)


def serve(folder: Path, port: int, slots: int) -> None:
    import torch
    import transformers

    torch.set_num_threads(1)  # as genq's CPU worker (GENQ_TORCH_NUM_THREADS=1)
    # Untyped in transformers: reached through the module as Any.
    causal_lm: Any = transformers.AutoModelForCausalLM
    GenerationConfig: Any = transformers.GenerationConfig  # noqa: N806
    ContinuousBatchingConfig: Any = transformers.ContinuousBatchingConfig  # noqa: N806
    tokenizer: Any = transformers.AutoTokenizer.from_pretrained(str(folder))
    model = causal_lm.from_pretrained(str(folder), use_safetensors=True, attn_implementation="sdpa").eval()
    eos = tokenizer.eos_token_id
    # Non-default sampling values, so that the per-request warpers exist (transformers only builds a warper for a
    # setting the config sets); every request then overrides them.
    generation = GenerationConfig(
        do_sample=True,
        max_new_tokens=64,
        eos_token_id=eos,
        pad_token_id=eos,
        temperature=0.9,
        top_p=0.95,
        top_k=len(tokenizer),
    )
    batching = ContinuousBatchingConfig(
        max_requests_per_batch=slots,
        per_request_processors=True,
        num_blocks=128,
        page_size=64,
        max_batch_tokens=256,  # HFContinuous' sizes: its own sizing takes ~20 s to start on this CPU
    )
    waiters, stop = Waiters(), threading.Event()
    ids = itertools.count()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the stdlib's name)
            pass  # no access log on the benchmark's hot path

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            self._answer(200 if self.path == "/healthz" else 404, {"ok": self.path == "/healthz"})

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/generate":
                self._answer(404, {"error": "not found"})
                return
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            temperature = body.get("temperature")
            sampling: dict[str, float] = {"top_k": 1} if temperature is None else {"temperature": float(temperature)}
            if temperature is not None and body.get("top_p") is not None:
                sampling["top_p"] = float(body["top_p"])
            request_id = str(next(ids))
            event = waiters.expect(request_id)
            prompt = tokenizer(body["prompt"])["input_ids"]
            manager.add_request(prompt, request_id=request_id, max_new_tokens=int(body["max_new_tokens"]), **sampling)
            if not event.wait(WAIT_S):
                waiters.take(request_id)
                manager.cancel_request(request_id)
                self._answer(504, {"error": "timed out"})
                return
            result = waiters.take(request_id)
            if result.error:
                self._answer(500, {"error": str(result.error)})
                return
            tokens = list(result.generated_tokens)
            self._answer(200, {"tokens": tokens, "text": tokenizer.decode(tokens, skip_special_tokens=True)})

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    with model.continuous_batching_context_manager(
        generation_config=generation, warmup=True, continuous_batching_config=batching
    ) as manager:
        collector = threading.Thread(target=collect, args=(manager, waiters, stop), daemon=True)
        collector.start()
        print(json.dumps({"ready": port}), flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            stop.set()
            server.server_close()


class HFServer:
    """The benchmark's side: the server as a subprocess on a free port of 127.0.0.1, up until ``close``."""

    def __init__(self, folder: Path, slots: int = 16, env: dict[str, str] | None = None) -> None:
        from genq.redis_server import free_port

        self.port = free_port()
        cmd = [sys.executable, str(Path(__file__).resolve()), "--folder", str(folder), "--port", str(self.port)]
        self.proc = subprocess.Popen([*cmd, "--slots", str(slots)], env=env, stdout=subprocess.DEVNULL)
        end = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"bench/hf_server.py exited with {self.proc.returncode}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        self.close()
        raise TimeoutError("bench/hf_server.py did not come up")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        from genq.children import stop as stop_child

        stop_child(self.proc)

    def __enter__(self) -> HFServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--slots", type=int, default=16, help="max_requests_per_batch (genq's max_batch_size)")
    args = parser.parse_args(argv)
    serve(args.folder, args.port, args.slots)


if __name__ == "__main__":
    main()
