"""A method that declares its cut reads scores only (``cut_reads_tokens = False``) must decide the
same with the token counts as without them: :class:`TextChunks` then counts only the kept texts."""

from __future__ import annotations

import numpy as np
import pytest

import ctxsel
from ctxsel.selectors import available_methods, get_selector, get_selector_class
from ctxsel.selectors.base import ScoreCutSelector
from ctxsel.types import Chunk, TextChunks, as_chunks

SPECS = [
    "adaptive-k",
    "adaptive-k[buffer=0]",
    "adaptive-k[strategy=moving_avg]",
    "adaptive-k[strategy=2diff_spike]",
    "top-k@3",
    "top-k@7",
    "threshold@0.2",
    "autocut",
    "autocut[jumps=2]",
    "top-p@0.5",
    "knee",
    "stddev@0.5",
]


def test_every_score_only_method_is_covered() -> None:
    score_only = set()
    for name in available_methods():
        cls = get_selector_class(name)
        if issubclass(cls, ScoreCutSelector) and not cls.cut_reads_tokens:
            score_only.add(name)
    assert score_only == {get_selector(s).name for s in SPECS}


def _texts(rng: np.random.Generator, n: int) -> list[str]:
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    return [" ".join(rng.choice(words, size=int(rng.integers(1, 40)))) for _ in range(n)]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("n", [1, 2, 9, 60, 3000])  # 3000: past SMALL_N, the prefix fast paths
@pytest.mark.parametrize("nan_policy", ["raise", "last"])
def test_a_score_only_cut_decides_the_same_without_counts(spec: str, n: int, nan_policy: str) -> None:
    rng = np.random.default_rng(n)
    texts = _texts(rng, n)
    scores = np.round(rng.random(n), 2)  # ties included
    if nan_policy == "last" and n > 2:
        scores[rng.choice(n, size=n // 3, replace=False)] = np.nan
    counted = [Chunk(id=str(i), text=t, position=i) for i, t in enumerate(texts)]
    lazy = as_chunks(texts)
    assert isinstance(lazy, TextChunks) and not lazy.counted
    a = ctxsel.select("q", counted, method=spec, scores=scores, nan_policy=nan_policy)
    b = ctxsel.select("q", lazy, method=spec, scores=scores, nan_policy=nan_policy)
    assert b.to_dict() == a.to_dict()
    assert not lazy.counted  # only the kept chunks were counted
    assert sum(c is not None for c in lazy._built) == b.k


def test_a_budget_counts_every_text() -> None:
    lazy = as_chunks([f"text number {i}" for i in range(40)])
    assert isinstance(lazy, TextChunks)
    sel = ctxsel.select("q", lazy, method="top-k@10", scores=np.linspace(1, 0, 40), max_tokens=12)
    assert lazy.counted and sel.n_tokens <= 12 and sel.ids == ["0", "1", "2"]
