"""The playground: ``GET /`` serves one static page (HTML, CSS, JavaScript in ``api/static``; no build step).

The page talks to the public REST API like any other client, so it needs nothing from the server but its
files. It is a plain Flask blueprint, not an API one: it stays out of the OpenAPI spec.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from flask import Blueprint, Response

from api.outputs import presigning
from api.services import services

playground = Blueprint("playground", __name__, static_folder="static", static_url_path="/playground")

# Everything the page loads comes from this server: it works offline and nothing else may inject into it. The
# one exception: with presigned outputs, images come from the object store's origin.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; img-src 'self' blob: data:{images}; style-src 'self'; "
    "script-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)


def image_origin() -> str:
    """The origin presigned output URLs point at (signing one is local: no request to the store), or ''."""
    signer = presigning(services())
    if signer is None:
        return ""
    url = urlsplit(signer.presigned_url("origin/probe/0", 60))
    return f"{url.scheme}://{url.netloc}"


@playground.get("/")
def page() -> Response:
    """The playground page."""
    response = playground.send_static_file("playground.html")
    origin = image_origin()
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY.format(images=f" {origin}" if origin else "")
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Cache-Control"] = "no-cache"  # a new release's page is seen at once
    return response
