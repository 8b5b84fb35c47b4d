"""``python -m api.proxy_conf``: the nginx configuration of the reverse proxy in front of the API (compose/proxy/).

granian answers what its parser refuses with an empty 400 or 431, and has no setting for that body (issue 43). The
deployment puts Debian's nginx in front, and this module writes its configuration from genq's own limits, so the
two never disagree:

- **slow clients** are nginx's to hold: headers within ``HEADER_TIMEOUT_S``, a body read whole before it is passed
  on (``proxy_request_buffering``), within ``BODY_TIMEOUT_S`` between reads;
- **the same limits** as the API: each route's body limit (api/body_limits.py), gunicorn's header limits
  (api/http_limits.py);
- **genq's JSON error shape** for what nginx itself refuses or cannot pass on (413, 414, 431, 400, 502, 504), with
  the request id it sends upstream as ``X-Request-Id`` (the API takes it as its own);
- **TLS** ends here (``TLS_CERT``, ``TLS_KEY``), plain HTTP too where the operator keeps it;
- ``/metrics`` stays internal: Prometheus scrapes the API's port on the compose network, never through the proxy;
- answers stream through at once (``proxy_buffering off``): server-sent events and long waits, within the
  OpenAI routes' wait (``GENQ_OPENAI_WAIT_S``) and a margin.

The committed compose/proxy/nginx.conf is this module's output for the default settings (a test keeps it so):
render it again after changing a limit, ``python -m api.proxy_conf > compose/proxy/nginx.conf``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass

from api.body_limits import BodyLimit, BodyLimits
from api.http_limits import MAX_FIELD_SIZE, MAX_REQUEST_LINE
from tasks.errors import ErrorCode
from tasks.settings import ApiSettings

HEADER_TIMEOUT_S = 10  # a client's whole header block; granian's own header-read timeout backs it (api/serve.py)
BODY_TIMEOUT_S = 30  # between two reads of a body
SEND_TIMEOUT_S = 60  # between two writes to a client that reads slowly
READ_MARGIN_S = 60  # past the longest wait an API request may hold (GENQ_OPENAI_WAIT_S)
TLS_CERT = "/etc/genq/tls/cert.pem"
TLS_KEY = "/etc/genq/tls/key.pem"

#: What nginx itself answers, in genq's error body: (status, code, message).
REFUSALS = (
    (400, ErrorCode.bad_request, "the proxy could not read the request"),
    (413, ErrorCode.payload_too_large, "the request body is larger than this route takes"),  # each route's own
    (414, ErrorCode.uri_too_long, f"the request line is longer than {MAX_REQUEST_LINE} bytes"),
    (431, ErrorCode.headers_too_large, f"a header field is longer than {MAX_FIELD_SIZE} bytes"),
    (502, ErrorCode.bad_gateway, "the API did not answer; retry shortly"),
    (504, ErrorCode.gateway_timeout, "the API did not answer in time; a job it accepted keeps running"),
)


@dataclass(frozen=True)
class Listen:
    """Where the proxy listens and what it passes to."""

    upstream: str = "api:8000"
    http: str = "80"
    https: str | None = "443"
    cert: str = TLS_CERT
    key: str = TLS_KEY
    pid: str = "/run/nginx.pid"
    temp: str = "/var/lib/nginx"
    header_timeout_s: int = HEADER_TIMEOUT_S


def render(settings: ApiSettings, listen: Listen = Listen()) -> str:
    """The whole nginx.conf."""
    # The adapters route's limit whether or not uploads are on here (off, the API answers 404 whatever the body).
    limits = BodyLimits.from_settings(dataclasses.replace(settings, adapter_uploads=True))
    read_timeout = int(settings.openai_wait_s) + READ_MARGIN_S
    routes = "".join(_route(path, limit, n) for n, (path, limit) in enumerate(sorted(limits.posts.items()), 1))
    tls = (
        f"        listen {listen.https} ssl;\n"
        f"        ssl_certificate {listen.cert};\n"
        f"        ssl_certificate_key {listen.key};\n"
        "        ssl_protocols TLSv1.2 TLSv1.3;\n"
        if listen.https
        else ""
    )
    refusals = "".join(
        _refusal(str(status), status, code, message) for status, code, message in REFUSALS if status != 413
    )
    return f"""# genq's reverse proxy: written by `python -m api.proxy_conf` from genq's settings (api/proxy_conf.py).
