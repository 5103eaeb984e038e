"""Multi-hop expansion: a ranking stage between scoring and the cut.

A similarity pass finds the chunks that look like the question. In a bridge
question ("Which city was the director of Film X born in?") the second
chunk is about an entity the question never names, so it ranks low. Two
stages bring it up, and any score-based selector can then cut the new
ranking:

- ``hop`` (second-hop re-scoring, pseudo-relevance feedback): the question
  plus the text of the first hop's top ``m`` chunks is scored again by the
  same scorer, and merged: ``(1 - weight) * first + weight * second``.
- ``links`` (mention links, :mod:`ctxsel.expansion.links`): chunks that the
  first hop's top ``m`` chunks name by title get ``+ boost``; with ``question=true``
  (default) so do the chunks the question itself names. A pool without
  titles gets no links unless ``keys=entities`` (salient capitalised names;
  opt-in, as it cost recall on tables of rows) or ``keys=auto`` asks for them.

Spec: stages joined by ``+``, each ``NAME`` or ``NAME[key=value,...]``::

    hop                     hop[m=1,weight=0.7]
    links                   links[m=1,boost=0.3,question=true,keys=titles]
    hop+links[m=3]          both, hop first

How the scores are formed, so a cut still reads them sensibly: the first
hop's scores are min-max normalised to [0, 1] over the pool; the second hop's
too before the merge, over the chunks other than the ``m`` it was widened
with (their own text is in the widened question: left in, their
self-match would squeeze everyone else's range and flatten the curve a cut
reads), clipped to [0, 1]; a boost is added once per chunk however many
chunks link to it. The first hop's top ``m`` (the largest ``m`` of the stages) stay
*pinned*, in their first-hop order: each is raised, if needed, 1e-6 above
the chunk ranked after it (the last pinned one 1e-6 above every unpinned
chunk), so expansion reorders only the rest, and a cut that keeps ``k <= m``
chunks keeps exactly what it kept without expansion. Selections
made on expanded scores carry ``meta["expansion"]``: the stages, the pinned
ids and, per selected chunk that came in by expansion (first-hop rank beyond
the selection's size), how: ``linked from`` which chunks (or the question),
or ``second hop``. The explanation ends with a short form of the same.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ctxsel.errors import InputError, SpecError
from ctxsel.expansion.links import KEY_SOURCES, mention_graph
from ctxsel.scoring.base import Scorer
from ctxsel.scoring.hybrid import minmax
from ctxsel.specs import parse_options, split_spec, split_top
from ctxsel.types import Chunk, Selection

PIN_STEP = 1e-6


# The defaults are the settings chosen on hotpotqa-long's 80 training questions
# (benchmarks/recall_hotpotqa.py); none was chosen on the 20 test questions.


@dataclass(frozen=True)
class SecondHop:
    """Re-score with the question plus the top ``m`` chunks' text; merge with ``weight``."""

    m: int = 1
    weight: float = 0.7

    def __post_init__(self) -> None:
        _check_m(self.m, "hop")
        if not 0 <= self.weight <= 1:
            raise InputError(f"hop weight must be in [0, 1], got {self.weight!r}")


@dataclass(frozen=True)
class MentionLinks:
    """Boost the chunks that the top ``m`` chunks (and the question) name."""

    m: int = 1
    boost: float = 0.3
    question: bool = True
    keys: str = "titles"

    def __post_init__(self) -> None:
        _check_m(self.m, "links")
        if not (isinstance(self.boost, (int, float)) and 0 <= self.boost < 1e6):
            raise InputError(f"links boost must be a number >= 0, got {self.boost!r}")
        if self.keys not in KEY_SOURCES:
            raise InputError(f"links keys must be one of {', '.join(KEY_SOURCES)}, got {self.keys!r}")


def _check_m(m: object, stage: str) -> None:
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise InputError(f"{stage} m must be an integer >= 1, got {m!r}")


@dataclass(frozen=True)
class Expansion:
    """One or both stages, applied hop first."""

    hop: SecondHop | None = None
    links: MentionLinks | None = None

    @property
    def pinned(self) -> int:
        """How many of the first hop's best chunks stay on top."""
        return max((s.m for s in (self.hop, self.links) if s is not None), default=0)

    def spec(self) -> str:
        parts = []
        for name, stage in (("hop", self.hop), ("links", self.links)):
            if stage is not None:
                parts.append(f"{name}[" + ",".join(f"{k}={_fmt(v)}" for k, v in asdict(stage).items()) + "]")
        return "+".join(parts)


def _fmt(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else f"{v:g}" if isinstance(v, float) else str(v)


def parse_expansion(spec: str | Expansion | None) -> Expansion | None:
    """An :class:`Expansion` from a spec (see the module docstring); None or ``""``/``"none"`` for none."""
    if spec is None or isinstance(spec, Expansion):
        return spec
    if not spec.strip() or spec.strip().lower() == "none":
        return None
    stages: dict[str, Any] = {}
    for part in split_top(spec, "+", f"expansion {spec!r}"):
        try:
            name, main, body = split_spec(part, "expansion stage")
        except SpecError:
            name, main, body = "", None, None
        if name not in ("hop", "links") or main is not None:
            raise SpecError(
                f"bad expansion stage {part.strip()!r} in {spec!r}: use hop, links, hop[m=1,weight=0.7] "
                "or links[m=1,boost=0.3], joined by +"
            )
        if name in stages:
            raise SpecError(f"expansion {spec!r} names {name} twice")
        options = parse_options(body, f"expansion {spec!r}")
        cls = SecondHop if name == "hop" else MentionLinks
        try:
            stages[name] = cls(**options)
        except TypeError as e:
            allowed = ", ".join(cls.__dataclass_fields__)
            raise SpecError(f"bad option for expansion stage {name} in {spec!r} ({e}); it takes {allowed}") from None
    return Expansion(hop=stages.get("hop"), links=stages.get("links"))


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


class ExpandingScorer:
    """A scorer followed by an expansion: a Scorer whose ``score`` returns the expanded scores.

    It lets every place that takes a Scorer (eval, the service, the
    integrations) rank with expansion; :meth:`score_expanded` also returns
    where the boosts came from, for :func:`annotate`.
    """

    def __init__(self, scorer: Scorer, expansion: Expansion | str) -> None:
        exp = parse_expansion(expansion)
        if exp is None:
            raise InputError("ExpandingScorer needs an expansion (hop, links or hop+links)")
        self.scorer, self.expansion = scorer, exp
        self.name = f"{scorer.name}+{exp.spec()}"
        base_id = getattr(scorer, "model_id", "")
        self.model_id = f"{base_id}|expand={exp.spec()}".lstrip("|")

    def score_expanded(self, question: str, chunks: Sequence[Chunk]) -> Expanded:
        first = np.asarray(self.scorer.score(question, chunks), dtype=np.float64)
        return expand(question, chunks, first, self.scorer, self.expansion)

    def score(self, question: str, chunks: Sequence[Chunk]) -> np.ndarray:
        if not chunks:
            return np.zeros(0, dtype=np.float32)
        return self.score_expanded(question, chunks).scores


__all__ = [
    "Expanded",
    "ExpandingScorer",
    "Expansion",
    "MentionLinks",
    "SecondHop",
    "annotate",
    "expand",
    "parse_expansion",
]
