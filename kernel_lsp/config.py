"""Configuration in one place.

Precedence, lowest first:

1. defaults (the dataclass below),
2. ``[tool.kernel-lsp]`` in the workspace's ``pyproject.toml``,
3. environment variables ``KERNEL_LSP_<NAME>`` (e.g. ``KERNEL_LSP_SAMPLES=8``),
4. LSP settings (``initializationOptions`` / ``workspace/configuration``) or CLI flags.

Keys may be written ``snake_case``, ``kebab-case`` or ``camelCase``. Every value is typed and validated; a bad
value raises :class:`ConfigError` naming the key, the source and what is allowed. Callers that must not fail
(the language server) use :func:`load_lenient`, which keeps the defaults for bad values and returns the errors
so they can be shown to the user.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ENV_PREFIX = "KERNEL_LSP_"

STRATEGIES = ("profile-guided", "zero-shot", "one-shot", "refine", "best-of-n", "agent")
ACCEPT_TARGETS = ("inline", "sibling")
BINDINGS = ("torch", "ctypes")
LOG_LEVELS = ("debug", "info", "warning", "error")


class ConfigError(ValueError):
    """A configuration value is missing, of the wrong type or out of range."""


@dataclass(frozen=True)
class Settings:
    # --- model -------------------------------------------------------------------------------------------------
    model: str = "default"  # "default" (the embedded small GGUF) or a path to a .gguf file
    endpoint: str = ""  # OpenAI-compatible base URL (e.g. http://127.0.0.1:8080/v1); overrides `model` when set
    endpoint_model: str = ""  # model name sent to the endpoint
    api_key_env: str = "OPENAI_API_KEY"  # name of the environment variable holding the endpoint's API key
    chat_format: str = ""  # llama.cpp chat format name; empty: the template embedded in the GGUF
    n_ctx: int = 8192
    n_gpu_layers: int = 0  # -1 offloads every layer (use it with a CUDA build of llama-cpp-python)
    n_threads: int = 0  # 0: llama.cpp's default
    max_tokens: int = 2048
    temperature: float = 0.7
    seed: int = 0
    # --- search ------------------------------------------------------------------------------------------------
    strategy: str = "profile-guided"
    samples: int = 4  # n of best-of-n: completions per round
    rounds: int = 3  # refinement rounds
    history_window: int = 3  # earlier kernels carried in each prompt (bounded context)
    binding: str = "torch"  # how the model is asked to call its kernels from Python: "torch" (a C++ wrapper with
    # torch's headers, bound by pybind11: 6-9 s to build) or "ctypes" (plain C launchers through ctypes: no torch
    # headers, about a second)
    # --- oracle ------------------------------------------------------------------------------------------------
    device: str = "auto"  # "auto", "cpu" or "cuda"
    gpu: int = 0  # GPU index
    atol: float = 1e-4
    rtol: float = 1e-4
    trials: int = 5
    compile_timeout: float = 300.0
    run_timeout: float = 120.0
    compile_workers: int = 0  # 0: one per CPU core, at most 8
    timing_calls: int = 100
    time_compiled: bool = True  # also time torch.compile of the reference (slow to compile, esp. on CPU)
    warm_start: bool = True  # the evaluator starts at start-up, and a quiet open file's reference is profiled and loaded,
    # and a local model loaded (kept for every job, closed after 10 idle minutes), not on the first click
    # --- editor and files --------------------------------------------------------------------------------------
    accept_target: str = "inline"  # "inline": insert ModelNew into the file; "sibling": write <file>_kernel.py
    state_dir: str = ".kernel-lsp"  # under the workspace root: candidates, history.sqlite, logs
    kernelbench_dir: str = ""  # folder holding level{1,2,3}.jsonl for `kernel-lsp bench`
    prompts_dir: str = ""  # workspace folder with prompt templates overriding the built-in ones
    log_level: str = "info"
    log_file: str = ""  # the server: also log here (else stderr only); optimize / bench: default <state_dir>/kernel-lsp.log

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_BOUNDS: dict[str, tuple[float | None, float | None]] = {
    "n_ctx": (256, 1 << 20),
    "n_gpu_layers": (-1, None),
    "n_threads": (0, 1024),
    "max_tokens": (16, 1 << 20),
    "temperature": (0.0, 5.0),
    "seed": (0, None),
    "samples": (1, 256),
    "rounds": (1, 100),
    "history_window": (0, 32),
    "gpu": (0, 1024),
    "atol": (0.0, 1.0),
    "rtol": (0.0, 1.0),
    "trials": (1, 1000),
    "compile_timeout": (1.0, 24 * 3600.0),
    "run_timeout": (1.0, 24 * 3600.0),
    "compile_workers": (0, 256),
    "timing_calls": (1, 1_000_000),
}
_CHOICES: dict[str, tuple[str, ...]] = {
    "strategy": STRATEGIES,
    "accept_target": ACCEPT_TARGETS,
    "binding": BINDINGS,
    "device": ("auto", "cpu", "cuda"),
    "log_level": LOG_LEVELS,
}
_FIELDS = {f.name: f for f in fields(Settings)}
_TYPES = {name: type(f.default) for name, f in _FIELDS.items()}


def normalise_key(key: str) -> str:
    """``maxTokens``, ``max-tokens`` and ``MAX_TOKENS`` all become ``max_tokens``."""
    key = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key.strip())
    return key.replace("-", "_").lower()


def _coerce(name: str, value: Any, source: str) -> Any:
    want = _TYPES[name]
    where = f"{source}: {name}"
    if want is bool:
        if isinstance(value, bool):
            out: Any = value
        elif isinstance(value, str) and value.lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            out = value.lower() in ("1", "true", "yes", "on")
        else:
            raise ConfigError(f"{where} = {value!r} is not a boolean (true/false)")
    elif want is int:
        if isinstance(value, bool):
            raise ConfigError(f"{where} = {value!r} is not an integer")
        if isinstance(value, int):
            out = value
        elif isinstance(value, float) and value.is_integer():
            out = int(value)
        elif isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
            out = int(value)
        else:
            raise ConfigError(f"{where} = {value!r} is not an integer")
    elif want is float:
        if isinstance(value, bool):
            raise ConfigError(f"{where} = {value!r} is not a number")
        if isinstance(value, (int, float)):
            out = float(value)
        elif isinstance(value, str):
            try:
                out = float(value)
            except ValueError:
                raise ConfigError(f"{where} = {value!r} is not a number") from None
        else:
            raise ConfigError(f"{where} = {value!r} is not a number")
        if out != out or out in (float("inf"), float("-inf")):
            raise ConfigError(f"{where} = {value!r} is not a finite number")
    else:
        if not isinstance(value, str):
            raise ConfigError(f"{where} = {value!r} is not a string")
        out = value.strip()
    if name in _CHOICES and out not in _CHOICES[name]:
        raise ConfigError(f"{where} = {value!r} is not one of: {', '.join(_CHOICES[name])}")
    if name in _BOUNDS:
        lo, hi = _BOUNDS[name]
        if (lo is not None and out < lo) or (hi is not None and out > hi):
            rng = f"[{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}]"
            raise ConfigError(f"{where} = {value!r} is out of range {rng}")
    if name == "endpoint" and out and not re.match(r"^https?://", out):
        raise ConfigError(f"{where} = {value!r} must start with http:// or https://")
    return out


def _apply(
    current: dict[str, Any], layer: Mapping[str, Any], source: str, errors: list[str] | None
) -> dict[str, Any]:
    for raw_key, value in layer.items():
        if value is None:
            continue
        name = normalise_key(str(raw_key))
        if name not in _FIELDS:
            msg = f"{source}: unknown setting {raw_key!r}"
            if errors is None:
                raise ConfigError(msg)
            errors.append(msg)
            continue
        try:
            current[name] = _coerce(name, value, source)
        except ConfigError as e:
            if errors is None:
                raise
            errors.append(str(e))
    return current


def find_pyproject(start: Path | None) -> Path | None:
    """The nearest pyproject.toml at or above `start` (a file or folder)."""
    if start is None:
        return None
    start = start.resolve()
    if start.is_file():
        start = start.parent
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def pyproject_layer(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from None
    section = data.get("tool", {}).get("kernel-lsp", {})
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: [tool.kernel-lsp] must be a table")
    return section


def env_layer(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Settings from `KERNEL_LSP_<NAME>` variables, by setting name."""
    return {name: value for name, (_, value) in _env_vars(environ).items()}


