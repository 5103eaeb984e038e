"""ctxsel: decide how much of a long context a language model should read.

    >>> import ctxsel
    >>> sel = ctxsel.select("Who wrote it?", ["...", "..."], method="adaptive-k", scores=[0.9, 0.1])
    >>> sel.ids, sel.explanation

Importing ctxsel loads numpy only; models load when a feature needs them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxsel._version import __version__
from ctxsel.pipeline import Pipeline
from ctxsel.query import Query
from ctxsel.ranking import Ranking
from ctxsel.selectors import available_methods, get_selector, register
from ctxsel.selectors.base import Selector
from ctxsel.stages import Stage, available_stages, register_stage
from ctxsel.types import Chunk, ChunkLike, Example, LLMUsage, Selection


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


#: Add a method from outside the package: ``ctxsel.register_method("my-cut", MyCut, main_param="k")``.
register_method = register

__all__ = [
    "Chunk",
    "Example",
    "LLMUsage",
    "Pipeline",
    "Query",
    "Ranking",
    "Selection",
    "Stage",
    "__version__",
    "available_methods",
    "available_stages",
    "get_selector",
    "register_method",
    "register_stage",
    "select",
]
