"""What every framework component shares: texts in, kept positions and metadata out.

A component hands over the query, the documents' texts and, optionally,
scores it already has (a retriever's); this module scores the rest with a
ctxsel scorer, runs any ctxsel selector, applies the never-empty rule and
describes each kept document in a flat metadata dict (``META_KEYS``), so
the three adapters only translate their framework's document type.
"""

from __future__ import annotations

import json
import math
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ctxsel.errors import InputError, InputTypeError, MissingExtraError, install_hint
from ctxsel.pipeline import Pipeline
from ctxsel.query import Query
from ctxsel.scoring.base import Scorer
from ctxsel.selectors import get_selector
from ctxsel.selectors.base import Selector
from ctxsel.stages import Stage
from ctxsel.types import Selection

#: Metadata keys written into every kept document (a flat dict, JSON-friendly).
META_KEYS = (
    "ctxsel_score",  # the score the selector ranked by (None for score-free methods)
    "ctxsel_rank",  # 1-based rank among the kept documents
    "ctxsel_method",  # the selector's name, e.g. "adaptive-k"
    "ctxsel_explanation",  # the reason for the cut, e.g. "largest gap 0.083 between ranks 3 and 4; ..."
    "ctxsel_k",  # how many documents were kept
    "ctxsel_n_candidates",  # how many came in
    "ctxsel_scores_from",  # "scorer:dense", "scorer:bm25", ... or "input" (the framework's own scores)
)

EMPTY_FALLBACK_NOTE = "kept the best-ranked document anyway (allow_empty=False)"


_NAMED_SCORERS: dict[str, Scorer] = {}
_NAMED_LOCK = threading.Lock()


def scorer_from(scorer: str | Scorer | None, options: Mapping[str, Any] | None = None) -> Scorer:
    """A Scorer from a name (``dense``, ``bm25``, ``cascade``; None: the default scorer) plus options,
    or as given.

    The embedding models are shared by every component in the process that names them with the same
    options, so each loads once, not once per component (or per ``select_documents`` call): a
    ``dense`` scorer itself, and a ``cascade``'s MiniLM and nomic parts (its BM25 keeps the index of
    the last chunk set, so each cascade, like each ``bm25`` scorer, is the component's own). A dense
    scorer keeps no per-query state, so sharing it across threads is safe.
    """
    if isinstance(scorer, str) or scorer is None:
        from ctxsel.scoring import default_scorer, parse_scorer_spec

        spec = default_scorer() if scorer is None else scorer
        name, _ = parse_scorer_spec(spec)
        opts = dict(options or {})
        if name == "cascade":
            return _cascade(spec, opts)
        return _shared(spec, opts) if name == "dense" else _build(spec, opts)
    if options:
        raise InputError("scorer_options only apply to a scorer given by name")
    if not hasattr(scorer, "score"):
        raise InputTypeError(f"scorer must be a name or have score(question, chunks), got {type(scorer).__name__}")
    return scorer


def _build(spec: str, options: Mapping[str, Any]) -> Scorer:
    from ctxsel.scoring import get_scorer

    return get_scorer(spec, **options)


def _shared(spec: str, options: Mapping[str, Any]) -> Scorer:
    """The process's one scorer of ``spec`` and ``options`` (an embedding model, loaded once)."""
    key = json.dumps([spec, dict(options)], sort_keys=True, default=str)
    with _NAMED_LOCK:
        if key not in _NAMED_SCORERS:
            _NAMED_SCORERS[key] = _build(spec, options)
        return _NAMED_SCORERS[key]


def _cascade(spec: str, options: dict[str, Any]) -> Scorer:
    """A cascade of its own whose embedding parts are the process's shared ones, where it names the
    bundled ones (``fast`` dense or hybrid, ``accurate`` the preset); ``num_threads`` goes to them."""
    from ctxsel.ranking.cascade import DEFAULT_FAST
    from ctxsel.scoring import parse_scorer_spec
    from ctxsel.scoring.hybrid import HybridScorer

    _, given = parse_scorer_spec(spec)
    merged = {**given, **options}
    threads = {"num_threads": merged["num_threads"]} if merged.get("num_threads") is not None else {}
    fast, accurate = merged.get("fast", DEFAULT_FAST), merged.get("accurate", "accurate")
    if "fast_scorer" not in merged and fast in ("dense", "hybrid"):
        dense = _shared("dense", threads)
        options["fast_scorer"] = dense if fast == "dense" else HybridScorer(dense_scorer=dense)
    if "accurate_scorer" not in merged and accurate == "accurate":
        options["accurate_scorer"] = _shared("accurate", threads)
    return _build(spec, options)


def make_selector(method: str | Selector, options: Mapping[str, Any] | None = None, llm: Any = None) -> Selector:
    """Any ctxsel method: a spec string (``"top-k@5"``) plus options, or a Selector instance."""
    return get_selector(method, llm=llm, **dict(options or {}))