# Render it again after changing a body limit or GENQ_OPENAI_WAIT_S.
worker_processes auto;
pid {listen.pid};
error_log stderr warn;

events {{
    worker_connections 4096;
}}

http {{
    access_log /dev/stdout;
    server_tokens off;
    client_body_temp_path {listen.temp}/body;
    proxy_temp_path {listen.temp}/proxy;
    fastcgi_temp_path {listen.temp}/fastcgi;
    uwsgi_temp_path {listen.temp}/uwsgi;
    scgi_temp_path {listen.temp}/scgi;

    # Slow clients are held here, not by the API's processes.
    client_header_timeout {listen.header_timeout_s}s;
    client_body_timeout {BODY_TIMEOUT_S}s;
    send_timeout {SEND_TIMEOUT_S}s;
    keepalive_timeout 75s;
    # The API's own limits: a request line of {MAX_REQUEST_LINE} bytes, header fields of {MAX_FIELD_SIZE}.
    client_header_buffer_size 1k;
    large_client_header_buffers 8 {MAX_FIELD_SIZE + 2};
    client_max_body_size {limits.default.bytes};
    client_body_buffer_size 1m;
    proxy_request_buffering on;

    # Server-sent events and held waits pass through as they come.
    proxy_buffering off;
    proxy_http_version 1.1;
    proxy_read_timeout {read_timeout}s;
    proxy_send_timeout {BODY_TIMEOUT_S}s;
    proxy_connect_timeout 5s;
    proxy_set_header Host $host;
    proxy_set_header Connection "";
    proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    proxy_set_header X-Forwarded-Proto $scheme;
    proxy_set_header X-Request-Id $request_id;

    upstream genq_api {{
        server {listen.upstream};
        keepalive 64;
    }}

    server {{
        listen {listen.http};
{tls}
        # What nginx refuses before a location is chosen (a request line or header too long, unreadable).
{_pages(0, indent=8)}
        # Prometheus scrapes the API on the compose network; the proxy never serves its metrics.
        location = /metrics {{
            default_type application/json;
            add_header X-Request-Id $request_id always;
            return 404 '{_body(ErrorCode.not_found, "no route /metrics through the proxy")}';
        }}
{routes}
        location / {{
            proxy_pass http://genq_api;
{_pages(0)}        }}
{_too_large(0, limits.default)}{refusals}    }}
}}
"""


def _route(path: str, limit: BodyLimit, n: int) -> str:
    """A route with a body limit of its own (an ``error_page`` in a location replaces every inherited one)."""
    return f"""
        location = {path} {{
            client_max_body_size {limit.bytes};
            proxy_pass http://genq_api;
{_pages(n)}        }}
{_too_large(n, limit)}"""


def _pages(n: int, indent: int = 12) -> str:
    """The error pages of one location: its own 413 (naming its limit's setting), the shared others."""
    pad = " " * indent
    pages = "".join(
        f"{pad}error_page {status} /genq-errors/{status if status != 413 else f'413-{n}'};\n"
        for status, _, _ in REFUSALS
    )
    # nginx refuses an over-long header line with its own code 494 (sent as 400): genq's 431.
    return pages + f"{pad}error_page 494 =431 /genq-errors/431;\n"


def _too_large(n: int, limit: BodyLimit) -> str:
    message = f"the request body is larger than this route takes, {limit.bytes} bytes{limit.why}"
    return _refusal(f"413-{n}", 413, ErrorCode.payload_too_large, message)


def _refusal(name: str, status: int, code: ErrorCode, message: str) -> str:
    # A URI, not a named location: nginx cannot redirect a request whose line it could not read to a named one.
    return f"""
        location = /genq-errors/{name} {{
            internal;
            default_type application/json;
            add_header X-Request-Id $request_id always;
            return {status} '{_body(code, message)}';
        }}
"""


def _body(code: ErrorCode, message: str) -> str:
    """genq's error body, the request id filled in by nginx."""
    body = json.dumps({"error": {"code": code.value, "message": message, "request_id": "$request_id"}})
    return body.replace("\\", "\\\\").replace("'", "\\'")  # between nginx's single quotes


def main() -> None:
    sys.stdout.write(render(ApiSettings.from_env()))


if __name__ == "__main__":
    main()
