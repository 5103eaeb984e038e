"""Query: one selection's inputs, checked once, where they are built.

Every surface (``ctxsel.select``, :class:`~ctxsel.pipeline.Pipeline`, a method's
public ``select``, the service, the framework components, ``ctxsel eval``) builds
one Query, and nothing after it checks the question, the chunks or the scores
again: a method's ``_select(query, scores)`` trusts what it is given.

The pool is columnar where it can be: a list of texts becomes a
:class:`~ctxsel.types.TextChunks`, whose Chunk objects are made (and counted)
only for the chunks a selection returns.

    q = Query("How heavy is it?", ["It weighs 3 kg.", "It is blue."], scores=[0.9, 0.1])
    q.question, len(q.chunks), q.scores
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ctxsel.errors import InputTypeError
from ctxsel.inputs import as_scores, check_question, scores_count_error
from ctxsel.types import Chunk, ChunkLike, as_chunks, token_counts


class Query:
    """A checked question over a checked pool of chunks, with optional given scores.

    ``question`` is a non-empty string; ``chunks`` texts, Chunks or ``{"id", "text", ...}``
    mappings (ids unique); ``scores`` one number per chunk, or None; ``choices`` a
    multiple-choice question's answer options; ``gold_ids`` the example's gold chunks (only
    reference methods such as the oracle read them). Immutable once built.
    """

    __slots__ = ("choices", "chunks", "gold_ids", "question", "scores")

    question: str
    chunks: Sequence[Chunk]
    scores: np.ndarray | None
    choices: tuple[str, ...]
    gold_ids: tuple[str, ...]

    def __init__(
        self,
        question: str,
        chunks: Sequence[ChunkLike],
        scores: Sequence[float] | np.ndarray | None = None,
        *,
        choices: Sequence[str] | None = None,
        gold_ids: Sequence[str] | None = None,
    ) -> None:
        # one order of checks on every surface: question, chunks, scores, then the rest
        put = object.__setattr__
        put(self, "question", check_question(question))
        pool = as_chunks(chunks)
        put(self, "chunks", pool)
        arr = None
        if scores is not None:
            arr = as_scores(scores)
            if arr.shape[0] != len(pool):
                raise scores_count_error(arr.shape[0], len(pool))
        put(self, "scores", arr)
        put(self, "choices", _strings(choices, "choices"))
        put(self, "gold_ids", _strings(gold_ids, "gold_ids"))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Query is immutable: build a new one instead of setting {name!r}")

    def __len__(self) -> int:
        return len(self.chunks)

    def token_counts(self, read: bool = True) -> np.ndarray:
        """The chunks' token counts as an int64 array; ``read=False``: zeros for texts not yet
        counted (a caller that will not read them counts only what it keeps)."""
        return token_counts(self.chunks, read=read)

    def __repr__(self) -> str:
        given = "given" if self.scores is not None else "none"
        return f"Query(question={self.question!r}, chunks={len(self.chunks)}, scores={given})"


def _strings(items: Sequence[str] | None, what: str) -> tuple[str, ...]:
    """Answer options or gold ids as a tuple of strings; one str in place of the list is refused."""
    if items is None:
        return ()
    if isinstance(items, (str, bytes)) or not hasattr(items, "__iter__"):
        raise InputTypeError(f"{what} must be a list of strings, got {type(items).__name__}")
    return tuple(str(i) for i in items)


__all__ = ["Query"]