class LazyParts:
    """The selector and scorer of a pydantic component, built on first use and kept.

    For the LangChain and LlamaIndex components: they declare the settings
    (``method``, ``selector_options``, ``llm``, ``scorer``, ``scorer_options``)
    as fields and ``_selector`` / ``_scorer`` as private attributes (default None).
    """

    method: str | Selector
    selector_options: dict[str, Any]
    llm: Any
    scorer: str | Scorer | None
    scorer_options: dict[str, Any]
    _selector: Selector | None
    _scorer: Scorer | None

    def _get_selector(self) -> Selector:
        if self._selector is None:
            self._selector = make_selector(self.method, self.selector_options, self.llm)
        return self._selector

    def _get_scorer(self) -> Scorer:
        if self._scorer is None:
            self._scorer = scorer_from(self.scorer, self.scorer_options)
        return self._scorer


@dataclass
class Outcome:
    """The kept input positions (rank order), their metadata, and the full Selection."""

    kept: list[int]
    metadata: list[dict[str, Any]]
    selection: Selection
    scores: list[float | None] = field(default_factory=list)  # one per input, in input order
    scores_from: str = ""
    fell_back: bool = False
    note: str = ""  # why the framework's own scores were not used (NOTE_KEY)
    #: the text a stage gave a kept input in place of its own (``prune``'s kept sentences), by position
    texts: dict[int, str] = field(default_factory=dict)

    def text_of(self, i: int, original: str) -> str:
        """Kept input ``i``'s text as the selection holds it: ``original`` unless a stage changed it."""
        return self.texts.get(i, original)

    def report(self) -> dict[str, Any]:
        """A JSON-friendly account of the selection: method, k, why, and every kept position."""
        sel = self.selection
        return {
            "method": sel.method,
            "config": sel.config,
            "k": len(self.kept),
            "n_candidates": sel.n_candidates,
            "n_tokens": sum(c.n_tokens for c in sel.chunks),
            "explanation": sel.explanation,
            "scores_from": self.scores_from,
            "kept": [
                {"index": i, "rank": r, "score": m["ctxsel_score"]}
                for r, (i, m) in enumerate(zip(self.kept, self.metadata), start=1)
            ],
            "allow_empty_fallback": self.fell_back,
            "abstained": sel.abstained,
            **({"abstain_reason": sel.abstain_reason} if sel.abstained else {}),
            **({"note": self.note} if self.note else {}),
            **({"truncated": sel.meta["truncated"]} if "truncated" in sel.meta else {}),
            **({"answer": sel.answer.text} if sel.answer is not None else {}),  # SAGE, Self-Route
            "usage": {"calls": sel.usage.calls, "tokens_in": sel.usage.tokens_in, "tokens_out": sel.usage.tokens_out},
        }


def check_documents(documents: Any, kind: str) -> None:
    """The adapters' entry check: a list of ``kind`` objects, never one string (which would
    otherwise be read one character at a time, or fail deep inside with an AttributeError)."""
    if isinstance(documents, (str, bytes)) or documents is None or not hasattr(documents, "__iter__"):
        what = f"a single {type(documents).__name__}" + (
            f" of {len(documents):,} characters" if isinstance(documents, str) else ""
        )
        raise InputTypeError(f"documents must be a list of {kind} objects, got {what}: wrap each text in a {kind}")
    for i, d in enumerate(documents):
        if isinstance(d, (str, bytes)):
            raise InputTypeError(f"documents[{i}] is a {type(d).__name__}, not a {kind}: wrap each text in a {kind}")


#: What a component does when the framework's own scores it was told to use are incomplete: "error"
#: (default: refuse, naming the document) or "rescore" (warn, score every document with the scorer,
#: and say so in each kept document's ``ctxsel_note``).
MISSING_SCORES = ("error", "rescore")

#: The metadata key of that note (only on documents of a call that rescored).
NOTE_KEY = "ctxsel_note"


def given_scores(
    values: Sequence[Any], source: str = "score", on_missing: str = "error", option: str = "missing_scores"
) -> tuple[list[float] | None, str]:
    """The framework's own scores and "", when every one is a finite number (the Python API's rule:
    a numeric string or a bool is not one); else, by ``on_missing``, an InputError that names the
    first bad document (``documents[2].metadata['relevance_score'] is missing``), or None and the
    note to record (a partial set is not comparable with freshly computed scores, so all are rescored)."""
    if on_missing not in MISSING_SCORES:
        raise InputError(f"{option} must be one of {', '.join(map(repr, MISSING_SCORES))}, got {on_missing!r}")
    out = []
    for i, v in enumerate(values):
        if v is None:
            problem = "is missing"
        elif isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
            problem = f"is {v!r} (a {type(v).__name__}), not a number"
        elif not math.isfinite(float(v)):
            problem = f"is {float(v)!r}, not a finite number"
        else:
            out.append(float(v))
            continue
        where = f"documents[{i}].{source} {problem}"
        if on_missing == "error":
            raise InputError(
                f"{where}: give every document a finite numeric score, or pass {option}='rescore' to score "
                "them all with the scorer"
            )
        note = f"the input scores were not used ({where}); every document was rescored"
        warnings.warn(note, stacklevel=3)
        return None, note
    return out, ""


