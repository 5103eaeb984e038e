"""What a selection on expanded scores says about the chunks that came in by expansion."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ctxsel.ranking.expand import Expanded
from ctxsel.ranking.expansion import Expansion
from ctxsel.types import Chunk, Selection


def annotate(selection: Selection, chunks: Sequence[Chunk], expanded: Expanded, expansion: Expansion) -> Selection:
    """Say in ``selection`` which chosen chunks came in by expansion, and from where."""
    index = {c.id: i for i, c in enumerate(chunks)}
    first = expanded.first
    first_rank = np.empty(len(first), dtype=np.int64)
    first_rank[np.argsort(np.where(np.isfinite(first), -first, np.inf), kind="stable")] = np.arange(len(first))
    came_in: dict[str, dict[str, Any]] = {}
    for cid in selection.ids:
        i = index[cid]
        if first_rank[i] < selection.k:
            continue
        how: dict[str, Any] = {"first_hop_rank": int(first_rank[i]) + 1}
        if i in expanded.linked_from:
            how["by"] = "link"
            how["linked_from"] = [s if isinstance(s, str) else chunks[s].id for s in expanded.linked_from[i]]
        else:
            how["by"] = "second hop" if expanded.hop_used else "re-ranking"
        came_in[cid] = how
    selection.meta["expansion"] = {
        "spec": expansion.spec(),
        "pinned": [chunks[i].id for i in expanded.pinned],
        "came_in": came_in,
        "ms": round(expanded.seconds.get("total", 0.0) * 1000, 3),
    }
    if came_in:

        def short(cid: str, how: dict[str, Any]) -> str:
            src = ", ".join(repr(s) if s != "question" else "the question" for s in how.get("linked_from", [])[:2])
            return f"{cid!r} ({'linked from ' + src if how['by'] == 'link' else how['by']})"

        shown = [short(c, h) for c, h in list(came_in.items())[:3]]
        more = f" and {len(came_in) - 3} more" if len(came_in) > 3 else ""
        selection.explanation += f"; expansion brought in {', '.join(shown)}{more}"
    return selection


__all__ = ["annotate"]
