"""ctxsel.Client against a real `ctxsel serve` process: the same Selection as ctxsel.select, sync and
from an event loop, and the server's errors as ctxsel's."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

import ctxsel
from ctxsel.client import UNREACHABLE
from ctxsel.errors import InputError, InputTypeError, ServiceError
from ctxsel.types import Chunk
from tests.support.server_process import ServerProcess

POOL = [
    Chunk("intro", "The museum is open at nine and closes at five.", doc_id="guide", position=0, meta={"page": 1}),
    Chunk("rock", "The meteorite in the museum weighs 300 kg.", doc_id="guide", position=1),
    Chunk("fees", "Tickets cost 5 euros for adults and 2 for children.", doc_id="guide", position=2),
    Chunk("cafe", "A cafe on the ground floor sells coffee and cake.", doc_id="annex", position=0),
]
QUESTION = "How heavy is the meteorite in the museum?"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with ServerProcess(["--scorer", "keywords"], token="secret") as srv:
        yield srv


def test_the_client_returns_what_select_returns_over_the_callers_chunks(server: ServerProcess) -> None:
    with ctxsel.Client(server.base_url, token="secret") as client:
        assert client.health()["status"] == "ok"
        remote = client.select(QUESTION, POOL, "top-k@2", stages=["reorder"])
    local = ctxsel.select(QUESTION, POOL, "top-k@2", scorer="keywords", stages=["reorder"])
    assert remote.ids == local.ids == ["rock", "intro"]
    assert remote.scores == local.scores and remote.explanation == local.explanation
    assert remote.reading_order == local.reading_order and remote.n_tokens == local.n_tokens
    assert remote.chunks[1] is POOL[0] and remote.chunks[1].meta == {"page": 1}  # the caller's own objects
    assert remote.to_dict()["chunks"] == local.to_dict()["chunks"]


def test_aselect_runs_requests_concurrently_in_a_real_event_loop(server: ServerProcess) -> None:
    questions = [QUESTION, "What do tickets cost for children?", "Where can I get coffee?"]

    async def main() -> list[ctxsel.Selection]:
        async with ctxsel.Client(server.base_url, token="secret") as client:
            return await asyncio.gather(*(client.aselect(q, POOL, "top-k@1") for q in questions))

    got = asyncio.run(main())
    assert [s.ids for s in got] == [["rock"], ["fees"], ["cafe"]]
    assert [s.ids for s in got] == [ctxsel.select(q, POOL, "top-k@1", scorer="keywords").ids for q in questions]


def test_the_servers_refusals_are_ctxsels_errors(server: ServerProcess) -> None:
    with ctxsel.Client(server.base_url, token="secret") as client:
        with pytest.raises(InputError) as remote:
            client.select(QUESTION, POOL, "top-k@1", min_k=-1)
        with pytest.raises(InputError) as local:
            ctxsel.select(QUESTION, POOL, "top-k@1", scorer="keywords", min_k=-1)
        assert str(local.value) in str(remote.value)
        with pytest.raises(InputTypeError, match="got a single str"):  # checked here, as select checks it
            client.select(QUESTION, "one text")
        with pytest.raises(InputError, match="takes no scorer"):
            client.select(QUESTION, POOL, scorer="dense")
    with ctxsel.Client(server.base_url, token="wrong") as stranger, pytest.raises(ServiceError) as denied:
        stranger.select(QUESTION, POOL)
    assert denied.value.status_code == 401 and denied.value.error == "unauthorized"


def test_a_server_that_is_not_there_is_one_clear_error() -> None:
    with ctxsel.Client("http://127.0.0.1:9", timeout=5) as client, pytest.raises(ServiceError) as gone:
        client.select(QUESTION, POOL)
    assert gone.value.status_code == UNREACHABLE and "no answer from http://127.0.0.1:9" in str(gone.value)
    with pytest.raises(InputError, match="base_url must be an http"):
        ctxsel.Client("127.0.0.1:8000")
