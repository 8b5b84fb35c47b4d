"""The playground and Flower in headless Chromium: submit a prompt, see the image, find the worker in Flower.

Needs Debian's ``chromium`` (``make test`` installs it when it runs as root) and the ``playwright`` package
(the ``dev`` extra), which drives that Chromium; Playwright's own browser download is never used.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from genq.redis_server import free_port
from tests.harness import ROOT, worker_env

FLOWER_AUTH = ("genq", "browser-test")
# As the machine notes say: no sandbox as root, no GPU, and none of Chromium's own calls home (refused here).
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
DOCS_SCREENSHOT = ROOT / "docs" / "playground.png"

if CHROMIUM is None:
    pytest.skip(
        "no Chromium on PATH: install Debian's chromium (`make test` does so when run as root) to run the browser test",
        allow_module_level=True,
    )
sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package (dev extra) is not installed")


@pytest.fixture(scope="module")
def flower(settings, tmp_path_factory) -> Iterator[str]:
    """Flower with basic auth, watching this run's Redis prefix; stopped by pid."""
    port = free_port()
    log = open(tmp_path_factory.mktemp("flower") / "flower.log", "ab")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "worker",
            "flower",
            f"--port={port}",
            "--address=127.0.0.1",
            f"--basic-auth={':'.join(FLOWER_AUTH)}",
        ],
        cwd=ROOT,
        env=worker_env(settings),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 60
        while time.monotonic() < end:
            try:
                if httpx.get(f"{url}/healthcheck", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[object]:
    """A headless Chromium context with a fresh profile, allowed into Flower with its credentials."""
    with sync_api.sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path / "profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={"width": 1360, "height": 820},
            device_scale_factor=1,
            http_credentials={"username": FLOWER_AUTH[0], "password": FLOWER_AUTH[1]},
        )
        try:
            yield context
        finally:
            context.close()


def test_playground_makes_an_image_and_flower_lists_the_worker(live_api, worker_for, flower, browser, out_dir):
    worker = worker_for("sd-demo")
    page = browser.new_page()
    problems: list[str] = []
    page.on("console", lambda msg: msg.type == "error" and problems.append(msg.text))
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    outside = []
    page.on(
        "request", lambda req: req.url.startswith(live_api) or req.url.startswith("blob:") or outside.append(req.url)
    )

    page.goto(f"{live_api}/")
    page.wait_for_selector("#model option[value=sd-demo]", state="attached")
    page.select_option("#model", "sd-demo")
    page.fill("textarea[name=prompt]", "a red fox in the snow, watercolor")
    page.fill("input[name=width]", "128")
    page.fill("input[name=height]", "128")
    page.fill("input[name=seed]", "7")
    page.click("#submit")
    page.wait_for_function(
        "() => { const i = document.querySelector('#result img'); return i && i.naturalWidth > 0 }", timeout=120_000
    )

    size = page.eval_on_selector("#result img", "i => [i.naturalWidth, i.naturalHeight]")
    assert size == [128, 128]
    assert page.text_content("#status") == "succeeded"
    assert page.text_content("[data-metric=batch_size]") not in ("", "–")
    assert "ms" in page.text_content("[data-metric=inference_time]")
    page.wait_for_selector("#result figcaption >> text=128×128")
    recent = page.evaluate("() => JSON.parse(localStorage.getItem('genq.playground.recent'))")
    assert recent[0]["model"] == "sd-demo" and recent[0]["status"] == "succeeded"
    assert "sd-demo · succeeded" in page.text_content("#recent")
    assert problems == [] and outside == []  # no script errors, no CSP violations, nothing fetched from elsewhere
    page.screenshot(path=str(out_dir / "playground.png"))
    if os.environ.get("GENQ_UPDATE_DOCS") == "1":  # the README's picture: refreshed on demand, not every run
        DOCS_SCREENSHOT.parent.mkdir(exist_ok=True)
        shutil.copyfile(out_dir / "playground.png", DOCS_SCREENSHOT)

    flower_page = browser.new_page()
    worker_name = f"{worker.name}@{os.uname().nodename}"
    for _ in range(30):  # Flower learns of workers from their heartbeats: give it a few
        flower_page.goto(f"{flower}/workers")
        if worker_name in (flower_page.text_content("body") or ""):
            break
        time.sleep(1)
    assert worker_name in flower_page.text_content("body")
    flower_page.screenshot(path=str(out_dir / "flower.png"))


# Every text the streaming box showed, recorded as it changes (a poll could miss a box that lives 300 ms).
RECORD_STREAMED_TEXT = """() => {
  window.__streamed = [];
  new MutationObserver(() => {
    const pre = document.querySelector('#result pre.streaming');
    if (pre && pre.textContent) window.__streamed.push(pre.textContent);
  }).observe(document.getElementById('result'), {subtree: true, childList: true, characterData: true});
}"""


