"""``abstain``: an empty selection, flagged, when nothing in the pool is relevant to the question.

Every cut keeps something: over a pool that does not hold the answer, the best-scoring chunks are
still the best, and nothing says they are poor. This stage looks at the whole pool's scores and at
the question's words, and when they look like a question the pool cannot answer it empties the
selection and sets ``Selection.abstained`` with a reason (``abstain_reason``); ``meta["abstain"]``
holds the features, the model's probability and the threshold, whether it abstained or not.

**Rule.** A logistic model over features that do not depend on the scorer's scale (see
:func:`features`): the top score, the top score standardised within the pool
(``(max - mean) / std``), the gap between the top 1 and the top 10 in standard deviations, how many
chunks stand more than ``z_out`` standard deviations above the mean, and lexical evidence: the
share of the question's content words, each weighted by its rarity in the pool, found in the top
``top_n`` chunks and anywhere in the pool, and the share of the question's names (runs of
capitalised words) found in the top ``top_n`` and top 10 chunks. It abstains when the probability is at least the
threshold (the calibration's operating point unless ``threshold`` is given).

**Calibration.** Per scorer, fitted on data built from hotpotqa-long's training questions
(``python -m experiments.abstention``): each question over the full pool (answerable), over the pool
without its item's ten paragraphs (nothing related) and without its two gold paragraphs (evidence
missing). The coefficients ship as ``data/abstain/abstain.json``, checked against its manifest's
sha256 before it is read (:mod:`ctxsel.bundled`). The calibration is the scorer the method ranked by
(the default ``cascade``, ``dense:all-MiniLM-L6-v2``, ``bm25``); for scores given with the query,
or a scorer the file does not know, name one with ``calibration=`` or the stage warns once, names the
ones it knows and keeps the selection as it is.
"""

from __future__ import annotations

import dataclasses
import math
import re
import threading
import warnings
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from ctxsel.errors import AbstainWarning, InputError, ModelError
from ctxsel.numbers import short_number
from ctxsel.options import option
from ctxsel.query import Query
from ctxsel.ranking.chain import Ranking, find_same, same_scores, scores_id
from ctxsel.scoring.keywords import STOPWORDS, words
from ctxsel.stages.base import Stage
from ctxsel.types import Selection

#: the bundled model's file, in the ``abstain`` artefact's folder
MODEL_FILE = "abstain.json"
#: the file's ``format`` and the ``version`` this ctxsel reads
MODEL_FORMAT = "ctxsel-abstain"
MODEL_VERSION = 1
#: the features, in the order the model's coefficients are
FEATURES = ("top", "z_top", "gap_10", "n_out", "cov_top", "cov_pool", "names_top", "names_10")
#: a name in a question: a run of capitalised words or numbers, with small joining words inside
_NAME = re.compile(r"(?:[A-Z][\w'&.-]*|\d\w*)(?:\s+(?:of|the|and|de|for|in)?\s*(?:[A-Z][\w'&.-]*|\d\w*))*")
_TOKEN = re.compile(r"[^\W_]+")


