"""Reference rows for an evaluation: the reader's floor and its ceiling.

- ``closed-book``: no context at all. The reader gets its usual prompt with
  an empty context and answers from the question alone, so the row shows
  what the model knows without reading (the floor every selection should
  beat).
- ``oracle``: exactly the example's gold chunks (``Example.gold_ids``), in
  reading order: what a perfect selector would send (the ceiling of
  selection; the reader can still miss).

The oracle needs labels that no real selector sees. It receives them the
way SAGE receives a multiple-choice question's options: in the
:class:`~ctxsel.query.Query` (``select(..., gold_ids=...)``); the class says
``takes_gold_ids = True`` so that the eval runner knows to pass
``Example.gold_ids``, and no other method reads them. An example without gold ids, or with gold ids that are
not among its chunks, is an error (the row records it in an eval), never a
silent empty or partial "oracle".

Neither method ranks anything: the oracle's ``ids`` are in reading order
(rank order and reading order coincide), and both ignore scores except to
copy the gold chunks' scores into the Selection when they are given. They
take no ``min_k`` / ``max_tokens``: a budget would make the oracle something
other than the gold set. What does not fit the reader's window is cut by
the reader (:meth:`ctxsel.reader.Reader.fit`), which records it.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ctxsel.errors import InputError
from ctxsel.query import Query
from ctxsel.selectors.base import Selector, _as_float
from ctxsel.types import Selection


class _Reference(Selector):
    needs_scores = False


class ClosedBook(_Reference):
    """No chunks: the reader answers from the question alone."""

    def _select(self, query: Query, scores: np.ndarray | None) -> Selection:
        del scores
        n = len(query.chunks)
        return Selection(
            ids=[],
            scores=[],
            chunks=[],
            method=self.name,
            config=self.config(),
            explanation=f"closed book: none of the {n} chunks is read",
            n_candidates=n,
        )


class Oracle(_Reference):
    """Exactly the gold chunks, in reading order; needs ``gold_ids``."""

    #: select() takes ``gold_ids=`` (the eval runner passes ``Example.gold_ids``).
    takes_gold_ids: ClassVar[bool] = True

    def _select(self, query: Query, scores: np.ndarray | None) -> Selection:
        chunk_list = query.chunks
        gold = list(dict.fromkeys(query.gold_ids))
        if not gold:
            raise InputError(
                "method 'oracle' needs the example's gold chunk ids (Example.gold_ids) and this example has none; "
                "use a dataset with gold labels, or leave 'oracle' out of --methods"
            )
        where = {c.id: i for i, c in enumerate(chunk_list)}
        missing = [g for g in gold if g not in where]
        if missing:
            shown = ", ".join(repr(g) for g in missing[:5]) + (" ..." if len(missing) > 5 else "")
            raise InputError(
                f"method 'oracle': gold id(s) {shown} are not among the example's {len(chunk_list)} chunks"
            )
        picked = sorted((where[g] for g in gold), key=lambda i: (chunk_list[i].doc_id, chunk_list[i].position, i))
        return Selection(
            ids=[chunk_list[i].id for i in picked],
            scores=[None if scores is None else _as_float(scores[i]) for i in picked],
            chunks=[chunk_list[i] for i in picked],
            method=self.name,
            config=self.config(),
            explanation=f"oracle: the {len(picked)} gold chunks of {len(chunk_list)}, in reading order",
            n_candidates=len(chunk_list),
        )


__all__ = ["ClosedBook", "Oracle"]