def test_playground_shows_text_as_it_is_generated(live_api, worker_for, browser):
    worker_for("gpt2-demo")
    page = browser.new_page()
    problems: list[str] = []
    page.on("console", lambda msg: msg.type == "error" and problems.append(msg.text))
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.goto(f"{live_api}/")
    page.wait_for_selector("#model option[value=gpt2-demo]", state="attached")
    page.select_option("#model", "gpt2-demo")
    page.fill("textarea[name=prompt]", "Once upon a time")
    page.fill("input[name=max_new_tokens]", "128")
    page.evaluate(RECORD_STREAMED_TEXT)
    page.click("#submit")
    page.wait_for_function("() => document.querySelector('#status').textContent === 'succeeded'", timeout=120_000)
    final = page.text_content("#result pre")
    streamed = page.evaluate("() => window.__streamed")
    assert len(set(streamed)) > 1, streamed  # the text grew in front of the reader, piece by piece
    assert all(final.startswith(text) for text in streamed)
    assert problems == []


# A File dropped on the picture's drop zone, as a person dragging it from their desktop does.
DROP_FILE = """async ([selector, b64, name]) => {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const dt = new DataTransfer();
  dt.items.add(new File([bytes], name, {type: "image/png"}));
  const zone = document.querySelector(selector);
  zone.dispatchEvent(new DragEvent("dragover", {dataTransfer: dt, bubbles: true, cancelable: true}));
  zone.dispatchEvent(new DragEvent("drop", {dataTransfer: dt, bubbles: true, cancelable: true}));
}"""


def test_playground_inpaints_a_dropped_picture_with_a_painted_mask(live_api, worker_for, browser):
    import base64
    import io

    from PIL import Image

    worker_for("sd-demo")
    source = io.BytesIO()
    Image.new("RGB", (96, 64), (20, 120, 200)).save(source, format="PNG")
    page = browser.new_page()
    problems: list[str] = []
    page.on("console", lambda msg: msg.type == "error" and problems.append(msg.text))
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    uploads: list[str] = []
    page.on(
        "request",
        lambda req: (
            req.method == "POST"
            and req.url.endswith("/v1/uploads")
            and uploads.append(req.headers.get("content-type", ""))
        ),
    )
    page.goto(f"{live_api}/")
    page.wait_for_selector("#model option[value=sd-demo]", state="attached")
    page.select_option("#model", "sd-demo")
    page.fill("textarea[name=prompt]", "a harbour at night")
    page.fill("input[name=seed]", "3")
    page.fill("input[name=strength]", "0.9")

    page.evaluate(DROP_FILE, [".image-input [data-role=drop]", base64.b64encode(source.getvalue()).decode(), "in.png"])
    page.wait_for_function(
        "() => { const i = document.querySelector('[data-role=source]'); return i && i.naturalWidth === 96 }"
    )
    assert page.eval_on_selector("canvas[data-role=mask]", "c => [c.width, c.height]") == [96, 64]
    assert page.get_attribute("input[name=width]", "placeholder") == "96 (the image's)"  # blank: the picture's size
    page.locator("canvas[data-role=mask]").scroll_into_view_if_needed()  # below the fold: the mouse must reach it
    box = page.locator("canvas[data-role=mask]").bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] * 0.2)  # a stroke down the right side
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.8, box["y"] + box["height"] * 0.8, steps=8)
    page.mouse.up()
    painted = page.evaluate(
        "() => { const c = document.querySelector('canvas[data-role=mask]');"
        " const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
        " let n = 0; for (let i = 3; i < d.length; i += 4) n += d[i] > 0; return n }"
    )
    assert 0 < painted < 96 * 64  # some of it, not all

    page.click("#submit")
    page.wait_for_function(
        "() => { const i = document.querySelector('#result img'); return i && i.naturalWidth > 0 }", timeout=120_000
    )
    assert page.text_content("#status") == "succeeded"
    assert page.eval_on_selector("#result img", "i => [i.naturalWidth, i.naturalHeight]") == [96, 64]  # the picture's
    assert uploads == ["image/png", "image/png"]  # the picture and the mask, uploaded before the job
    assert problems == []


def test_playground_chat_tab_keeps_a_streamed_conversation(live_api, worker_for, browser):
    worker_for("gpt2-demo")
    page = browser.new_page()
    problems: list[str] = []
    page.on("console", lambda msg: msg.type == "error" and problems.append(msg.text))
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.goto(f"{live_api}/")
    page.click("#tab-chat")
    page.wait_for_selector("#chat-model option[value=gpt2-demo]", state="attached")
    page.select_option("#chat-model", "gpt2-demo")
    page.fill("#chat-max-tokens", "16")
    for turn, line in enumerate(["Hello", "Tell me more"], start=1):
        page.fill("#chat-input", line)
        page.click("#chat-send")
        page.wait_for_function(
            f"() => document.querySelectorAll('#chat-log .assistant').length === {turn} "
            "&& !document.querySelector('#chat-send').disabled",
            timeout=120_000,
        )
    roles = page.eval_on_selector_all("#chat-log .bubble", "els => els.map(e => e.dataset.role)")
    assert roles == ["user", "assistant", "user", "assistant"]
    assert problems == []
