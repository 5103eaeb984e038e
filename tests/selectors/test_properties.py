"""Properties every registered score-based method must have, on random inputs."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctxsel
from ctxsel.selectors import available_methods
from ctxsel.selectors.base import Selector
from ctxsel.types import Chunk

# a few specs per known method; any other registered score-based method is
# covered by its bare name (see _all_specs)
KNOWN_SPECS: dict[str, list[str]] = {
    "top-k": ["top-k@1", "top-k@3"],
    "top-n-tokens": ["top-n-tokens@50"],
    "threshold": ["threshold@0.2"],
    "autocut": ["autocut@1", "autocut@2"],
    "adaptive-k": [
        "adaptive-k@largest_gap",
        "adaptive-k@moving_avg",
        "adaptive-k@2diff_spike",
        "adaptive-k[strategy=moving_avg,window=3,buffer=0,head_fraction=0.05]",
    ],
    "full": ["full"],
}


def _all_specs() -> list[str]:
    specs: list[str] = []
    for name in sorted(available_methods()):
        if name in KNOWN_SPECS:
            specs.extend(KNOWN_SPECS[name])
            continue
        try:
            sel = ctxsel.get_selector(name)
        except Exception:  # a method that cannot be built from its bare name
            continue
        if isinstance(sel, Selector) and sel.needs_scores:
            specs.append(name)
    return specs


SPECS = _all_specs()
MAX_N = 60
finite = st.floats(-1, 1, allow_nan=False, allow_infinity=False)
tie_prone = st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0])
score_lists = st.one_of(st.lists(st.one_of(finite, tie_prone), max_size=MAX_N), st.lists(tie_prone, max_size=MAX_N))


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[Chunk], list[float]]:
    scores = draw(score_lists)
    tokens = draw(st.lists(st.integers(0, 120), min_size=len(scores), max_size=len(scores)))
    chunks = [Chunk(id=f"id{i}", text="t", doc_id="d", position=i, n_tokens=t) for i, t in enumerate(tokens)]
    return chunks, scores


def ranking(scores: list[float]) -> list[int]:
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


def test_every_known_method_is_registered_and_covered() -> None:
    names = set(available_methods())
    assert set(KNOWN_SPECS) <= names
    covered = {ctxsel.selectors.parse_spec(s)[0] for s in SPECS}
    assert set(KNOWN_SPECS) <= covered


SETTINGS = settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@pytest.mark.parametrize("spec", SPECS)
@SETTINGS
@given(case=cases())
def test_selection_invariants(spec: str, case: tuple[list[Chunk], list[float]]) -> None:
    chunks, scores = case
    n = len(chunks)
    sel = ctxsel.select("q", chunks, spec, scores=scores)
    ids = {c.id for c in chunks}
    assert set(sel.ids) <= ids
    assert len(set(sel.ids)) == len(sel.ids)
    if n == 0:
        assert sel.k == 0
    else:
        assert 1 <= sel.k <= n
    # selectors only decide how many: the selection is a prefix of the ranking
    assert sel.ids == [f"id{i}" for i in ranking(scores)[: sel.k]]
    assert [c.id for c in sel.chunks] == sel.ids
    assert sel.n_tokens == sum(c.n_tokens for c in sel.chunks)
    assert sel.n_candidates == n
    assert sorted(sel.reading_order) == sorted(sel.ids)
    json.dumps(sel.to_dict())  # what `ctxsel select --json` prints must serialise
    # same input, same output
    again = ctxsel.select("q", chunks, spec, scores=list(scores))
    assert (again.ids, again.explanation) == (sel.ids, sel.explanation)


@pytest.mark.parametrize("spec", SPECS)
@SETTINGS
@given(case=cases(), budget=st.integers(0, 400), min_k=st.integers(0, 10))
def test_max_tokens_is_a_hard_budget_and_min_k_a_floor(
    spec: str, case: tuple[list[Chunk], list[float]], budget: int, min_k: int
) -> None:
    chunks, scores = case
    n = len(chunks)
    unbounded = ctxsel.select("q", chunks, spec, scores=scores, min_k=min_k)
    assert min(min_k, n) <= unbounded.k <= n
    sel = ctxsel.select("q", chunks, spec, scores=scores, max_tokens=budget, min_k=min_k)
    assert sel.n_tokens <= budget
    # the budget only shortens the selection, to its longest prefix that fits (it wins over min_k)
    assert sel.ids == unbounded.ids[: sel.k]
    fits = 0
    used = 0
    for c in unbounded.chunks:
        if used + c.n_tokens > budget:
            break
        used += c.n_tokens
        fits += 1
    assert sel.k == fits
    if unbounded.chunks and unbounded.chunks[0].n_tokens > budget:
        # documented: the best chunk alone exceeds the budget -> empty selection, and it says why
        assert sel.ids == []
        assert f"cut to 0 by max_tokens={budget}" in sel.explanation


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=50, deadline=None)
@given(
    scores=st.lists(st.one_of(finite, st.sampled_from([math.nan, math.inf, -math.inf])), min_size=1, max_size=30),
)
def test_nan_policy_last_ranks_non_finite_after_every_finite_score(spec: str, scores: list[float]) -> None:
    """ "last" means ranked last: a non-finite chunk comes only after every finite one, never shapes a cut
    that reads the score curve (adaptive-k, autocut, threshold: kept only through min_k, and never while
    finite exist), and is kept by a count (top-k, top-n-tokens) only when the count passes the finite ones."""
    chunks = [Chunk(id=f"id{i}", text="t", position=i, n_tokens=1) for i in range(len(scores))]
    n_finite = sum(math.isfinite(s) for s in scores)
    if n_finite < len(scores):
        with pytest.raises(ValueError, match="NaN or infinite"):
            ctxsel.select("q", chunks, spec, scores=scores)
    sel = ctxsel.select("q", chunks, spec, scores=scores, nan_policy="last")
    counts = getattr(ctxsel.get_selector(spec), "counts_positions", False) or spec == "full"
    if n_finite:
        chosen_bad = [i for i in sel.ids if not math.isfinite(scores[int(i[2:])])]
        assert chosen_bad == [] or (counts and sel.k > n_finite)
        # the finite chunks form the head of the ranking, the rest follow in position order
        finite_rank = [
            f"id{i}"
            for i in ranking([s if math.isfinite(s) else -math.inf for s in scores])
            if math.isfinite(scores[i])
        ]
        assert sel.ids[: min(sel.k, n_finite)] == finite_rank[: min(sel.k, n_finite)]
        assert (
            sel.ids[n_finite:]
            == [f"id{i}" for i, s in enumerate(scores) if not math.isfinite(s)][: max(0, sel.k - n_finite)]
        )
        if not counts:
            # non-finite scores take no part in the cut: same result as without those chunks
            keep = [i for i, s in enumerate(scores) if math.isfinite(s)]
            sub = ctxsel.select("q", [chunks[i] for i in keep], spec, scores=[scores[i] for i in keep])
            assert sel.ids == sub.ids
