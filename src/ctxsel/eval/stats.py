"""How sure an evaluation's means are: bootstrap intervals and paired comparisons.

On 20 questions one question is 5 points of SubEM, so a table of bare means
cannot tell a real difference from chance. Every mean in a summary gets a 95%
interval from a seeded percentile bootstrap over examples, and
``ctxsel eval --compare METHOD`` states each other row's paired difference to
METHOD on the same examples.

Choices, where the issue leaves them open (the usual ones of the NLP
significance literature, e.g. Dror et al. 2018):

- the interval is the percentile bootstrap of the mean (numpy's default linear
  quantile), 2,000 resamples of the examples with replacement, seed 0;
  one value gives the interval ``[v, v]``;
- a paired difference is ``mean(a - b)`` over the examples where both rows
  have the metric, its interval the percentile bootstrap of those
  differences (the same resampling);
- its p-value: the exact two-sided McNemar test (a binomial test on the
  discordant pairs) when every value is 0 or 1, else the paired bootstrap
  test (the resampled differences, centred on zero, at least as far from
  zero as the observed one; ``(count + 1) / (resamples + 1)``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ctxsel.errors import InputError

#: ``ctxsel eval --ci``: no intervals, or the percentile bootstrap over examples.
CI_METHODS = ("bootstrap", "none")
N_RESAMPLES = 2000
LEVEL = 0.95
#: The metrics a comparison reports (those a row has): what was selected, what it cost, how it was answered.
COMPARED = ("recall", "precision", "n_tokens", "score", "subem", "em", "f1", "overlap_f1")


def _resample_means(values: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(values), size=(n_resamples, len(values)))
    means: np.ndarray = values[idx].mean(axis=1)
    return means


def bootstrap_ci(
    values: Sequence[float] | np.ndarray, n_resamples: int = N_RESAMPLES, seed: int = 0, level: float = LEVEL
) -> tuple[float, float] | None:
    """The percentile-bootstrap interval of the mean of ``values`` (None when there are none)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return None
    means = _resample_means(v, n_resamples, seed)
    alpha = (1.0 - level) / 2
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def mcnemar_exact(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Two-sided exact McNemar p-value for paired 0/1 outcomes: a binomial test (p = 1/2) on the pairs where
    ``a`` and ``b`` disagree."""
    x, y = np.asarray(a), np.asarray(b)
    only_a, only_b = int(np.sum((x == 1) & (y == 0))), int(np.sum((x == 0) & (y == 1)))
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(only_a, only_b) + 1)) / 2.0**n
    return min(1.0, 2.0 * tail)


def paired_difference(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    level: float = LEVEL,
) -> dict[str, Any]:
    """``mean(a - b)`` with its bootstrap interval and paired p-value (see the module docstring)."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or x.size == 0:
        raise ValueError("a paired difference needs two non-empty sequences of the same length")
    d = x - y
    diff = float(d.mean())
    means = _resample_means(d, n_resamples, seed)
    alpha = (1.0 - level) / 2
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    if np.isin(x, (0.0, 1.0)).all() and np.isin(y, (0.0, 1.0)).all():
        p, test = mcnemar_exact(x, y), "mcnemar-exact"
    else:
        far = int(np.sum(np.abs(means - diff) >= abs(diff) - 1e-12))
        p, test = (far + 1) / (n_resamples + 1), "paired-bootstrap"
    return {"diff": diff, "ci95": [float(lo), float(hi)], "p": p, "n": int(d.size), "test": test}


def _by_example(rows: Sequence[Mapping[str, Any]], method: str, metric: str) -> dict[str, float]:
    out = {}
    for r in rows:
        if r["method"] == method:
            v = r.get(metric, r.get("extra_metrics", {}).get(metric))
            if v is not None and not (isinstance(v, float) and math.isnan(v)):
                out[str(r["example_id"])] = float(v)
    return out


def compare(
    rows: Sequence[Mapping[str, Any]],
    methods: Sequence[str],
    against: str,
    *,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Every other method's paired difference to ``against``, for each metric in ``COMPARED`` that both rows
    have, as ``{"a", "b", "metric", "diff", "ci95", "p", "n", "test"}`` (a - b). Rows run on different examples
    are refused: a difference between other questions is not a paired one."""
    if against not in methods:
        raise InputError(f"--compare {against!r} is not one of this run's methods: {', '.join(methods)}")
    examples = {m: {str(r["example_id"]) for r in rows if r["method"] == m} for m in methods}
    out = []
    for m in methods:
        if m == against:
            continue
        if examples[m] != examples[against]:
            only = sorted(examples[m] ^ examples[against])
            raise InputError(
                f"cannot compare {m!r} with {against!r}: they ran on different examples "
                f"({len(only)} in one only, e.g. {only[0]}); rerun both on the same examples"
            )
        for metric in COMPARED:
            a, b = _by_example(rows, m, metric), _by_example(rows, against, metric)
            both = sorted(a.keys() & b.keys())
            if not both:
                continue
            stats = paired_difference([a[k] for k in both], [b[k] for k in both], n_resamples, seed)
            out.append({"a": m, "b": against, "metric": metric, **stats})
    return out


#: A judge is trusted when its verdicts agree with the deterministic score at least this well
#: (Cohen's kappa; 0.6 is the usual threshold of "substantial" agreement, Landis and Koch 1977).
TRUSTED_KAPPA = 0.6
#: An answer counts as credited when its score is at least this (either score, both in [0, 1]).
CREDIT = 0.5


def cohen_kappa(a: Sequence[bool], b: Sequence[bool]) -> float | None:
    """Cohen's kappa of two binary raters; None when undefined (no rows, or chance agreement is 1)."""
    n = len(a)
    if n == 0:
        return None
    both = sum(1 for x, y in zip(a, b) if x and y)
    neither = sum(1 for x, y in zip(a, b) if not x and not y)
    observed = (both + neither) / n
    pa, pb = sum(a) / n, sum(b) / n
    chance = pa * pb + (1 - pa) * (1 - pb)
    return None if chance >= 1.0 else (observed - chance) / (1.0 - chance)


def judge_agreement(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """How well an LLM judge's verdicts agree with the deterministic score on the same answers: the rows the
    judge scored (``kind`` "llm-judge"), each answer credited by the judge when its score is >= ``CREDIT`` and
    by the reference (set-overlap F1 for aggregation answers, EM for factoid ones) likewise. Returns the
    confusion table, Cohen's kappa and whether the judge is trusted (kappa >= ``TRUSTED_KAPPA``); None when
    no row was judged."""
    pairs = []
    for r in rows:
        if r.get("kind") != "llm-judge" or r.get("score") is None:
            continue
        ref = r.get("overlap_f1", r.get("em"))
        if ref is not None:
            pairs.append((float(r["score"]) >= CREDIT, float(ref) >= CREDIT))
    if not pairs:
        return None
    judge, ref = [p[0] for p in pairs], [p[1] for p in pairs]
    kappa = cohen_kappa(judge, ref)
    return {
        "reference": "overlap_f1" if any("overlap_f1" in r for r in rows) else "em",
        "credit_at": CREDIT,
        "n": len(pairs),
        "confusion": {
            "judge_yes_ref_yes": sum(1 for j, f in pairs if j and f),
            "judge_yes_ref_no": sum(1 for j, f in pairs if j and not f),
            "judge_no_ref_yes": sum(1 for j, f in pairs if not j and f),
            "judge_no_ref_no": sum(1 for j, f in pairs if not j and not f),
        },
        "agreement": sum(1 for j, f in pairs if j == f) / len(pairs),
        "kappa": kappa,
        "trusted": kappa is not None and kappa >= TRUSTED_KAPPA,
    }


__all__ = [
    "CI_METHODS",
    "COMPARED",
    "TRUSTED_KAPPA",
    "bootstrap_ci",
    "cohen_kappa",
    "compare",
    "judge_agreement",
    "mcnemar_exact",
    "paired_difference",
]