def _env_vars(environ: Mapping[str, str] | None) -> dict[str, tuple[str, str]]:
    """setting name -> (variable name, value) for each KERNEL_LSP_<NAME> naming a setting."""
    environ = os.environ if environ is None else environ
    out = {}
    for key, value in environ.items():
        if key.startswith(ENV_PREFIX):
            name = key[len(ENV_PREFIX) :].lower()
            if name in _FIELDS:
                out[name] = (key, value)
    return out


def _layers(
    workspace: Path | None, environ: Mapping[str, str] | None, overrides: Mapping[str, Any] | None,
    source: str = "settings",
) -> list[tuple[str, Mapping[str, Any]]]:
    """(source, values) pairs, lowest precedence first; each environment variable is its own source, so a bad value
    is reported with the variable's name."""
    layers: list[tuple[str, Mapping[str, Any]]] = []
    pp = find_pyproject(workspace)
    if pp is not None:
        layers.append((f"{pp} [tool.kernel-lsp]", pyproject_layer(pp)))
    for name, (var, value) in sorted(_env_vars(environ).items()):
        layers.append((f"environment variable {var}", {name: value}))
    if overrides:
        layers.append((source, overrides))
    return layers


def check(key: str, value: Any, source: str) -> tuple[str, Any]:
    """One setting, validated: (its normalised name, its typed value). Raises ConfigError naming `source`."""
    return next(iter(_apply({}, {key: value}, source, None).items()))


