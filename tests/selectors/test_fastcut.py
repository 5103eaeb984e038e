"""The linear-time cuts give exactly what the full stable argsort gave.

Every score-based method's ``decide()`` is compared with
``tests.support.reference_cuts.reference_decide`` (today's implementation
before the fast paths, kept verbatim): same kept ids in the same order, same
k, same explanation, same meta (the gap's sign included), and the same full
ranking when ``Decision.order`` is read. Vectors: random, rounded (many
ties), all equal, tied blocks, +-0.0, NaN/inf under nan_policy="last",
float32, and a few at N up to 10^6.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxsel.selectors import get_selector
from ctxsel.selectors._fastcut import SMALL_N, RankView, _bucket_max_gap, _bucket_window, largest_gap, stable_desc
from ctxsel.selectors.base import ScoreCutSelector
from tests.support.reference_cuts import rank, reference_decide

SPECS = [
    "top-k@1",
    "top-k@10",
    "top-k[k=3,min_k=5,max_tokens=300]",
    "top-n-tokens@50",
    "top-n-tokens@5k",
    "threshold@0.2",
    "threshold@0.5",
    "autocut@1",
    "autocut@3",
    "adaptive-k@largest_gap",
    "adaptive-k@moving_avg",
    "adaptive-k@2diff_spike",
    "adaptive-k[buffer=0,head_fraction=0.05]",
    "adaptive-k[strategy=2diff_spike,head_fraction=0.05,tail_fraction=0.3]",
    "adaptive-k[strategy=moving_avg,window=3,buffer=0,head_fraction=0.05]",
    "adaptive-k[min_k=20,max_tokens=900]",
    "full",
]


def assert_same(
    spec: str, scores: np.ndarray, tokens: np.ndarray, nan_policy: str = "last", check_order: bool = True
) -> None:
    sel = get_selector(spec, nan_policy=nan_policy)
    assert isinstance(sel, ScoreCutSelector)
    d = sel.decide(scores, tokens)
    order, k, explanation, meta = reference_decide(sel, scores, tokens)
    assert d.k == k, (spec, d.explanation, explanation)
    assert d.explanation == explanation, spec
    assert d.top.tolist() == order[:k].tolist(), spec
    got_meta = d.details.to_meta() if d.details is not None else {}
    assert got_meta.keys() == meta.keys(), spec
    for key, value in meta.items():
        got = got_meta[key]
        assert got == value, (spec, key, got, value)
        if isinstance(value, float):
            assert math.copysign(1.0, got) == math.copysign(1.0, value), (spec, key)  # -0.0 stays -0.0
    if check_order:
        assert d.order.tolist() == order.tolist(), spec


def vector(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "retrieval":  # the benchmark's shape: a beta bulk and a few high scores
        s = rng.beta(2.0, 5.0, n) * 0.6
        hi = rng.choice(n, size=min(n, max(3, n // 1000 + 2)), replace=False)
        s[hi] = rng.uniform(0.65, 0.9, len(hi))
        return s
    if kind == "uniform":
        return rng.random(n)
    if kind == "rounded2":
        return np.round(rng.beta(2.0, 5.0, n), 2)
    if kind == "rounded1":
        return np.round(rng.random(n), 1)
    if kind == "equal":
        return np.full(n, 0.25)
    if kind == "two-levels":
        return np.where(rng.random(n) < 0.01, 0.9, 0.1)
    if kind == "signed-zeros":
        s = np.where(rng.random(n) < 0.5, 0.0, -0.0)
        s[rng.random(n) < 0.02] = 0.7
        s[rng.random(n) < 0.2] = -0.3
        return s
    if kind == "nonfinite":
        s = rng.beta(2.0, 5.0, n)
        s[rng.random(n) < 0.1] = np.nan
        s[rng.random(n) < 0.03] = np.inf
        s[rng.random(n) < 0.03] = -np.inf
        return s
    if kind == "float32":
        return rng.beta(2.0, 5.0, n).astype(np.float32)
    if kind == "spread":  # evenly spaced: every gap equal up to rounding
        return rng.permutation(np.arange(n) * 0.01)
    raise ValueError(kind)


KINDS = [
    "retrieval",
    "uniform",
    "rounded2",
    "rounded1",
    "equal",
    "two-levels",
    "signed-zeros",
    "nonfinite",
    "float32",
    "spread",
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(KINDS),
    n=st.one_of(st.integers(0, 40), st.integers(SMALL_N - 5, SMALL_N + 5), st.integers(2049, 30_000)),
    seed=st.integers(0, 2**32 - 1),
    spec=st.sampled_from(SPECS),
)
def test_random_vectors_match_reference(kind: str, n: int, seed: int, spec: str) -> None:
    rng = np.random.default_rng(seed)
    scores = vector(kind, n, rng)
    tokens = rng.integers(0, 400, n)
    assert_same(spec, scores, tokens)


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(
        st.sampled_from([0.0, -0.0, 0.1, 0.2, 0.5, 0.5000000000000001, 1.0, math.nan, math.inf]), max_size=60
    ),
    spec=st.sampled_from(SPECS),
    tokens=st.integers(0, 50),
)
def test_small_tied_vectors_match_reference(values: list[float], spec: str, tokens: int) -> None:
    scores = np.asarray(values, dtype=np.float64)
    assert_same(spec, scores, np.full(len(values), tokens, dtype=np.int64))


@pytest.mark.parametrize("kind", KINDS)
def test_every_method_on_every_kind(kind: str) -> None:
    rng = np.random.default_rng(7)
    for n in (1, 2, 3, 5, 100, 5_000, 60_000):
        scores = vector(kind, n, rng)
        tokens = rng.integers(1, 300, n)
        for spec in SPECS:
            assert_same(spec, scores, tokens)


@pytest.mark.parametrize("kind", ["retrieval", "uniform", "rounded2", "two-levels"])
def test_a_million_scores(kind: str) -> None:
    """N = 10^6: the kept prefix, k, explanation and meta (the full order is not read here,
    which is the point of the fast path; it is compared at smaller N above)."""
    rng = np.random.default_rng(11)
    scores = vector(kind, 1_000_000, rng)
    tokens = np.clip(rng.lognormal(np.log(120), 0.5, len(scores)), 20, 600).astype(np.int64)
    for spec in [
        "adaptive-k@largest_gap",
        "top-k@10",
        "top-n-tokens@5k",
        "threshold@0.5",
        "autocut@1",
        "adaptive-k@2diff_spike",
    ]:
        assert_same(spec, scores, tokens, check_order=False)


def test_raise_policy_raises_the_same_error() -> None:
    scores = np.array([0.1, np.nan, 0.3, np.inf])
    top2 = get_selector("top-k@2")
    assert isinstance(top2, ScoreCutSelector)
    with pytest.raises(ValueError) as fast:
        top2.decide(scores, np.ones(4, dtype=np.int64))
    with pytest.raises(ValueError) as ref:
        rank(scores, "raise")
    assert str(fast.value) == str(ref.value)


class TestPieces:
    def test_top_is_the_rankings_prefix_with_boundary_ties(self) -> None:
        rng = np.random.default_rng(3)
        x = np.round(rng.random(50_000), 3)  # about 50 copies of every value
        ref = np.argsort(-x, kind="stable")
        for m in (1, 10, 57, 1000, 6000):
            assert RankView(x).top(m).tolist() == ref[:m].tolist()

    def test_top_with_many_ties_at_the_threshold(self) -> None:
        x = np.zeros(100_000)
        x[[5, 70_000, 99_999]] = [1.0, 2.0, 1.0]
        top = RankView(x).top(10)
        assert top.tolist() == [70_000, 5, 99_999, 0, 1, 2, 3, 4, 6, 7]

    def test_stable_desc(self) -> None:
        v = np.array([0.3, 0.1, 0.3, -0.0, 0.0, 0.5])
        assert stable_desc(v).tolist() == np.argsort(-v, kind="stable").tolist() == [5, 0, 2, 1, 3, 4]

    def test_largest_gap_by_buckets_alone(self) -> None:
        """The pigeonhole path (called directly) and largest_gap against the sorted answer."""
        rng = np.random.default_rng(5)
        for trial in range(30):
            n = int(rng.integers(3_000, 40_000))
            x = rng.random(n) if trial % 3 else np.round(rng.random(n), 2)
            s = np.sort(x)[::-1]
            gaps = s[:-1] - s[1:]
            head, tail = trial % 4, int((n - 1) * 0.1)
            i_ref = head + int(np.argmax(gaps[head : n - 1 - tail]))
            want = (i_ref, float(gaps[i_ref]))
            assert _bucket_window(RankView(x), head, tail) == want
            assert largest_gap(RankView(x), head, tail) == want

    def test_bucket_max_gap_values(self) -> None:
        x = np.array([0.0, 0.1, 0.2, 0.6, 0.65, 1.0, 1.3])
        assert _bucket_max_gap(x, 0.0, 1.3, 7) == (0.6, 0.6 - 0.2)  # gaps 0.1, 0.1, 0.4, 0.05, 0.35, 0.3

    def test_decision_order_is_lazy_and_full(self) -> None:
        top2 = get_selector("top-k@2")
        assert isinstance(top2, ScoreCutSelector)
        d = top2.decide(np.array([0.1, 0.7, 0.3]), np.array([1, 1, 1]))
        assert d.top.tolist() == [1, 2]
        assert d.order.tolist() == [1, 2, 0]