def features(
    question: str,
    texts: Sequence[str],
    scores: np.ndarray,
    *,
    top_n: int = 5,
    z_out: float = 3.0,
    text_words: Sequence[set[str] | frozenset[str]] | None = None,
) -> dict[str, float]:
    """The rule's features of one question over one pool (one score per text; NaN scores are left out).

    ``top`` the best score; ``z_top`` it standardised within the pool, ``(max - mean) / std``;
    ``gap_10`` the best minus the 10th best, over std; ``n_out`` log(1 + how many chunks score more than
    ``z_out`` std above the mean); ``cov_top`` the share of the question's content words found in the
    ``top_n`` best chunks, each word weighted by its inverse document frequency in the pool (a word no
    chunk has weighs most); ``cov_pool`` the same share over the whole pool; ``names_top`` and
    ``names_10`` the share of the question's names (:func:`question_names`) found in the ``top_n`` and
    the 10 best chunks' text (1 when it has none). ``text_words`` are the
    texts' word sets when the caller has them (:func:`ctxsel.scoring.keywords.words`).
    """
    s = np.asarray(scores, dtype=np.float64)
    finite = np.isfinite(s)
    n = int(finite.sum())
    if n == 0:
        return dict.fromkeys(FEATURES, 0.0)
    vals = s[finite]
    order = np.argsort(-np.where(finite, s, -np.inf), kind="stable")[: min(top_n, n)]
    top = float(vals.max())
    std = float(vals.std())
    mean = float(vals.mean())
    ranked = np.sort(vals)[::-1]
    tenth = float(ranked[min(9, n - 1)])
    z_top = (top - mean) / std if std > 0 else 0.0
    gap_10 = (top - tenth) / std if std > 0 else 0.0
    n_out = math.log1p(int((vals > mean + z_out * std).sum())) if std > 0 else 0.0
    q_words = sorted(words(question))  # sorted: the sums below do not depend on the hash seed
    bags = list(text_words) if text_words is not None else [_bag(t) for t in texts]
    if not q_words:
        cov_top = cov_pool = 1.0  # nothing to look for: no lexical evidence either way
    else:
        df = {w: sum(1 for b in bags if w in b) for w in q_words}
        idf = {w: math.log((len(bags) + 1) / (df[w] + 1)) + 1.0 for w in q_words}
        total = sum(idf.values())
        top_words = set().union(*(bags[int(i)] for i in order)) if len(order) else set()
        cov_top = sum(v for w, v in idf.items() if w in top_words) / total
        cov_pool = sum(v for w, v in idf.items() if df[w] > 0) / total
    names = question_names(question)
    if names:
        ranked_idx = np.argsort(-np.where(finite, s, -np.inf), kind="stable")
        top_text = "\n".join(texts[int(i)].lower() for i in ranked_idx[: min(top_n, n)])
        ten_text = "\n".join(texts[int(i)].lower() for i in ranked_idx[: min(10, n)])
        names_top = sum(1 for m in names if m in top_text) / len(names)
        names_10 = sum(1 for m in names if m in ten_text) / len(names)
    else:
        names_top = names_10 = 1.0  # no name to look for
    return {
        "top": top,
        "z_top": z_top,
        "gap_10": gap_10,
        "n_out": n_out,
        "cov_top": cov_top,
        "cov_pool": cov_pool,
        "names_top": names_top,
        "names_10": names_10,
    }


@lru_cache(maxsize=1 << 16)
def _bag(text: str) -> frozenset[str]:
    """A text's word set, remembered: a pool is asked about by many questions."""
    return frozenset(words(text))


def question_names(question: str) -> list[str]:
    """The question's names, lower-cased: runs of capitalised words or numbers ("Arthur's Magazine",
    "2014 FIFA World Cup"); a single word that starts the question, or only stopwords, is not one."""
    out = []
    for m in _NAME.finditer(question):
        toks = _TOKEN.findall(m.group(0).lower())
        if not toks or all(t in STOPWORDS for t in toks) or (m.start() == 0 and len(toks) == 1):
            continue
        out.append(m.group(0).strip().lower())
    return out


@dataclasses.dataclass(frozen=True)
class Calibration:
    """One scorer's logistic model: feature means and scales, coefficients, intercept, operating point."""

    name: str
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float
    threshold: float

    def probability(self, feats: Mapping[str, float]) -> float:
        """The model's probability that the pool holds nothing relevant."""
        x = np.array([feats[f] for f in FEATURES], dtype=np.float64)
        z = float(np.dot((x - np.array(self.mean)) / np.array(self.scale), np.array(self.coef)) + self.intercept)
        return 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0


@dataclasses.dataclass(frozen=True)
class AbstainModel:
    """The bundled file: the feature options and one calibration per scorer id."""

    top_n: int
    z_out: float
    calibrations: Mapping[str, Calibration]


def parse_model(data: Any, where: str) -> AbstainModel:
    """The model from the file's JSON; ModelError saying what is wrong otherwise."""

    def bad(why: str) -> ModelError:
        return ModelError(f"{where} is malformed: {why} (rebuild it: python -m experiments.abstention)")

    if not isinstance(data, dict) or data.get("format") != MODEL_FORMAT:
        raise bad(f"format is not {MODEL_FORMAT!r}")
    if data.get("version") != MODEL_VERSION:
        raise bad(f"version {data.get('version')!r}; this ctxsel reads version {MODEL_VERSION}")
    if list(data.get("features", [])) != list(FEATURES):
        raise bad(f"features {data.get('features')!r}, not {list(FEATURES)!r}")
    opts, cals = data.get("feature_options", {}), data.get("calibrations")
    if not isinstance(cals, dict) or not cals:
        raise bad('"calibrations" names no scorer')
    out = {}
    for name, c in cals.items():
        try:
            vec = {k: tuple(float(v) for v in c[k]) for k in ("mean", "scale", "coef")}
            cal = Calibration(
                name, vec["mean"], vec["scale"], vec["coef"], float(c["intercept"]), float(c["threshold"])
            )
        except (KeyError, TypeError, ValueError) as e:
            raise bad(f"calibration {name!r}: {e!r}") from None
        if any(len(v) != len(FEATURES) for v in vec.values()) or any(x <= 0 for x in cal.scale):
            raise bad(f"calibration {name!r}: one mean, positive scale and coefficient per feature")
        out[name] = cal
    return AbstainModel(int(opts.get("top_n", 5)), float(opts.get("z_out", 3.0)), out)


