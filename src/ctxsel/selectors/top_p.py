"""Top-p: keep the best chunks while their share of the softmax mass stays within ``p``.

This is Haystack's ``TopPSampler`` rule: the scores go through a softmax,
the chunks are taken best first while the running sum of their
probabilities is at most ``p`` (or within 1e-6 of it), and at least one
chunk is kept even when the best alone holds more than ``p``. Haystack's
``min_top_k`` floor is the common ``min_k`` option here.

``temperature`` divides the scores before the softmax (1, the default, is
Haystack's rule exactly). Cosine similarities lie in [-1, 1] and mostly in
a band a few tenths wide, so at temperature 1 the softmax is nearly uniform
and top-p keeps about ``p * n`` chunks whatever the scores say; a small
temperature (for example 0.05) makes the mass follow the score gaps, so
that ``p`` then reads as "the chunks that hold this share of the
evidence". Note that the chunk whose mass crosses ``p`` is left out, as in
Haystack. The default stays Haystack's rule, so that a user moving from
Haystack gets the same chunks.

Edge cases: one finite score keeps it; equal scores share the mass evenly
(``floor(p * n)`` chunks, at least one); non-finite scores follow the
common ``nan_policy`` and never enter the softmax.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ctxsel.options import CommonOptions, option
from ctxsel.selectors.base import Cut, ScoreCutSelector

#: Haystack's tolerance for a running sum that lands on ``p``.
_ATOL = 1e-6


def top_p_k(sorted_scores: np.ndarray, p: float, temperature: float = 1.0) -> int:
    """How many of the scores (sorted descending) a top-p cut keeps, before any floor."""
    z = np.asarray(sorted_scores, dtype=np.float64) / temperature
    if len(z) == 0:
        return 0
    w = np.exp(z - z[0])  # the best score is the largest: no overflow
    cum = np.cumsum(w / w.sum())
    within = (cum <= p) | np.isclose(cum, p, rtol=0.0, atol=_ATOL)
    return max(1, int(np.count_nonzero(within)))  # cum rises: the kept ones are a prefix


class TopP(ScoreCutSelector):
    cut_reads_tokens = False

    @dataclass(frozen=True)
    class Options(CommonOptions):
        p: float = option(0.9, minimum=0.0, maximum=1.0, doc="the share of the softmax mass to keep")
        temperature: float = option(
            1.0, minimum=0.001, doc="divides the scores before the softmax; 1 is Haystack's rule"
        )

    def _cut(self, sorted_scores: np.ndarray, sorted_tokens: np.ndarray) -> Cut:
        k = top_p_k(sorted_scores, self.p, self.temperature)
        t = "" if self.temperature == 1.0 else f", temperature {self.temperature:g}"
        return Cut(k, f"top-p {self.p:g}{t}: kept {k} of {len(sorted_scores)}")