def select_positions(
    query: str,
    texts: Sequence[str],
    selector: Selector,
    scorer: Scorer | None,
    *,
    scores: Sequence[float] | None = None,
    allow_empty: bool = False,
    choices: Sequence[str] | None = None,
    note: str = "",
    stages: Sequence[str | Stage] | None = None,
) -> Outcome:
    """Run ``selector`` over ``texts`` for ``query``, then ``stages`` after its cut.

    ``scores`` (one per text) are used as given; without them a score-based
    selector scores with ``scorer``. With ``allow_empty=False`` a non-empty
    input always keeps at least its best-ranked text, even where the method
    (or a ``max_tokens`` budget) would keep none, unless the ``abstain`` stage abstained: then no
    text is kept and the report says why. ``choices`` are a
    multiple-choice question's answer options (SAGE reads them). The kept positions
    come back in the selection's reading order when a stage set one (``reorder``),
    else in rank order.
    """
    q = Query(query, texts, scores, choices=choices)
    n = len(q.chunks)
    scores_from = "input"
    if q.scores is None and selector.needs_scores and n:
        if scorer is None:
            raise InputError(f"method {selector.name!r} needs scores: give a scorer or documents with scores")
        scores_from = f"scorer:{getattr(scorer, 'name', type(scorer).__name__)}"
    elif q.scores is None and not selector.needs_scores:
        scores_from = "none"
    pipeline = Pipeline(selector, scorer, stages=stages)
    scored = pipeline.rank(q)  # notes: text the model's window cut
    arr = None if scored.scores is None or not n else scored.scores
    sel = pipeline.run(q, scored)
    chunks = q.chunks
    # a method that selects parts of the inputs (SAGE's sentences) names each part's input in meta["parent"]:
    # the framework gets those inputs back, once each, in the order their first part was kept
    kept: list[int] = []
    kept_scores: list[float | None] = []
    kept_ranks: list[int] = []
    changed: dict[int, str] = {}
    rank_of = {cid: (r, s) for r, (cid, s) in enumerate(zip(sel.ids, sel.scores), start=1)}
    for c in sel.read_chunks() if sel.reading is not None else sel.chunks:
        i = int(c.meta.get("parent", c.id))
        if i not in kept:
            if "parent" not in c.meta and i < n and c.text != q.chunks[i].text:
                changed[i] = c.text
            kept.append(i)
            kept_ranks.append(rank_of[c.id][0])
            kept_scores.append(rank_of[c.id][1])
    fell_back = False
    if n and not kept and not allow_empty and not sel.abstained:  # an abstention is empty on purpose
        best = _best_position(arr)
        kept, kept_ranks = [best], [1]
        kept_scores = [None if arr is None else _finite(arr[best])]
        sel.ids, sel.chunks, sel.scores = [str(best)], [chunks[best]], kept_scores
        sel.explanation = f"{sel.explanation}; {EMPTY_FALLBACK_NOTE}"
        fell_back = True
    metadata = [
        {
            "ctxsel_score": s,
            "ctxsel_rank": r,
            "ctxsel_method": sel.method,
            "ctxsel_explanation": sel.explanation,
            "ctxsel_k": len(kept),
            "ctxsel_n_candidates": n,
            "ctxsel_scores_from": scores_from,
            **({NOTE_KEY: note} if note else {}),
        }
        for r, s in zip(kept_ranks, kept_scores)
    ]
    all_scores: list[float | None] = [None] * n if arr is None else [_finite(x) for x in arr]
    return Outcome(kept, metadata, sel, all_scores, scores_from, fell_back, note, changed)


def _best_position(arr: np.ndarray | None) -> int:
    """Highest finite score, ties by position; the first document when there are no scores."""
    if arr is None or not np.isfinite(arr).any():
        return 0
    key = np.where(np.isfinite(arr), -arr, np.inf)
    return int(np.argsort(key, kind="stable")[0])


def _finite(x: float) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def missing_extra(framework: str, extra: str, error: ImportError) -> MissingExtraError:
    """The ImportError a component raises when its framework is not installed."""
    return MissingExtraError(
        f"ctxsel's {framework} integration needs the {framework} package ({error.name or error}); "
        f"install it with: {install_hint(extra)}"
    )
