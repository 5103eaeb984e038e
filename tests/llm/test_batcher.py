"""BatchingClient: one-prompt calls from many threads are answered in batches, each with its own reply."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from ctxsel.errors import LLMServerError
from ctxsel.llm.base import Completion, has_complete_many
from ctxsel.llm.batcher import BatchingClient
from ctxsel.types import LLMUsage


class Upper:
    """Replies with the prompt upper-cased (and max_tokens); fails on prompts that say 'fail'."""

    model_id = "upper"

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.lock = threading.Lock()

    def _one(self, p: str, max_tokens: int) -> Completion:
        if "fail" in p:
            raise LLMServerError("scripted failure", status_code=500)
        return Completion(f"{p.upper()}:{max_tokens}", LLMUsage(1, len(p), 1))

    def complete(self, prompt: str, *, max_tokens: int = 8, **kw: Any) -> Completion:
        return self._one(prompt, max_tokens)

    def complete_many(self, prompts: list[str], *, max_tokens: int = 8, **kw: Any) -> list[Completion]:
        with self.lock:
            self.batches.append(list(prompts))
        return [self._one(p, max_tokens) for p in prompts]


def test_concurrent_calls_meet_in_batches_and_each_gets_its_reply() -> None:
    inner = Upper()
    client = BatchingClient(inner, settle_s=0.05)
    assert has_complete_many(client) and client.model_id == "upper"
    barrier = threading.Barrier(16)

    def ask(i: int) -> str:
        barrier.wait()
        return client.complete(f"q{i}", max_tokens=4).text

    with ThreadPoolExecutor(16) as pool:
        got = list(pool.map(ask, range(16)))
    assert got == [f"Q{i}:4" for i in range(16)]
    assert sum(len(b) for b in inner.batches) == 16 and len(inner.batches) < 16  # some calls shared a batch
    assert max(len(b) for b in inner.batches) > 1


def test_calls_with_other_settings_go_in_separate_batches() -> None:
    inner = Upper()
    client = BatchingClient(inner, settle_s=0.05)
    barrier = threading.Barrier(6)

    def ask(i: int) -> str:
        barrier.wait()
        return client.complete(f"q{i}", max_tokens=2 + i % 2).text

    with ThreadPoolExecutor(6) as pool:
        got = list(pool.map(ask, range(6)))
    assert got == [f"Q{i}:{2 + i % 2}" for i in range(6)]
    for b in inner.batches:  # a batch never mixes max_tokens
        assert len({int(p[1:]) % 2 for p in b}) == 1


def test_a_failing_prompt_fails_only_its_own_call() -> None:
    client = BatchingClient(Upper(), settle_s=0.05)
    barrier = threading.Barrier(4)

    def ask(p: str) -> str:
        barrier.wait()
        try:
            return client.complete(p).text
        except LLMServerError as e:
            return f"error: {e}"

    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(ask, ["a", "fail", "b", "c"]))
    assert got[0] == "A:8" and got[2:] == ["B:8", "C:8"] and "scripted failure" in got[1]
    with pytest.raises(LLMServerError):
        client.complete("fail again")  # alone, after the worker went idle or not
