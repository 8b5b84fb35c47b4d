"""A real S3 API on 127.0.0.1 for tests: moto's standalone server in a child process, stopped by pid.

    python -m tests.s3_server --port 9000 --log /tmp/s3-refused.log

moto answers presigned URLs without checking their expiry (or signature), so the server runs moto's own
WSGI app behind a gate that does what S3 does with an expired presigned URL (403 AccessDenied, "Request has
expired"). The gate also refuses, and logs, any request carrying an Authorization header that is not AWS
SigV4: a genq API key that reached the object store would show up there.
"""

from __future__ import annotations

import argparse
import calendar
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx

from genq.redis_server import free_port

REGION = "us-east-1"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "genq-test", "AWS_SECRET_ACCESS_KEY": "genq-test-secret"}
# boto3 in a test never reads the developer's AWS files nor asks an instance metadata service.
AWS_ENV = {
    **CREDENTIALS,
    "AWS_DEFAULT_REGION": REGION,
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
}

Start = Callable[[str, list[tuple[str, str]]], Any]
App = Callable[[dict[str, Any], Start], Iterable[bytes]]


def _refuse(start: Start, status: str, code: str, message: str) -> list[bytes]:
    body = f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>{message}</Message></Error>"
    start(status, [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
    return [body.encode()]


def gate(app: App, log: Path) -> App:
    def gated(environ: dict[str, Any], start: Start) -> Iterable[bytes]:
        auth = environ.get("HTTP_AUTHORIZATION", "")
        if auth and not auth.startswith("AWS4-HMAC-SHA256 "):
            with log.open("a") as out:
                out.write(f"{environ['REQUEST_METHOD']} {environ.get('PATH_INFO')} {auth[:24]}...\n")
            return _refuse(start, "400 Bad Request", "InvalidArgument", "Unsupported Authorization Type")
        query = parse_qs(environ.get("QUERY_STRING", ""))
        if "X-Amz-Signature" in query:
            signed = calendar.timegm(time.strptime(query["X-Amz-Date"][0], "%Y%m%dT%H%M%SZ"))
            if time.time() > signed + int(query["X-Amz-Expires"][0]):
                return _refuse(start, "403 Forbidden", "AccessDenied", "Request has expired")
        return app(environ, start)

    return gated


def main() -> None:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", type=Path, required=True)
    args = parser.parse_args()
    args.log.touch()
    app = gate(DomainDispatcherApplication(create_backend_app), args.log)
    make_server("127.0.0.1", args.port, app, threaded=True, request_handler=MotoRequestHandler).serve_forever()


class S3Server:
    """``python -m tests.s3_server`` on a spare loopback port; ``client()`` is a boto3 client of it."""

    def __init__(self, log_dir: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.refused_log = log_dir / f"s3-refused-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> S3Server:
        import os

        env = {**os.environ, **AWS_ENV}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.s3_server", "--port", str(self.port), "--log", str(self.refused_log)],
            env=env,
            cwd=Path(__file__).parents[1],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        end = time.monotonic() + 30
        while time.monotonic() < end:
            try:
                httpx.get(self.url, timeout=1)
                return self
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("the S3 test server did not start")

    def refused(self) -> list[str]:
        """Requests the gate refused for a non-S3 Authorization header."""
        return self.refused_log.read_text().splitlines() if self.refused_log.exists() else []

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    stop = kill  # moto keeps everything in memory: nothing to shut down gracefully

    def client(self) -> Any:
        import boto3

        return boto3.session.Session(
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=REGION,
        ).client("s3", endpoint_url=self.url)

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [obj["Key"] for page in pages for obj in page.get("Contents", [])]


if __name__ == "__main__":
    main()


@contextmanager
def serving_bucket(log_dir: Path, bucket: str) -> Iterator[S3Server]:
    """An S3 API server of the caller's own on loopback, with ``bucket`` made; stopped after the block."""
    server = S3Server(log_dir).start()
    try:
        server.client().create_bucket(Bucket=bucket)
        yield server
    finally:
        server.stop()
