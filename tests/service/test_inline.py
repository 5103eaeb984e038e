"""Small score-only cuts run on the event loop (``Service.runs_inline``), everything else in a worker
thread; both paths answer exactly what the Python API gives."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
import numpy as np
import pytest

pytest.importorskip("fastapi")
import ctxsel
from ctxsel.service import ServiceSettings
from ctxsel.service.models import SelectRequest
from ctxsel.service.service import Service

CHUNKS = [f"paragraph {i} about topic {i % 7}" for i in range(40)]
SCORES = [float(x) for x in np.random.default_rng(3).random(40)]


def request(**fields: Any) -> SelectRequest:
    return SelectRequest.model_validate({"question": "which topic?", "chunks": CHUNKS, **fields})


@pytest.mark.parametrize(
    ("fields", "inline"),
    [
        ({"scores": SCORES}, True),  # adaptive-k, the default
        ({"scores": SCORES, "method": "top-k@5"}, True),
        ({"scores": SCORES, "method": "threshold[tau=0.5]"}, True),
        ({"scores": SCORES, "method": "autocut@2"}, True),
        ({"scores": SCORES, "method": "adaptive-k[max_tokens=50]"}, False),  # a budget counts every chunk
        ({"scores": SCORES, "method": "top-k@5", "options": {"max_tokens": 50}}, False),
        ({"scores": SCORES, "method": "top-n-tokens@100"}, False),
        ({"scores": SCORES, "method": "full"}, False),
        ({"scores": SCORES, "expand": "links"}, False),
        ({}, False),  # the server's scorer scores
        ({"scores": SCORES, "method": "no-such-method"}, False),  # the worker raises it, in the usual words
    ],
)
def test_which_requests_run_inline(fields: dict[str, Any], inline: bool) -> None:
    assert Service.runs_inline(request(**fields)) is inline


def test_more_than_1000_chunks_go_to_a_worker() -> None:
    texts = [f"t{i}" for i in range(1001)]
    req = SelectRequest.model_validate({"question": "q", "chunks": texts, "scores": [0.5] * 1001})
    assert not Service.runs_inline(req)
    assert Service.runs_inline(req.model_copy(update={"chunks": texts[:1000], "scores": [0.5] * 1000}))


@pytest.mark.parametrize(("method", "worker_calls"), [("adaptive-k", 0), ("top-k@3", 0), ("top-n-tokens@20", 1)])
def test_both_paths_answer_what_python_gives(
    service_client: Any, monkeypatch: pytest.MonkeyPatch, method: str, worker_calls: int
) -> None:
    client = service_client(ServiceSettings(scorer="keywords"))
    calls = []
    real = anyio.to_thread.run_sync

    async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(fn)
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counted)
    resp = client.post(
        "/select", json={"question": "which topic?", "chunks": CHUNKS, "scores": SCORES, "method": method}
    )
    assert resp.status_code == 200, resp.text
    assert len(calls) == worker_calls
    want = ctxsel.select("which topic?", CHUNKS, scores=SCORES, method=method)
    body = resp.json()
    assert body["ids"] == want.ids and body["explanation"] == want.explanation
    assert [c["n_tokens"] for c in body["chunks"]] == [c.n_tokens for c in want.chunks]