def load(
    workspace: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    source: str = "settings",
) -> Settings:
    """Strict: the first bad value raises ConfigError. `source` names the overrides in messages."""
    values: dict[str, Any] = {}
    for src, layer in _layers(workspace, environ, overrides, source):
        _apply(values, layer, src, None)
    return Settings(**values)


def load_lenient(
    workspace: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> tuple[Settings, list[str]]:
    """Never raises: bad values keep the value of the layer below, and each problem is returned as a message."""
    errors: list[str] = []
    values: dict[str, Any] = {}
    try:
        layers = _layers(workspace, environ, overrides)
    except ConfigError as e:
        errors.append(str(e))
        layers = _layers(None, environ, overrides)
    for src, layer in layers:
        _apply(values, layer, src, errors)
    return Settings(**values), errors


def state_path(settings: Settings, workspace: Path) -> Path:
    p = Path(settings.state_dir).expanduser()
    return p if p.is_absolute() else workspace / p


def state_dir_problem(path: Path) -> str:
    """'' when the state folder can be used (it is made if missing, and a file can be written in it), else one line
    for people saying which folder, which setting and why not."""
    import tempfile

    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        why = e.strerror or str(e)
        if isinstance(e, (FileExistsError, NotADirectoryError)) or (path.exists() and not path.is_dir()):
            why = "not a folder"
        return f"the state folder {path} (setting state_dir) cannot be written: {why}"
    return ""


# Field documentation for editors and `kernel-lsp config`: name -> (type, default).
SCHEMA: dict[str, tuple[str, Any]] = {f.name: (_TYPES[f.name].__name__, f.default) for f in fields(Settings)}
_ = field  # re-exported for subclasses in tests
