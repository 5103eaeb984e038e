"""The cascade scorer: a fast scorer ranks the whole pool, an accurate one re-scores only its head.

``cascade`` (``get_scorer("cascade")``, ``--scorer cascade``, ``ctxsel serve --scorer cascade``) is the
ranking chain's rerank link packaged as one scorer name: the fast scorer (``fast``, by default
``hybrid``: the bundled MiniLM fused with BM25; ``dense`` and ``bm25`` work too) scores every chunk, the accurate scorer
(``accurate``, by default the preset of that name: nomic-embed-text-v1.5 on ONNX int8) scores only the
fast ranking's top chunks, the *head*, and the two are joined into one score list that every cut reads.
A selection a cut makes on it says where the head ended (``Selection.meta["cascade"]``, and the
explanation). Both parts are ordinary scorers, so their embedding caches work as usual: the head's
accurate vectors are cached too, and a second question over the same pool embeds nothing.

The head: ``head=N`` is the fast ranking's top ``N`` chunks (finite scores only, ties in pool order);
``head_tokens=T`` is its top chunks up to ``T`` tokens (the chunk that reaches ``T`` included, at least
one); given both, the smaller head. Neither: ``head_tokens=`` :data:`DEFAULT_HEAD_TOKENS` (about 38
paragraphs of hotpotqa-long), chosen with the fast scorer and the join on hotpotqa-long's training split
(experiments/cascade.py, benchmarks/results/cascade.md): a token mass holds the accurate scorer's work
to about the same whatever the chunks' size.

The join (``join=``, :data:`JOINS`), chosen by the same measurement:

- ``calibrated`` (the default): the fast scores are carried onto the accurate scale by a straight line
  fitted on the head (least squares of the accurate score on the fast score over the head's chunks;
  where that slope is not positive, the ratio of the two scores' standard deviations over the head).
  The head keeps its accurate scores and the tail gets the line's value at its fast score, so each
  tail chunk sits where the accurate scorer would be expected to put a chunk of its fast score, and
  the tail keeps the fast order and spacing (times the slope). A head chunk the accurate scorer rates
  below that line sinks among the tail, as it would in a one-stage accurate ranking; the line passes
  through the head's means, so the best tail chunk stays below the head's mean accurate score and the
  head's upper part always ranks above the tail. The join makes no gap of its own: the best tail chunk
  lands inside a gap of the head's accurate scores (splitting it) or within the fast scores' own gap at
  the join (on the accurate scale) below the head's lowest score; where the whole head lies above the
  line there, the tail is lifted to sit exactly that gap below the head's lowest score.
- ``below``: the same line, but the tail is placed wholly below the head's lowest score, at the fast
  scores' own gap at the join: the head stays on top in accurate order. The head's sparse bottom (the
  chunks the fast scorer liked and the accurate one did not) then keeps its gaps, and adaptive-k cut
  there, keeping most of the head: measured, 1,150-3,100 tokens against calibrated's 920-1,050.
- ``median``: the rule of ``--rerank`` (:func:`ctxsel.ranking.rerank.combine`): the tail below the
  head's median accurate score, spaced by the ratio of the two scores' ranges over the head.

A non-finite fast score stays as it was (the selector's ``nan_policy`` decides). With a head that is the
whole pool, the result is the accurate scores alone.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ctxsel.errors import InputError, InputTypeError, SpecError
from ctxsel.inputs import as_count
from ctxsel.ranking.rerank import SEAM_STEP, combine, place_head
from ctxsel.scoring import get_scorer, parse_scorer_spec
from ctxsel.scoring.base import Scorer, score_with_notes
from ctxsel.scoring.registry import available_scorers, base_scorer, scorer_options
from ctxsel.types import Chunk

#: the head when neither ``head`` nor ``head_tokens`` is given, and the fast scorer, chosen on
#: hotpotqa-long's training split (experiments/cascade.py; benchmarks/results/cascade.md)
DEFAULT_HEAD_TOKENS = 5000
DEFAULT_FAST = "hybrid"
JOINS = ("calibrated", "below", "median")


def fit_line(fast: np.ndarray, accurate: np.ndarray) -> tuple[float, float]:
    """``(slope, intercept)`` of the accurate scores on the fast ones over the head: least squares,
    or, where that slope is not positive (or one of the two is constant), the ratio of their standard
    deviations through their means; slope 1 when either is constant."""
    f = np.asarray(fast, dtype=np.float64)
    a = np.asarray(accurate, dtype=np.float64)
    fm, am = float(f.mean()), float(a.mean())
    f_sd, a_sd = float(f.std()), float(a.std())
    slope = float(((f - fm) * (a - am)).mean() / (f_sd * f_sd)) if f_sd > 0 else 0.0
    if not (np.isfinite(slope) and slope > 0):
        slope = a_sd / f_sd if f_sd > 0 and a_sd > 0 else 1.0
    return slope, am - slope * fm


def join(first: np.ndarray, top: Sequence[int], second: np.ndarray, rule: str = "calibrated") -> np.ndarray:
    """One score list from the fast scores ``first`` (the whole pool), the head ``top`` (indices, in
    fast order) and the head's accurate scores ``second``, by ``rule`` (see the module docstring)."""
    if rule not in JOINS:
        raise InputError(f"cascade join must be one of {', '.join(JOINS)}, got {rule!r}")
    if rule == "median":
        return combine(first, top, second)
    first, out, top_idx, second, rest = place_head(first, top, second)
    if not len(top_idx) or not rest.any():
        return out
    f_head, f_rest = first[top_idx], first[rest]
    slope, intercept = fit_line(f_head, second)
    line = intercept + slope * f_rest
    best = float(f_rest.max())
    # the fast scores' own gap at the join, carried onto the accurate scale (ties: a hair)
    seam = max(slope * (float(f_head.min()) - best), SEAM_STEP)
    ceiling = float(second.min()) - seam
    top_of_tail = intercept + slope * best
    if rule == "below" or top_of_tail < ceiling:  # below: always; calibrated: only if the head is all above
        line += ceiling - top_of_tail
    out[rest] = line
    return out


