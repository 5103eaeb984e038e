"""Expanding first-hop scores: the second hop, the link boosts and the pinned top chunks."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ctxsel.errors import InputError
from ctxsel.ranking.expansion import Expansion
from ctxsel.ranking.links import mention_graph
from ctxsel.scoring.base import Scorer
from ctxsel.scoring.hybrid import minmax
from ctxsel.types import Chunk

PIN_STEP = 1e-6


@dataclass
class Expanded:
    """Expanded scores and where each boost came from (indices into the pool)."""

    scores: np.ndarray
    first: np.ndarray
    pinned: list[int]
    linked_from: dict[int, list[int | str]] = field(default_factory=dict)
    hop_used: bool = False
    seconds: dict[str, float] = field(default_factory=dict)


def expand(
    question: str,
    chunks: Sequence[Chunk],
    scores: Sequence[float] | np.ndarray,
    scorer: Scorer | None,
    expansion: Expansion,
) -> Expanded:
    """Apply ``expansion`` to first-hop ``scores`` (see the module docstring).

    ``scorer`` is needed for the second hop (it scores the widened question).
    Non-finite first-hop scores stay where a cut puts them (``nan_policy``).
    """
    t0 = time.perf_counter()
    raw = np.asarray(scores, dtype=np.float64)
    n = len(raw)
    first = minmax(raw)
    finite = np.isfinite(raw)
    order = np.argsort(np.where(finite, -first, np.inf), kind="stable")
    pinned = [int(i) for i in order[: min(expansion.pinned, int(finite.sum()))]]
    out = first.copy()
    result = Expanded(out, first, pinned)
    if n == 0:
        return result
    if expansion.hop is not None:
        if scorer is None:
            raise InputError("the second hop (expand=hop) needs a scorer to score the widened question")
        top = [int(i) for i in order[: expansion.hop.m] if finite[i]]
        widened = question + "\n" + "\n".join(chunks[i].text for i in top)
        second = _minmax_without(np.asarray(scorer.score(widened, chunks), dtype=np.float64), top)
        w = expansion.hop.weight
        out[:] = (1 - w) * out + w * second
        result.hop_used = True
        result.seconds["hop"] = time.perf_counter() - t0
    if expansion.links is not None:
        t1 = time.perf_counter()
        links = expansion.links
        graph = mention_graph(chunks, links.keys)  # type: ignore[arg-type]
        result.seconds["graph"] = time.perf_counter() - t1
        sources: dict[int, list[int | str]] = {}
        for i in order[: links.m]:
            if finite[i]:
                for j in graph.links[int(i)]:
                    sources.setdefault(j, []).append(int(i))
        if links.question:
            for j in graph.mentioned_in(question):
                sources.setdefault(j, []).append("question")
        boosted = np.fromiter(sources, dtype=np.int64, count=len(sources))
        if boosted.size:
            out[boosted] += links.boost
        result.linked_from = sources
        result.seconds["links"] = time.perf_counter() - t1
    out[~finite] = raw[~finite]  # a NaN stays NaN, for the selector's nan_policy to handle
    if pinned:
        rest = np.ones(n, dtype=bool)
        rest[pinned] = False
        rest &= finite
        floor = float(out[rest].max()) if rest.any() else -np.inf
        for i in reversed(pinned):  # the last pinned just above the rest, each earlier one above the next
            out[i] = max(out[i], floor + PIN_STEP)
            floor = out[i]
    result.seconds["total"] = time.perf_counter() - t0
    return result


def _minmax_without(raw: np.ndarray, exclude: Sequence[int]) -> np.ndarray:
    """Min-max over the chunks not in ``exclude``, clipped to [0, 1]. The chunks the question was
    widened with match themselves; left in, they would squeeze every other chunk's range."""
    keep = np.isfinite(raw)
    keep[list(exclude)] = False
    if not keep.any():
        return minmax(raw)
    lo, hi = float(raw[keep].min()), float(raw[keep].max())
    if hi <= lo:
        return np.zeros_like(raw)
    return np.where(np.isfinite(raw), np.clip((raw - lo) / (hi - lo), 0.0, 1.0), 0.0)


__all__ = ["PIN_STEP", "Expanded", "expand"]
