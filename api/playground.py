"""The playground: ``GET /`` serves one static page (HTML, CSS, JavaScript in ``api/static``; no build step).

The page talks to the public REST API like any other client, so it needs nothing from the server but its
files. It is a plain Flask blueprint, not an API one: it stays out of the OpenAPI spec.
"""

from __future__ import annotations

from flask import Blueprint, Response

playground = Blueprint("playground", __name__, static_folder="static", static_url_path="/playground")

# Everything the page loads comes from this server: it works offline and nothing else may inject into it.
CONTENT_SECURITY_POLICY = ("default-src 'self'; img-src 'self' blob: data:; style-src 'self'; script-src 'self'; "
                           "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


@playground.get("/")
def page() -> Response:
    """The playground page."""
    response = playground.send_static_file("playground.html")
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Cache-Control"] = "no-cache"  # a new release's page is seen at once
    return response
