"""The Python API: :func:`select` for one question, :func:`select_many` for many, :func:`aselect` for async code.

:func:`select_many` builds the method and its scorer once and reads every question through them: a
pool shared by the questions is checked, counted and embedded once (the scorer keeps its vectors and
its BM25 index between questions), where a loop of :func:`select` builds a scorer per call.
:func:`aselect` is :func:`select` for an event loop: the work runs in a worker thread, so the loop
goes on serving while a pool is scored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from ctxsel.errors import InputError, InputTypeError
from ctxsel.pipeline import Pipeline
from ctxsel.query import Query
from ctxsel.selectors.base import Selector
from ctxsel.stages import Stage
from ctxsel.types import Chunk, ChunkLike, Selection


def select(
    question: str,
    chunks: Sequence[ChunkLike],
    method: str | Selector = "adaptive-k",
    scores: Sequence[float] | Any | None = None,
    *,
    scorer: Any = None,
    choices: Sequence[str] | None = None,
    expand: str | Any = None,
    rerank: str | Any = None,
    stages: str | Sequence[str | Stage] | None = None,
    **options: Any,
) -> Selection:
    """Pick the chunks of ``chunks`` a reader should see for ``question``.

    ``method`` is a registered name or spec (``"top-k@5"``,
    ``"adaptive-k[strategy=moving_avg]"``) or a Selector; ``options`` go to the selector
    (``min_k``, ``max_tokens``, ``buffer``...; ``llm=`` for methods that call an
    LLM). ``choices`` are a multiple-choice question's options, for methods
    that read them (``sage``). Without ``scores``, a score-based method scores with ``scorer`` (a Scorer, or a name:
    ``"cascade"`` -- the default: MiniLM and BM25 over the pool, nomic-embed-text-v1.5 over its head --,
    ``"dense"`` (the bundled MiniLM), ``"bm25"``, ``"keywords"``, ``"hybrid"``, with options:
    ``"dense[long_chunks=max_window]"``); text the model's window cut is counted in ``meta["truncated"]``.

    ``expand`` re-ranks before the cut (``"hop"``, ``"links"``, ``"hop+links[m=3]"``; see
    :mod:`ctxsel.ranking`): it works on given ``scores`` too (the second hop then
    scores with ``scorer``), and the Selection's ``meta["expansion"]`` says which chunks
    came in by expansion and from where. Off by default.

    ``rerank`` is a second stage, ``"SCORER@M"`` (``"dense[model=nomic-v1.5]@50"``; see
    :mod:`ctxsel.ranking.rerank`): the second scorer re-scores the top M chunks of the first
    ranking (``scorer``'s or the given ``scores``) before expansion and the cut, and
    ``meta["rerank"]`` names it. Off by default. ``scorer`` may also be a whole
    :class:`~ctxsel.ranking.Ranking` chain (then without ``expand`` and ``rerank``).

    ``stages`` run after the cut, in order (``["reorder"]``: lost-in-the-middle reading order;
    see :mod:`ctxsel.stages`).

    ``question`` must be a non-empty string and ``chunks`` a sequence (one str is a TypeError, not
    one chunk per character) of texts, Chunks or ``{"id", "text", ...}`` dicts as HTTP takes them
    (an integer id becomes its decimal string). A dict of id -> text, a set and one chunk object in
    place of the list are refused with the reason (a dict would be read by its keys, a set has no
    order); tuples, numpy arrays of texts and generators are read once, in order.

    Limits, the same on the command line and over HTTP (:mod:`ctxsel.inputs`): a question of at most
    100,000 characters, and not only whitespace, control or format characters, combining marks and
    Hangul fillers; a chunk id or doc_id of at most 1,024 characters; a spec of at most 1,000; a
    chunk's ``n_tokens`` a whole number from 0 to 1,000,000,000. Text that is not valid Unicode (a
    lone surrogate) is refused in a question, a text or an id.
    """
    # one order of checks on every surface: the inputs (the Query), then the method and its options
    query = Query(question, chunks, scores, choices=choices)
    return Pipeline.from_spec(method, scorer=scorer, expand=expand, rerank=rerank, stages=stages, **options).run(query)


def _is_pool(item: Any) -> bool:
    """Whether one item of ``chunks`` is itself a pool (a list of chunks), not one chunk."""
    return not isinstance(item, (str, bytes, Chunk, Mapping)) and isinstance(item, Sequence)


def _per_question(values: Any, n: int, what: str) -> list[Any]:
    """``values`` as one entry per question (None: None for each); a count that differs is an error."""
    if values is None:
        return [None] * n
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise InputTypeError(f"{what} must be a list with one entry per question, got {type(values).__name__}")
    if len(values) != n:
        raise InputError(f"{what} has {len(values)} entries for {n} questions: give one per question")
    return list(values)


def select_many(
    questions: Sequence[str],
    chunks: Sequence[ChunkLike] | Sequence[Sequence[ChunkLike]],
    method: str | Selector = "adaptive-k",
    scores: Sequence[Any] | None = None,
    *,
    scorer: Any = None,
    choices: Sequence[Sequence[str] | None] | None = None,
    expand: str | Any = None,
    rerank: str | Any = None,
    stages: str | Sequence[str | Stage] | None = None,
    **options: Any,
) -> list[Selection]:
    """One :class:`~ctxsel.types.Selection` per question, in order, as :func:`ctxsel.select` gives it.

    ``chunks`` is one pool every question reads (a list of texts, Chunks or dicts), or one pool per
    question (a list of such lists, as long as ``questions``). ``scores`` and ``choices``, when
    given, hold one entry per question. The other arguments are :func:`ctxsel.select`'s, applied to
    every question; every question is checked before any is scored.
    """
    if isinstance(questions, str) or not isinstance(questions, Sequence):
        raise InputTypeError(f"questions must be a list of strings, got {type(questions).__name__}")
    n = len(questions)
    if isinstance(chunks, (str, bytes)) or not isinstance(chunks, Sequence):
        raise InputTypeError(f"chunks must be a list of chunks or a list of pools, got {type(chunks).__name__}")
    per_pool = bool(len(chunks)) and _is_pool(chunks[0])
    pools: list[Any] = _per_question(chunks, n, "chunks (one pool per question)") if per_pool else [chunks] * n
    queries: list[Query] = []
    for q, pool, s, c in zip(
        questions, pools, _per_question(scores, n, "scores"), _per_question(choices, n, "choices")
    ):
        if not per_pool and queries:
            pool = queries[0].chunks  # the shared pool, checked and counted once for every question
        queries.append(Query(q, pool, s, choices=c))
    pipeline = Pipeline.from_spec(method, scorer=scorer, expand=expand, rerank=rerank, stages=stages, **options)
    return [pipeline.run(query) for query in queries]


async def aselect(
    question: str,
    chunks: Sequence[ChunkLike],
    method: str | Selector = "adaptive-k",
    scores: Sequence[float] | Any | None = None,
    **kwargs: Any,
) -> Selection:
    """:func:`select` without blocking the event loop: the same arguments, errors and result,
    the work in a worker thread (:func:`asyncio.to_thread`)."""
    return await asyncio.to_thread(select, question, chunks, method, scores, **kwargs)


__all__ = ["aselect", "select", "select_many"]
