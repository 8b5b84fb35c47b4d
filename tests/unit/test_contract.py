"""Error mapping, settings, the models file, and the layout's import rules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tasks.errors import HTTP_STATUS, ErrorCode, GenqError, InvalidInput, Unavailable, code_for_status
from tasks.models_file import load_models_file
from tasks.setting_defaults import DEFAULT_REDIS_URL
from tasks.settings import Settings


def test_every_error_code_has_a_status():
    assert set(HTTP_STATUS) == set(ErrorCode)
    assert HTTP_STATUS[InvalidInput("x").code] == 422
    assert HTTP_STATUS[Unavailable("x", retry_after=3).code] == 503
    assert Unavailable("x", code=ErrorCode.no_workers).code == ErrorCode.no_workers
    assert HTTP_STATUS[GenqError("x").code] == 500


def test_a_status_maps_back_through_the_same_table():
    for status in set(HTTP_STATUS.values()):
        assert HTTP_STATUS[code_for_status(status)] == status
    assert [code_for_status(s) for s in (400, 409, 413, 422, 500, 503)] == [
        ErrorCode.bad_request,
        ErrorCode.conflict,
        ErrorCode.payload_too_large,
        ErrorCode.invalid_input,
        ErrorCode.internal,
        ErrorCode.broker_unavailable,
    ]
    assert code_for_status(405) == ErrorCode.method_not_allowed and code_for_status(418) == ErrorCode.bad_request
    assert code_for_status(502) == ErrorCode.bad_gateway and code_for_status(504) == ErrorCode.gateway_timeout


def test_bad_input_codes_are_4xx():
    for code in (
        ErrorCode.bad_request,
        ErrorCode.invalid_input,
        ErrorCode.unknown_model,
        ErrorCode.not_found,
        ErrorCode.payload_too_large,
        ErrorCode.conflict,
    ):
        assert 400 <= HTTP_STATUS[code] < 500


def test_settings_from_env_parse_types_and_keep_defaults():
    s = Settings.from_env(
        {
            "GENQ_REDIS_TIMEOUT_S": "0.5",
            "GENQ_RESULT_TTL_S": "60",
            "GENQ_MODELS_FILE": "/m.toml",
            "GENQ_API_KEYS_FILE": "",
            "UNRELATED": "1",
        }
    )
    assert s.redis_timeout_s == 0.5 and s.result_ttl_s == 60 and s.models_file == Path("/m.toml")
    assert s.redis_url == DEFAULT_REDIS_URL and s.api_keys_file is None


def test_models_file_toml_and_yaml(tmp_path):
    (tmp_path / "m.toml").write_text('[models.a]\nkind = "fill-mask"\nsource = "./a"\n')
    (tmp_path / "m.yaml").write_text("models:\n  b:\n    kind: embedding\n    source: org/model\n")
    toml = load_models_file(tmp_path / "m.toml")
    assert toml.source_of("a") == str(tmp_path / "a")
    assert toml.models["a"].queue == "genq.a"
    assert load_models_file(tmp_path / "m.yaml").source_of("b") == "org/model"  # a hub id stays as is


def test_models_file_errors_are_clear(tmp_path):
    (tmp_path / "bad.toml").write_text('[models.a]\nkind = "painting"\nsource = "x"\n')
    with pytest.raises(GenqError, match="kind"):
        load_models_file(tmp_path / "bad.toml")
    with pytest.raises(GenqError, match="cannot read"):
        load_models_file(tmp_path / "missing.toml")


def test_the_repository_models_file_is_valid():
    models = load_models_file(Path(__file__).parents[2] / "models.toml")
    assert {"bert-demo", "gpt2-demo", "minilm", "sd-demo"} <= set(models.models)


@pytest.mark.parametrize("module", ["api", "tasks", "genq.cli", "worker"])
def test_importing_loads_no_torch(module):
    code = (
        f"import sys, {module}; bad = [m for m in ('torch', 'transformers', 'diffusers') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    if module == "api":
        code = "import api.app, api.wsgi as _w; " + code  # the app as gunicorn builds it
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"GENQ_MODELS_FILE": str(Path(__file__).parents[2] / "models.toml"), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_api_never_imports_worker():
    code = "import sys, api.wsgi; sys.exit(1 if 'worker' in sys.modules else 0)"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"GENQ_MODELS_FILE": str(Path(__file__).parents[2] / "models.toml"), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr


def test_a_bad_environment_value_names_the_variable():
    with pytest.raises(ValueError, match="GENQ_RESULT_TTL_S='soon'"):
        Settings.from_env({"GENQ_RESULT_TTL_S": "soon"})


def test_torch_options_read_their_own_prefix():
    from worker.torch_settings import TorchOptions

    options = TorchOptions.from_env(
        {
            "GENQ_TORCH_NUM_THREADS": "1",
            "GENQ_TORCH_COMPILE": "yes",
            "GENQ_TORCH_DTYPE": "bfloat16",
            "GENQ_NUM_THREADS": "7",
        }
    )
    assert (options.num_threads, options.compile, options.dtype) == (1, True, "bfloat16")
    assert options.with_overrides({"attention_slicing": True}).attention_slicing
    with pytest.raises(ValueError, match="unknown torch settings: warp"):
        options.with_overrides({"warp": 9})
