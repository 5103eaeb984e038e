"""select_many (one method and scorer for many questions) and aselect (select from an event loop)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import numpy as np
import pytest

import ctxsel
from ctxsel.errors import InputError, InputTypeError
from ctxsel.types import Chunk
from tests.support.event_loop import ticks_while

POOL = [
    "The meteorite in the museum weighs 300 kg.",
    "Tickets cost 5 euros for adults and 2 for children.",
    "The museum is open at nine and closes at five.",
    "The meteorite fell in 1922 near the village.",
    "A cafe on the ground floor sells coffee.",
]
QUESTIONS = ["How heavy is the meteorite?", "When is the museum open?", "What do tickets cost?"]


class CountingScorer:
    """Keyword overlap that counts the pools it scores and how many distinct chunk objects it saw."""

    name = "counting"

    def __init__(self, delay: float = 0.0) -> None:
        self.calls = 0
        self.pools: set[int] = set()
        self.delay = delay
        self.threads: set[str] = set()

    def score(self, question: str, chunks: Sequence[Chunk]) -> np.ndarray:
        self.calls += 1
        self.pools.add(id(chunks[0]))
        self.threads.add(threading.current_thread().name)
        time.sleep(self.delay)
        words = set(question.lower().strip("?").split())
        return np.array([len(words & set(c.text.lower().strip(".").split())) for c in chunks], dtype=float)


def test_select_many_gives_what_a_loop_of_select_gives() -> None:
    many = ctxsel.select_many(QUESTIONS, POOL, "top-k@2", scorer="keywords")
    loop = [ctxsel.select(q, POOL, "top-k@2", scorer="keywords") for q in QUESTIONS]
    assert [s.ids for s in many] == [s.ids for s in loop]
    assert [s.explanation for s in many] == [s.explanation for s in loop]
    assert many[0].ids[0] == "0" and many[1].ids[0] == "2" and many[2].ids[0] == "1"


def test_one_scorer_and_one_checked_pool_serve_every_question() -> None:
    scorer = CountingScorer()
    sels = ctxsel.select_many(QUESTIONS, POOL, "top-k@1", scorer=scorer)
    assert scorer.calls == 3 and len(scorer.pools) == 1  # the pool was made into Chunks once
    assert [s.ids for s in sels] == [["0"], ["2"], ["1"]]


def test_one_pool_per_question_and_scores_per_question() -> None:
    pools = [POOL[:2], POOL[2:]]
    sels = ctxsel.select_many(QUESTIONS[:2], pools, "top-k@1", scores=[[0.1, 0.9], [0.2, 0.3, 0.9]])
    assert [s.ids for s in sels] == [["1"], ["2"]] and [s.n_candidates for s in sels] == [2, 3]
    choices = ctxsel.select_many(QUESTIONS[:2], POOL, "top-k@1", scores=[[1, 0, 0, 0, 0]] * 2, choices=[["a"], None])
    assert [s.ids for s in choices] == [["0"], ["0"]]


@pytest.mark.parametrize(
    ("questions", "chunks", "given", "error", "message"),
    [
        ("How heavy?", POOL, {}, InputTypeError, "questions must be a list of strings, got str"),
        (QUESTIONS, "one text", {}, InputTypeError, "chunks must be a list of chunks or a list of pools, got str"),
        (QUESTIONS, [POOL, POOL], {}, InputError, "chunks .one pool per question. has 2 entries for 3 questions"),
        (QUESTIONS, POOL, {"scores": [[1.0] * 5]}, InputError, "scores has 1 entries for 3 questions"),
        (QUESTIONS, POOL, {"scores": [[1.0] * 5, [1.0] * 5, [1.0] * 4]}, InputError, "4 scores for 5 chunks"),
        (["ok?", "", "fine?"], POOL, {}, InputError, "question"),
    ],
)
def test_bad_batches_are_refused_before_anything_is_scored(
    questions: object, chunks: object, given: dict[str, object], error: type[Exception], message: str
) -> None:
    scorer = CountingScorer()
    with pytest.raises(error, match=message):
        ctxsel.select_many(questions, chunks, "top-k@1", scorer=scorer, **given)  # type: ignore[arg-type]
    assert scorer.calls == 0


def test_aselect_does_not_block_the_event_loop() -> None:
    scorer = CountingScorer(delay=0.5)

    sel, ticks = ticks_while(lambda: ctxsel.aselect(QUESTIONS[0], POOL, "top-k@1", scorer=scorer))
    assert sel.ids == ["0"] and ticks >= 10  # the loop ran on while the pool was scored
    assert threading.main_thread().name not in scorer.threads


def test_aselect_raises_what_select_raises() -> None:
    with pytest.raises(InputTypeError) as sync_error:
        ctxsel.select("q?", "one text")
    with pytest.raises(InputTypeError) as async_error:
        asyncio.run(ctxsel.aselect("q?", "one text"))
    assert str(async_error.value) == str(sync_error.value)
