"""``reorder``: lost-in-the-middle order, the most relevant chunks at the two ends of the context.

Language models read the start and the end of a long context best and its middle worst
(Liu et al., "Lost in the Middle", TACL 2024). This stage sets the selection's reading
order from its rank order: the best chunk first, the second best last, the third
second, the fourth second to last, and so on inwards; for ranks 1..5 the order is
1, 3, 5, 4, 2. That is Haystack's ``LostInTheMiddleRanker`` for every count, and
LangChain's and LlamaIndex's ``LongContextReorder`` for odd counts (for an even count
theirs puts the best chunk last: 2, 4, 3, 1 for four, where this stage gives 1, 3, 4, 2,
keeping "the best first" true for every count).

It changes only the reading order (``Selection.reading_order``, which the reader and
``Selection.text()`` follow); ``ids`` stay in rank order, and nothing is added or dropped.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from ctxsel.query import Query
from ctxsel.stages.base import Stage
from ctxsel.types import Selection

if TYPE_CHECKING:
    from ctxsel.ranking.chain import Ranking

T = TypeVar("T")


def lost_in_the_middle(ranked: list[T]) -> list[T]:
    """``ranked`` (best first) in lost-in-the-middle order: odd ranks from the front, even ranks
    from the back."""
    return ranked[0::2] + ranked[1::2][::-1]


@dataclasses.dataclass(frozen=True)
class Reorder(Stage):
    """Read the best chunks at the two ends of the context, the weakest in the middle."""

    def apply(
        self, selection: Selection, query: Query, scores: np.ndarray | None, *, ranking: Ranking | None = None
    ) -> Selection:
        del query, scores, ranking  # the order comes from the selection's own ranking
        selection.reading = lost_in_the_middle(list(selection.ids))
        return selection


__all__ = ["Reorder", "lost_in_the_middle"]
