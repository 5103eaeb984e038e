"""Shared test setup.

- Every test session gets its own embedding-cache folder (``CTXSEL_CACHE_DIR``),
  so nothing is ever written to ``~/.cache``; subprocesses inherit it.
- Hugging Face stays offline: nothing is downloaded at run time.
- Tests marked ``model`` run torch on one thread (the machine has 2 cores and
  the rest of the suite may run beside it); other tests never import torch.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    cache_dir = tmp_path_factory.mktemp("ctxsel-cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("CTXSEL_CACHE_DIR", str(cache_dir))
    mp.setenv("HF_HUB_OFFLINE", "1")
    mp.setenv("TRANSFORMERS_OFFLINE", "1")
    mp.delenv("CTXSEL_DEBUG", raising=False)
    yield cache_dir
    mp.undo()


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """torch on one thread for the test (2 cores, and the rest of the suite beside it)."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _one_torch_thread_in_model_tests(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("model") is not None:
        request.getfixturevalue("one_torch_thread")


@pytest.fixture
def cache_dir() -> Path:
    """The session's cache folder (what ``CTXSEL_CACHE_DIR`` points to)."""
    return Path(os.environ["CTXSEL_CACHE_DIR"])
