"""Prompt templates as data: Jinja2 files in the package `kernel_lsp.prompts` (the repository's prompts/ folder),
overridable per workspace.

A template named `X.j2` in `settings.prompts_dir` wins over the built-in one of the same name (includes too,
so a workspace can override just `contract.j2`). :meth:`PromptLibrary.reload` drops the compiled templates so
edited files take effect without a restart.
"""

from __future__ import annotations

import importlib.resources
import logging
import threading
from pathlib import Path
from typing import Any

import jinja2

from .errors import GenerationError

log = logging.getLogger(__name__)

PACKAGE = "kernel_lsp.prompts"
TEMPLATES = ("system", "zero_shot", "one_shot", "profile_guided", "refine_compile", "refine_wrong", "refine_speed",
             "refine_format", "refine_kernel", "summarise", "agent_analysis", "agent_generate", "agent_retrieval", "agent_triage")


def builtin_dir() -> Path:
    return Path(str(importlib.resources.files(PACKAGE)))


class _ResourceLoader(jinja2.BaseLoader):
    """Templates from the installed package (works for editable and regular installs)."""

    def get_source(self, environment: jinja2.Environment, template: str) -> tuple[str, str | None, Any]:
        res = importlib.resources.files(PACKAGE)
        for part in template.split("/"):
            res = res / part
        if not res.is_file():
            raise jinja2.TemplateNotFound(template)
        return res.read_text(encoding="utf-8"), None, lambda: False


class PromptLibrary:
    def __init__(self, override_dir: str | Path | None = None):
        self.override_dir = Path(override_dir).expanduser() if override_dir else None
        self._lock = threading.Lock()
        self._env = self._make_env()

    def _make_env(self) -> jinja2.Environment:
        loaders: list[jinja2.BaseLoader] = []
        if self.override_dir is not None:
            if self.override_dir.is_dir():
                loaders.append(jinja2.FileSystemLoader(str(self.override_dir)))
            else:
                log.warning("prompts_dir %s is not a folder; using the built-in prompts", self.override_dir)
        loaders.append(_ResourceLoader())
        env = jinja2.Environment(loader=jinja2.ChoiceLoader(loaders), undefined=jinja2.StrictUndefined,
                                 trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False,
                                 autoescape=False, auto_reload=False)
        env.filters["ms"] = lambda v: "n/a" if v is None else f"{v:.3f} ms"
        env.filters["x"] = lambda v: "n/a" if v is None else f"{v:.2f}x"
        env.filters["pct"] = lambda v: "n/a" if v is None else f"{100 * v:.1f}%"
        env.filters["sci"] = lambda v: "n/a" if v is None else f"{v:.3g}"
        return env

    def reload(self) -> None:
        with self._lock:
            self._env = self._make_env()

    def render(self, name: str, **context: Any) -> str:
        file = name if name.endswith(".j2") else f"{name}.j2"
        with self._lock:
            env = self._env
        try:
            return env.get_template(file).render(**context).strip() + "\n"
        except jinja2.TemplateNotFound as e:
            raise GenerationError(f"prompt template {e.name!r} not found (built-in folder {builtin_dir()}"
                                  f"{', override folder ' + str(self.override_dir) if self.override_dir else ''})"
                                  ) from None
        except jinja2.TemplateError as e:
            where = f"{file}:{getattr(e, 'lineno', '?')}"
            raise GenerationError(f"prompt template {where}: {e}") from None

    def example(self, name: str) -> str:
        """A file from prompts/examples/ (override folder first)."""
        if self.override_dir is not None and (self.override_dir / "examples" / name).is_file():
            return (self.override_dir / "examples" / name).read_text(encoding="utf-8")
        res = importlib.resources.files(PACKAGE) / "examples" / name
        if not res.is_file():
            raise GenerationError(f"prompt example {name!r} not found")
        return res.read_text(encoding="utf-8")
