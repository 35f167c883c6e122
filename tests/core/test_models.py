from pathlib import Path

import pytest

from kernel_lsp.models import ModelNotFound, embedded_gguf, resolve


def test_embedded_default_is_a_real_gguf() -> None:
    path = embedded_gguf()
    assert path.suffix == ".gguf" and path.stat().st_size > 50_000_000
    assert path.read_bytes()[:4] == b"GGUF"
    spec = resolve("default")
    assert spec.kind == "gguf" and Path(spec.location) == path


def test_missing_model_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound, match="model file not found"):
        resolve(str(tmp_path / "qwen2.5-coder-7b-instruct-q4_k_m.gguf"))


def test_not_a_gguf(tmp_path: Path) -> None:
    f = tmp_path / "weights.gguf"
    f.write_bytes(b"PK\x03\x04 not gguf")
    with pytest.raises(ModelNotFound, match="not a GGUF file"):
        resolve(str(f))


def test_endpoint_wins_over_model() -> None:
    spec = resolve("default", endpoint="http://127.0.0.1:8080/v1/", endpoint_model="qwen")
    assert (spec.kind, spec.location, spec.name) == ("endpoint", "http://127.0.0.1:8080/v1", "qwen")
