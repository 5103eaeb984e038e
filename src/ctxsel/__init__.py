"""ctxsel: decide how much of a long context a language model should read.

    >>> import ctxsel
    >>> sel = ctxsel.select("Who wrote it?", ["...", "..."], method="adaptive-k", scores=[0.9, 0.1])
    >>> sel.ids, sel.explanation

Importing ctxsel loads numpy only; models load when a feature needs them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxsel.inputs import check_question
from ctxsel.selectors import available_methods, get_selector
from ctxsel.types import Chunk, Example, LLMUsage, Selection, as_chunks

__version__ = "0.1.0"


def select(
    question: str,
    chunks: Sequence[Chunk | str],
    method: str = "adaptive-k",
    scores: Sequence[float] | Any | None = None,
    *,
    scorer: Any = None,
    choices: Sequence[str] | None = None,
    expand: str | Any = None,
    **options: Any,
) -> Selection:
    """Pick the chunks of ``chunks`` a reader should see for ``question``.

    ``method`` is a registered name or spec (``"top-k@5"``,
    ``"adaptive-k[strategy=moving_avg]"``); ``options`` go to the selector
    (``min_k``, ``max_tokens``, ``buffer``...; ``llm=`` for methods that call an
    LLM). ``choices`` are a multiple-choice question's options, for methods
    that read them (``sage``). Without ``scores``, a score-based method scores with ``scorer`` (a Scorer, or a name:
    ``"dense"`` -- the default, bundled MiniLM --, ``"bm25"``, ``"keywords"``, ``"hybrid"``, with options:
    ``"dense[long_chunks=max_window]"``); text the model's window cut is counted in ``meta["truncated"]``.

    ``expand`` re-ranks before the cut (``"hop"``, ``"links"``, ``"hop+links[m=3]"``; see
    :mod:`ctxsel.expansion`): it works on given ``scores`` too (the second hop then
    scores with ``scorer``), and the Selection's ``meta["expansion"]`` says which chunks
    came in by expansion and from where. Off by default.

    ``question`` must be a non-empty string and ``chunks`` a sequence (one str is a TypeError, not
    one chunk per character).
    """
    check_question(question)
    selector = get_selector(method, **options)
    chunk_list = as_chunks(chunks)
    notes: dict[str, Any] = {}
    expansion = None
    if expand is not None:
        from ctxsel.expansion import parse_expansion

        expansion = parse_expansion(expand)
        if expansion is not None and not selector.needs_scores:
            raise ValueError(f"expand={expand!r} re-ranks scores, and method {selector.name!r} uses none")
    sc: Any = None
    if (scores is None and selector.needs_scores and chunk_list) or (expansion is not None and expansion.hop):
        from ctxsel.scoring import get_scorer
        from ctxsel.scoring.base import score_with_notes

        sc = get_scorer(scorer or "dense") if isinstance(scorer, str) or scorer is None else scorer
    if scores is None and selector.needs_scores and chunk_list:
        scores, notes = score_with_notes(sc, question, chunk_list)
    elif scores is None and not chunk_list:
        scores = []
    if expansion is not None and chunk_list:
        from ctxsel.expansion import annotate
        from ctxsel.expansion import expand as run_expansion

        expanded = run_expansion(question, chunk_list, scores, sc, expansion)
        sel = selector.select(question, chunk_list, expanded.scores)
        sel.meta.update(notes)
        return annotate(sel, chunk_list, expanded, expansion)
    if choices and selector.takes_options:
        sel = selector.select(question, chunk_list, scores, options=list(choices))
    else:
        sel = selector.select(question, chunk_list, scores)
    sel.meta.update(notes)
    return sel


__all__ = ["Chunk", "Example", "LLMUsage", "Selection", "__version__", "available_methods", "get_selector", "select"]