def head_of(first: np.ndarray, chunks: Sequence[Chunk], head: int | None, head_tokens: int | None) -> list[int]:
    """The head's indices in fast order: the top ``head`` finite scores (ties in pool order), cut
    further to the chunks up to ``head_tokens`` tokens (the one that reaches it included)."""
    finite = np.isfinite(first)
    order = np.argsort(np.where(finite, -first, np.inf), kind="stable")
    n = int(finite.sum())
    if head is not None:
        n = min(n, head)
    top = [int(i) for i in order[:n]]
    if head_tokens is not None and top:
        mass = np.cumsum([max(chunks[i].n_tokens, 0) for i in top])
        top = top[: int(np.searchsorted(mass, head_tokens, side="left")) + 1]
    return top


def _check_spec(label: str, spec: object) -> str:
    if not isinstance(spec, str) or not spec.strip():
        raise InputTypeError(f"cascade {label} must be a scorer spec such as 'dense' or 'accurate', got {spec!r}")
    name, _ = parse_scorer_spec(spec)
    if name not in available_scorers():
        raise SpecError(f"cascade {label}={spec!r}: unknown scorer {name!r}; choose {', '.join(available_scorers())}")
    if base_scorer(name) == "cascade":
        raise SpecError(f"cascade {label}={spec!r}: a cascade's part cannot be a cascade")
    return spec.strip()


def _build(spec: str, **defaults: Any) -> Scorer:
    """A part's scorer; ``defaults`` (threads, progress, cache) go to it unless its spec sets them."""
    name, options = parse_scorer_spec(spec)
    valid = scorer_options(name)
    extra = {k: v for k, v in defaults.items() if k in valid and k not in options and v is not None}
    return get_scorer(name, **options, **extra)


