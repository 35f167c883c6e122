from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel_lsp import config
from kernel_lsp.config import ConfigError, Settings, load, load_lenient, normalise_key


def write_pyproject(folder: Path, body: str) -> Path:
    p = folder / "pyproject.toml"
    p.write_text(body)
    return p


def test_defaults_without_any_source(tmp_path: Path) -> None:
    s = load(tmp_path, environ={})
    assert s == Settings()
    assert s.atol == 1e-4 and s.rtol == 1e-4 and s.strategy == "profile-guided"


def test_precedence_defaults_pyproject_env_overrides(tmp_path: Path) -> None:
    write_pyproject(tmp_path, '[tool.kernel-lsp]\nsamples = 2\nrounds = 5\nstrategy = "refine"\natol = 1e-3\n')
    env = {"KERNEL_LSP_ROUNDS": "7", "KERNEL_LSP_STRATEGY": "agent"}
    s = load(tmp_path, environ=env, overrides={"strategy": "zero-shot"})
    assert s.samples == 2  # pyproject over default
    assert s.rounds == 7  # environment over pyproject
    assert s.strategy == "zero-shot"  # LSP settings / CLI flags over environment
    assert s.atol == 1e-3  # pyproject
    assert s.trials == Settings().trials  # default


def test_pyproject_found_from_a_nested_file(tmp_path: Path) -> None:
    write_pyproject(tmp_path, '[tool.kernel-lsp]\nmax-tokens = 512\n')
    nested = tmp_path / "pkg" / "sub"
    nested.mkdir(parents=True)
    f = nested / "model.py"
    f.write_text("")
    assert load(f, environ={}).max_tokens == 512


@pytest.mark.parametrize("key", ["maxTokens", "max-tokens", "max_tokens", "MAX_TOKENS"])
def test_key_spellings(key: str) -> None:
    assert normalise_key(key) == "max_tokens"
    assert load(None, environ={}, overrides={key: 99}).max_tokens == 99


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("samples", "many", "not an integer"),
        ("samples", 0, "out of range"),
        ("samples", True, "not an integer"),
        ("atol", "tiny", "not a number"),
        ("atol", float("nan"), "not a finite number"),
        ("strategy", "magic", "not one of"),
        ("accept_target", "elsewhere", "not one of"),
        ("endpoint", "localhost:8080", "http://"),
        ("colour", "blue", "unknown setting"),
        ("model", 3, "not a string"),
    ],
)
def test_bad_values_name_key_and_source(key: str, value: object, fragment: str) -> None:
    with pytest.raises(ConfigError) as e:
        load(None, environ={}, overrides={key: value})
    assert fragment in str(e.value)
    assert str(e.value).startswith("settings:")


def test_bad_value_in_environment_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="^environment variable KERNEL_LSP_ROUNDS: rounds = '-3' is out of range"):
        load(None, environ={"KERNEL_LSP_ROUNDS": "-3"})
    settings, errors = load_lenient(None, environ={"KERNEL_LSP_ROUNDS": "-3", "KERNEL_LSP_SAMPLES": "x"})
    assert (settings.rounds, settings.samples) == (Settings().rounds, Settings().samples)
    assert [e.split(":")[0] for e in errors] == ["environment variable KERNEL_LSP_ROUNDS",
                                                 "environment variable KERNEL_LSP_SAMPLES"]


def test_bad_pyproject_is_a_clear_error(tmp_path: Path) -> None:
    write_pyproject(tmp_path, "[tool.kernel-lsp\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load(tmp_path, environ={})


def test_lenient_keeps_lower_layer_and_reports(tmp_path: Path) -> None:
    write_pyproject(tmp_path, "[tool.kernel-lsp]\nsamples = 3\n")
    s, errors = load_lenient(tmp_path, environ={}, overrides={"samples": "x", "rounds": 2, "nope": 1})
    assert s.samples == 3 and s.rounds == 2
    assert len(errors) == 2
    assert any("samples" in e for e in errors) and any("nope" in e for e in errors)


def test_lenient_survives_broken_pyproject(tmp_path: Path) -> None:
    write_pyproject(tmp_path, "not toml at all ===")
    s, errors = load_lenient(tmp_path, environ={"KERNEL_LSP_SAMPLES": "6"})
    assert s.samples == 6 and errors and "invalid TOML" in errors[0]


@given(st.integers(min_value=1, max_value=256))
def test_any_valid_sample_count_round_trips_as_string(n: int) -> None:
    assert load(None, environ={"KERNEL_LSP_SAMPLES": str(n)}).samples == n


@given(st.integers().filter(lambda n: n < 1 or n > 256))
def test_any_out_of_range_sample_count_is_rejected(n: int) -> None:
    with pytest.raises(ConfigError):
        load(None, environ={}, overrides={"samples": n})


def test_schema_lists_every_field() -> None:
    assert set(config.SCHEMA) == set(Settings().to_dict())


@pytest.mark.parametrize(("value", "expected"), [("false", False), ("on", True), (False, False), ("0", False)])
def test_booleans(value: object, expected: bool) -> None:
    assert load(None, environ={}, overrides={"timeCompiled": value}).time_compiled is expected


def test_bad_boolean() -> None:
    with pytest.raises(ConfigError, match="not a boolean"):
        load(None, environ={"KERNEL_LSP_TIME_COMPILED": "maybe"})
