"""Token counts are remembered per text: each text is encoded once (an LRU shared by every caller)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import ctxsel.tokens as tokens
from ctxsel.types import Chunk


class FakeEncoding:
    def __init__(self) -> None:
        self.encoded: list[str] = []

    def encode(self, text: str, disallowed_special=()) -> list[int]:
        self.encoded.append(text)
        return list(range(len(text.split())))

    def encode_batch(self, texts: list[str], disallowed_special=()) -> list[list[int]]:
        return [self.encode(t) for t in texts]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeEncoding]:
    enc = FakeEncoding()
    monkeypatch.setattr(tokens, "_encoding", lambda: enc)
    tokens.clear_count_cache()
    yield enc
    tokens.clear_count_cache()


def test_each_text_is_encoded_once(fake: FakeEncoding) -> None:
    assert tokens.count_tokens("one two three") == 3
    assert tokens.count_tokens("one two three") == 3
    assert Chunk(id="a", text="one two three").n_tokens == 3  # Chunk counts through the same cache
    assert fake.encoded == ["one two three"]


def test_batch_encodes_only_new_distinct_texts(fake: FakeEncoding) -> None:
    tokens.count_tokens("a b")
    assert tokens.count_tokens_batch(["a b", "c", "c", "d e f"]) == [2, 1, 1, 3]
    assert fake.encoded == ["a b", "c", "d e f"]
    assert tokens.count_tokens_batch([]) == []


def test_a_batch_of_known_texts_refreshes_them_in_the_lru(fake: FakeEncoding, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "COUNT_CACHE_SIZE", 3)
    tokens.count_tokens_batch(["x", "y", "z"])
    assert tokens.count_tokens_batch(["x"]) == [1]  # a hit: x is now the most recent
    tokens.count_tokens_batch(["w", "y"])  # y a hit, w new: evicts z, the least recently used
    assert list(tokens._counts) == ["x", "y", "w"]
    assert fake.encoded == ["x", "y", "z", "w"]


def test_lru_evicts_the_least_recently_used(fake: FakeEncoding, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "COUNT_CACHE_SIZE", 2)
    tokens.count_tokens("x")
    tokens.count_tokens("y")
    tokens.count_tokens("x")  # x is now the most recent
    tokens.count_tokens("z")  # evicts y
    assert list(tokens._counts) == ["x", "z"]
    tokens.count_tokens("y")
    assert fake.encoded == ["x", "y", "z", "y"]


def test_explicit_counts_are_not_recounted(fake: FakeEncoding) -> None:
    assert Chunk(id="a", text="one two", n_tokens=7).n_tokens == 7
    assert fake.encoded == []
