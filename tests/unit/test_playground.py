"""The playground page as files: served at /, self-contained (works offline), outside the OpenAPI spec."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from api import create_app
from tasks.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def client():  # type: ignore[no-untyped-def]
    """A test client of the app with the repository's models file (no request here touches Redis)."""
    return create_app(Settings(models_file=ROOT / "models.toml")).test_client()


def status_of(client, url: str) -> int:  # type: ignore[no-untyped-def]
    """The status of a GET, with the response closed (a file response otherwise leaves its file open)."""
    with client.get(url) as response:
        return int(response.status_code)


def text_of(client, url: str) -> str:  # type: ignore[no-untyped-def]
    with client.get(url) as response:
        return str(response.get_data(as_text=True))


def test_page_is_served_at_the_root_with_a_strict_policy(client):
    with client.get("/") as response:
        assert response.status_code == 200 and response.mimetype == "text/html"
        policy = response.headers["Content-Security-Policy"]
        assert "default-src 'self'" in policy and "script-src 'self'" in policy
        assert b"genq playground" in response.data


def test_every_asset_is_local_and_served(client):
    html = text_of(client, "/")
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert assets and not [a for a in assets if "//" in a]  # nothing from elsewhere: works offline
    scripts = [a for a in assets if a.endswith(".js")]
    for asset in [a for a in assets if a.startswith("playground/")]:
        assert status_of(client, "/" + asset) == 200, asset
    for script in scripts:  # modules it imports are local too
        for name in re.findall(r'from "\./([^"]+)"', text_of(client, "/" + script)):
            assert status_of(client, f"/playground/{name}") == 200, name


def test_page_is_not_in_the_spec_and_never_500s(client):
    assert "/" not in client.get("/openapi.json").json["paths"]
    assert status_of(client, "/?x=%ff%00") == 200
    assert client.post("/").status_code == 405
    assert client.get("/playground/../api/app.py").status_code == 404


def test_the_page_renders_kinds_from_their_declaration():
    """No job kind is named in the page's code: /v1/models gives each model's display and example input."""
    from typing import get_args

    from tasks.kinds import Display, JobKind

    static = ROOT / "api" / "static"
    code = "\n".join(path.read_text() for path in sorted(static.glob("*.js")))
    assert not [kind.value for kind in JobKind if f'"{kind.value}"' in code]
    renderers = re.search(r"const DISPLAYS = \{(.*?)\n\};", (static / "playground-result.js").read_text(), re.S)
    assert renderers and set(re.findall(r"^  (\w+):", renderers.group(1), re.M)) == set(get_args(Display))
    assert "model.example_input" in code


def test_models_list_each_kinds_display_and_a_valid_example(client):
    from tasks.kinds import KINDS
    from tasks.models_file import load_models_file

    specs = load_models_file(ROOT / "models.toml").models
    with client.get("/v1/models") as response:  # reads queue depths from Redis (read only)
        listed = response.json["models"]
    assert {info["id"] for info in listed} == set(specs)
    for info in listed:
        kind = KINDS[specs[info["id"]].kind]
        assert info["display"] == kind.display and info["batch_key"] == kind.batch_key
        assert kind.input.model_validate(info["example_input"])