class CascadeScorer:
    """The fast scorer over the pool, the accurate scorer over its head, joined (module docstring).

    ``fast`` / ``accurate``: scorer specs (quote one with options: ``fast='hybrid[bm25=0.5]'``);
    ``fast_scorer`` / ``accurate_scorer``: scorers already built, to share one model with other
    rankings (they win over the specs). ``num_threads``, ``show_progress`` and ``cache`` go to each
    part that takes them."""

    name = "cascade"

    def __init__(
        self,
        head: int | None = None,
        *,
        head_tokens: int | None = None,
        fast: str = DEFAULT_FAST,
        accurate: str = "accurate",
        join: str = "calibrated",
        num_threads: int | None = None,
        show_progress: bool = False,
        cache: Any = None,
        fast_scorer: Scorer | None = None,
        accurate_scorer: Scorer | None = None,
    ) -> None:
        self.head = _count("head", head, "chunks", "head=50")
        self.head_tokens = _count("head_tokens", head_tokens, "tokens", "head_tokens=5000")
        if self.head is None and self.head_tokens is None:
            self.head_tokens = DEFAULT_HEAD_TOKENS
        if join not in JOINS:
            raise InputError(f"cascade join must be one of {', '.join(JOINS)}, got {join!r}")
        self.join = join
        self.fast_spec = _check_spec("fast", fast)
        self.accurate_spec = _check_spec("accurate", accurate)
        for label, given in (("fast_scorer", fast_scorer), ("accurate_scorer", accurate_scorer)):
            if given is not None and not callable(getattr(given, "score", None)):
                raise InputTypeError(f"cascade {label} must have score(question, chunks), got {type(given).__name__}")
        defaults = {"num_threads": num_threads, "show_progress": show_progress, "cache": cache}
        self.fast_scorer = fast_scorer if fast_scorer is not None else _build(self.fast_spec, **defaults)
        self.accurate_scorer = (
            accurate_scorer if accurate_scorer is not None else _build(self.accurate_spec, **defaults)
        )
        # what meta and the explanation call the parts: a scorer given as an object by its own name
        self.fast_label = self.fast_spec if fast_scorer is None else str(getattr(fast_scorer, "name", self.fast_spec))
        self.accurate_label = (
            self.accurate_spec if accurate_scorer is None else str(getattr(accurate_scorer, "name", self.accurate_spec))
        )
        size = f"head={self.head}" if self.head_tokens is None else f"head_tokens={self.head_tokens}"
        if self.head is not None and self.head_tokens is not None:
            size = f"head={self.head},head_tokens={self.head_tokens}"
        self.head_spec = size
        fast_id = getattr(self.fast_scorer, "model_id", "") or self.fast_scorer.name
        accurate_id = getattr(self.accurate_scorer, "model_id", "") or self.accurate_scorer.name
        #: what result files record: both parts' models and every setting that changes the scores
        self.model_id = f"cascade({fast_id}>{accurate_id})|{size}|join={join}"

    def score_detailed(self, question: str, chunks: Sequence[Chunk]) -> tuple[np.ndarray, dict[str, Any]]:
        """The joined scores, and ``{"cascade": ...}`` (where the head ended) plus the fast scorer's notes."""
        if not chunks:
            return np.zeros(0, dtype=np.float64), {}
        t0 = time.perf_counter()
        first, notes = score_with_notes(self.fast_scorer, question, chunks)
        first = np.asarray(first, dtype=np.float64).reshape(-1)
        if first.shape[0] != len(chunks):
            raise InputError(
                f"cascade: the fast scorer {self.fast_scorer.name!r} returned {first.shape[0]} scores for "
                f"{len(chunks)} chunks"
            )
        t1 = time.perf_counter()
        top = head_of(first, chunks, self.head, self.head_tokens)
        if not top:
            return first, notes
        second, accurate_notes = score_with_notes(self.accurate_scorer, question, [chunks[i] for i in top])
        second = np.asarray(second, dtype=np.float64).reshape(-1)
        if second.shape != (len(top),) or not np.isfinite(second).all():
            raise InputError(
                f"cascade: the accurate scorer {self.accurate_scorer.name!r} gave no finite score for every head chunk"
            )
        t2 = time.perf_counter()
        out = join(first, top, second, self.join)
        last = top[-1]
        info: dict[str, Any] = {
            "fast": self.fast_label,
            "accurate": self.accurate_label,
            "join": self.join,
            "head": len(top),
            "pool": len(chunks),
            "head_tokens": int(sum(max(chunks[i].n_tokens, 0) for i in top)),
            "head_end": {"fast_rank": len(top), "id": chunks[last].id, "fast_score": round(float(first[last]), 6)},
            "head_ids": [chunks[i].id for i in top],
            "seconds": {"fast": round(t1 - t0, 4), "accurate": round(t2 - t1, 4)},
        }
        if accurate_notes:
            info["notes"] = dict(accurate_notes)
        return out, {**notes, "cascade": info}

    def score(self, question: str, chunks: Sequence[Chunk]) -> np.ndarray:
        return self.score_detailed(question, chunks)[0]

    @property
    def vector_source(self) -> Scorer:
        """The scorer whose vectors stand for the chunks (:mod:`ctxsel.stages.vectors`): the fast part,
        which scored every chunk (the accurate one read the head only)."""
        return self.fast_scorer

    @property
    def rows_in_memory(self) -> int:
        """The texts whose vectors both parts keep in memory (a server clears them past its limit)."""
        return sum(int(getattr(s, "rows_in_memory", 0)) for s in (self.fast_scorer, self.accurate_scorer))

    def clear_memory(self) -> None:
        for s in (self.fast_scorer, self.accurate_scorer):
            clear = getattr(s, "clear_memory", None)
            if clear is not None:
                clear()

    def __repr__(self) -> str:
        return f"CascadeScorer({self.fast_spec!r} > {self.accurate_spec!r}, {self.head_spec}, join={self.join!r})"


def _count(label: str, value: object, unit: str, example: str) -> int | None:
    if value is None:
        return None
    try:
        return as_count(label, value, 1)
    except (InputError, TypeError):
        raise InputError(
            f"cascade {label} must be a whole number of {unit} >= 1 (how much of the fast ranking's top the "
            f"accurate scorer re-scores), got {value!r}; e.g. cascade[{example}]"
        ) from None


def explain(selection_ids: Sequence[str], info: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """``Selection.meta["cascade"]`` for a selection of ``selection_ids``, and the explanation's clause:
    where the head ended and how many of the kept chunks came from it."""
    meta = {k: v for k, v in info.items() if k != "head_ids"}
    head = set(info.get("head_ids", ()))
    meta["kept_from_head"] = sum(1 for c in selection_ids if c in head)
    end = info["head_end"]
    text = (
        f"; cascade: {info['accurate']} re-scored the top {info['head']} of {info['pool']} by {info['fast']} "
        f"(the head ended at {info['fast']} rank {end['fast_rank']}, {end['id']!r}); "
        f"{meta['kept_from_head']} of {len(selection_ids)} kept chunks from the head"
    )
    return meta, text


__all__ = ["DEFAULT_FAST", "DEFAULT_HEAD_TOKENS", "JOINS", "CascadeScorer", "explain", "fit_line", "head_of", "join"]
