"""Shared helpers for the evaluator's tests: tiny references, C++ (CPU) candidates, shared Evaluators.

C++ builds with torch headers take tens of seconds on a small CI machine, so every test in a session shares one
build cache (set KLSP_TEST_CACHE to keep it across sessions) and the Evaluators are session-scoped.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from eval_helpers import fast_settings

from evaluator import Evaluator


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    env = os.environ.get("KLSP_TEST_CACHE")
    if env:
        Path(env).mkdir(parents=True, exist_ok=True)
        return env
    return str(tmp_path_factory.mktemp("klsp-build-cache"))


@pytest.fixture(scope="session")
def ev(cache_dir: str):
    with Evaluator(fast_settings(cache_dir)) as e:
        yield e


@pytest.fixture(scope="session")
def kc_ev(cache_dir: str):
    """The product's defaults for "is it a kernel?" (a profile of every candidate's forward)."""
    with Evaluator(fast_settings(cache_dir, kernel_check=True)) as e:
        yield e


@pytest.fixture(scope="session")
def lab_ev(cache_dir: str):
    """Screen findings not enforced and short run timeouts: for the isolation (fault) tests."""
    with Evaluator(fast_settings(cache_dir, screen_rejects=False, run_timeout=6.0, compile_workers=1)) as e:
        yield e


