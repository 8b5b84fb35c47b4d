"""The playground with presigned outputs, in headless Chromium: the image comes straight from the S3 server,
allowed by the page's policy, and the request that fetches it carries no genq key."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from api import create_app
from tests.e2e.test_playground_browser import CHROMIUM, CHROMIUM_FLAGS, sync_api
from tests.integration.output_backends import MODEL, backend_settings, start_worker
from tests.live_server import LiveServer
from tests.s3_server import AWS_ENV, S3Server

BUCKET = "genq-browser"


@pytest.fixture
def stack(settings, log_dir, tmp_path, monkeypatch) -> Iterator[tuple[str, S3Server]]:
    """An S3 server, a fake image worker writing there, and the API (no keys) handing out presigned URLs."""
    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)
    s3 = S3Server(log_dir).start()
    s3.client().create_bucket(Bucket=BUCKET)
    presigned = dataclasses.replace(
        backend_settings(
            settings,
            tmp_path,
            "browser",
            output_store=f"s3://{BUCKET}/",
            s3_endpoint_url=s3.url,
            s3_region="us-east-1",
            output_delivery="presigned",
        ),
        api_keys_file=None,
    )
    worker = start_worker(presigned, log_dir, **AWS_ENV)
    try:
        with LiveServer(create_app(presigned)) as server:
            yield server.url, s3
    finally:
        worker.stop()
        s3.stop()


def test_the_playground_shows_an_image_fetched_from_its_presigned_url(stack):
    api_url, s3 = stack
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page()
            problems: list[str] = []
            page.on("console", lambda msg: msg.type == "error" and problems.append(msg.text))
            page.on("pageerror", lambda exc: problems.append(str(exc)))
            page.goto(f"{api_url}/")
            page.wait_for_selector(f"#model option[value={MODEL}]", state="attached")
            page.select_option("#model", MODEL)
            page.fill("textarea[name=prompt]", "a lighthouse")
            page.click("#submit")
            page.wait_for_function(
                "() => { const i = document.querySelector('#result img'); return i && i.naturalWidth > 0 }",
                timeout=60_000,
            )
            src = page.eval_on_selector("#result img", "i => i.src")
            size = page.eval_on_selector("#result img", "i => [i.naturalWidth, i.naturalHeight]")
        finally:
            browser.close()
    assert src.startswith(f"{s3.url}/{BUCKET}/") and "X-Amz-Signature=" in src and size == [64, 64]
    assert problems == []  # the page's policy let the image in
    assert s3.refused() == []