@lru_cache(maxsize=1)
def bundled_model() -> AbstainModel:
    """The bundled model, read once its sha256 matches the manifest's (:func:`ctxsel.bundled.verify`)."""
    from ctxsel import bundled

    return parse_model(*bundled.read_json("abstain", MODEL_FILE))


def known_calibrations() -> list[str]:
    """The scorer ids the bundled model is calibrated for."""
    return sorted(bundled_model().calibrations)


def scorer_id(query: Query, ranking: Ranking | None) -> str | None:
    """The id of what produced the scores the method ranked by (:func:`ctxsel.ranking.chain.scores_id`,
    whatever the ONNX backend: ``dense:all-MiniLM-L6-v2``, ``bm25``), or None when they came with the query."""
    if query.scores is not None or ranking is None or ranking.built_scorer is None:
        return None
    return same_scores(scores_id(ranking))


_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_once(key: str, message: str) -> None:
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, AbstainWarning, stacklevel=4)


@dataclasses.dataclass(frozen=True)
class Abstain(Stage):
    """Empty the selection, with ``abstained`` and a reason, when the pool looks like it holds nothing relevant."""

    needs_ranking: ClassVar[bool] = True
    calibration: str | None = option(
        None, doc="the scorer id whose calibration to use (default: the scorer the method ranked by)"
    )
    threshold: float | None = option(
        None, minimum=0.0, maximum=1.0, doc="abstain at this probability or above (default: the calibration's)"
    )

    def __post_init__(self) -> None:
        if self.calibration is not None and find_same(bundled_model().calibrations, self.calibration) is None:
            raise InputError(f"calibration must be one of {', '.join(known_calibrations())}, got {self.calibration!r}")

    def apply(
        self, selection: Selection, query: Query, scores: np.ndarray | None, *, ranking: Ranking | None = None
    ) -> Selection:
        if scores is None:
            raise InputError(
                f"the abstain stage reads the pool's scores, and method {selection.method!r} ranked by none: "
                "use a score-based method or give scores"
            )
        model = bundled_model()
        source = self.calibration or scorer_id(query, ranking)
        cal = find_same(model.calibrations, source) if source is not None else None
        if cal is None:
            what = "scores given with the query" if source is None else f"scorer {source!r}"
            note = (
                f"abstain is not calibrated for {what}; it kept the selection. Calibrated for: "
                f"{', '.join(sorted(model.calibrations))} (name one with abstain[calibration=...])"
            )
            _warn_once(source or "<given>", note)
            selection.meta["abstain"] = {"abstained": False, "calibration": None, "note": note}
            return selection
        texts = [c.text for c in query.chunks]
        if not texts:
            return _abstain(selection, "the pool is empty", {"calibration": cal.name})
        feats = features(query.question, texts, scores, top_n=model.top_n, z_out=model.z_out)
        p = cal.probability(feats)
        threshold = cal.threshold if self.threshold is None else self.threshold
        info: dict[str, Any] = {
            "calibration": cal.name,
            "probability": p,
            "threshold": threshold,
            "features": feats,
        }
        if p < threshold:
            selection.meta["abstain"] = {"abstained": False, **info}
            return selection
        reason = (
            f"nothing relevant: abstention probability {short_number(p)} >= {short_number(threshold)} "
            f"({cal.name}; top score {short_number(feats['top'])}, {short_number(feats['z_top'], 1)} std above the "
            f"pool mean, {feats['cov_top']:.0%} of the question's words in the top {model.top_n})"
        )
        return _abstain(selection, reason, info)


def _abstain(selection: Selection, reason: str, info: dict[str, Any]) -> Selection:
    dropped = list(selection.ids)
    selection.ids, selection.scores, selection.chunks, selection.reading = [], [], [], None
    selection.abstained, selection.abstain_reason = True, reason
    selection.explanation += f"; abstained ({reason})"
    selection.meta["abstain"] = {"abstained": True, "reason": reason, "dropped": dropped, **info}
    return selection


__all__ = ["FEATURES", "Abstain", "AbstainWarning", "Calibration", "features", "known_calibrations", "scorer_id"]
