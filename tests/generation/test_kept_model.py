"""One model kept open for a process's jobs: opened by the first job, lent to the next ones, replaced (after its last
job) when the model settings change, closed when unused for a while or when the process ends. The last test uses
the real embedded GGUF through the workspace's services, as the language server's jobs do."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from kernel_lsp.config import Settings
from kernel_lsp.generation.backends import BackendSpec
from kernel_lsp.generation.backends.kept import KeptModel
from kernel_lsp.generation.errors import BackendUnavailable

A = Settings(endpoint="http://127.0.0.1:9/v1", endpoint_model="a")
B = Settings(endpoint="http://127.0.0.1:9/v1", endpoint_model="b")


class Opened:
    def __init__(self, spec: BackendSpec) -> None:
        self.spec = spec
        self.closed = False
        self.name = dict(spec[1]).get("model", "?")

    def close(self) -> None:
        assert not self.closed, "closed twice"
        self.closed = True


def keeper(idle_s: float = 60.0) -> tuple[KeptModel, list[Opened]]:
    opened: list[Opened] = []

    def opener(spec: BackendSpec) -> Opened:
        opened.append(Opened(spec))
        return opened[-1]

    return KeptModel(idle_s, opener), opened  # type: ignore[arg-type]


def test_jobs_share_one_model_and_new_settings_replace_it_after_its_last_job() -> None:
    kept, opened = keeper()
    m1, give1 = kept.use(A)
    m2, give2 = kept.use(A.replace(temperature=0.1))  # a setting the model does not depend on
    assert m1 is m2 and len(opened) == 1
    give1()
    give1()  # given back twice by mistake: counted once
    m3, give3 = kept.use(B)  # new model settings while a job still uses the old model
    assert m3 is not m1 and len(opened) == 2 and not m1.closed
    give2()
    assert m1.closed and not m3.closed  # its last job is done
    give3()
    assert not m3.closed  # kept for the next job
    m4, give4 = kept.use(B)
    assert m4 is m3 and len(opened) == 2
    give4()
    kept.close()
    assert all(m.closed for m in opened)


def test_an_unused_model_is_closed_after_a_while_and_opened_again_by_the_next_job() -> None:
    kept, opened = keeper(idle_s=0.2)
    m1, give = kept.use(A)
    time.sleep(0.4)
    assert not m1.closed  # in use: never closed for idleness
    give()
    deadline = time.monotonic() + 10
    while not m1.closed and time.monotonic() < deadline:
        time.sleep(0.05)
    assert m1.closed
    m2, give2 = kept.use(A)
    assert m2 is not m1 and not m2.closed and len(opened) == 2
    give2()
    kept.close()
    assert m2.closed


def test_a_model_that_does_not_exist_fails_as_opening_it_does(tmp_path: Path) -> None:
    kept, opened = keeper()
    with pytest.raises(BackendUnavailable):
        kept.use(Settings(model=str(tmp_path / "missing.gguf")))
    assert opened == []


def test_jobs_at_once_get_the_same_model() -> None:
    kept, opened = keeper()
    got: list[object] = []
    lock = threading.Lock()

    def job() -> None:
        m, give = kept.use(A)
        with lock:
            got.append(m)
        give()

    threads = [threading.Thread(target=job) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(got) == 8 and len(opened) == 1 and all(m is opened[0] for m in got)
    kept.close()


@pytest.mark.model
def test_the_services_jobs_load_the_embedded_model_once(tmp_path: Path) -> None:
    """Two jobs of a workspace's services in a row (two clicks in the editor): the second finds the model loaded
    by the first and answers with it; the services' end closes it."""
    from kernel_lsp.services import WorkspaceServices

    class NoEvaluator:
        def close(self) -> None:
            pass

    services = WorkspaceServices(Settings(), tmp_path, make_evaluator=lambda es: NoEvaluator())  # type: ignore[arg-type,return-value]
    first = services.engine()
    model = first.backend
    model.chat([{"role": "user", "content": "Say hi."}], max_tokens=4, temperature=0.0, seed=1)
    assert model.loaded
    first.close()
    assert model.loaded  # given back, not closed
    second = services.engine()
    assert second.backend is model and model.loaded
    t0 = time.perf_counter()
    c = second.backend.chat([{"role": "user", "content": "Say hi."}], max_tokens=4, temperature=0.0, seed=1)
    assert c.completion_tokens > 0 and time.perf_counter() - t0 < 60
    second.close()
    services.close()
    assert not model.loaded

