"""Fixtures of the language-server tests (helpers live in lsp_helpers.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One build cache for the whole session (XDG_CACHE_HOME of every server started here)."""
    env = os.environ.get("KERNEL_LSP_TEST_CACHE")
    if env:
        return Path(env)
    return tmp_path_factory.mktemp("xdg-cache")


@pytest.fixture
def endpoint():
    """`endpoint(script)`: a started ScriptedEndpoint (see endpoint_double.py), stopped after the test."""
    from endpoint_double import ScriptedEndpoint

    made: list[ScriptedEndpoint] = []

    def make(script: str = "good") -> ScriptedEndpoint:
        e = ScriptedEndpoint(script)
        e.start()
        made.append(e)
        return e

    yield make
    for e in made:
        e.stop()
