"""Shared test setup.

- Every test session gets its own embedding-cache folder (``CTXSEL_CACHE_DIR``),
  so nothing is ever written to ``~/.cache``; subprocesses inherit it.
- Hugging Face stays offline: nothing is downloaded at run time.
- ``server``: the fake OpenAI-compatible server (tests.support.fake_server), one per test.
- Tests marked ``model`` run torch on one thread (the machine has 2 cores and
  the rest of the suite may run beside it); other tests never import torch.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_server import FakeOpenAIServer


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


@pytest.fixture
def service_client() -> Iterator[Callable[..., Any]]:
    """``service_client(settings, **app_options)``: an in-process client of ``create_app(settings,
    **app_options)`` (``scorer=`` a scorer object), returned once the server says it is ready (it warms
    its scorer in the background first)."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from ctxsel.service import create_app

    with contextlib.ExitStack() as stack:

        def make(settings: Any, **app_options: Any) -> Any:
            client = stack.enter_context(TestClient(create_app(settings, **app_options)))
            end = time.monotonic() + 60
            while client.get("/health").json()["status"] == "starting" and time.monotonic() < end:
                time.sleep(0.02)
            return client

        yield make


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    """The fake OpenAI-compatible server, one per test."""
    with FakeOpenAIServer() as s:
        yield s
