"""Score maps: another scorer's scores carried onto the scale the bundled LDAR policy was trained on.

The policy reads the sorted similarities themselves, so it knows one scorer's scale (MiniLM's cosines):
nomic's cosines sit higher and closer together, BM25's are unbounded. A score map is a monotone
piecewise-linear function fitted by quantile matching on training pools that both scorers scored
(``python -m experiments.ldar_score_maps``): the q-th quantile of the scorer's pooled scores goes to
the q-th quantile of MiniLM's over the same pools. A monotone map keeps every ranking as it was; it
changes only what the policy sees, so the band it picks is one it was trained to pick. Past the
fitted range the end segments continue with their slopes (a score above every training score still
ranks above them). The maps ship as ``data/ldar_score_maps/score_maps.json``, checked against its
manifest's sha256 before it is read (:mod:`ctxsel.bundled`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ctxsel.errors import ModelError
from ctxsel.ranking.chain import find_same, same_scores

MAPS_FILE = "score_maps.json"
MAPS_FORMAT = "ctxsel-ldar-score-maps"
MAPS_VERSION = 1


@dataclass(frozen=True)
class ScoreMap:
    """Knots ``x`` (the scorer's quantiles, strictly increasing) onto ``y`` (the target's, non-decreasing)."""

    scorer: str
    x: tuple[float, ...]
    y: tuple[float, ...]

    def __call__(self, scores: np.ndarray) -> np.ndarray:
        x, y = np.asarray(self.x), np.asarray(self.y)
        s = np.asarray(scores, dtype=np.float64)
        out = np.interp(s, x, y)
        lo_slope = (y[1] - y[0]) / (x[1] - x[0])
        hi_slope = (y[-1] - y[-2]) / (x[-1] - x[-2])
        out = np.where(s < x[0], y[0] + (s - x[0]) * lo_slope, out)
        return np.asarray(np.where(s > x[-1], y[-1] + (s - x[-1]) * hi_slope, out), dtype=np.float64)


@dataclass(frozen=True)
class ScoreMaps:
    """The bundled maps: the scores they map onto (``target``) and one map per scores id."""

    target: str
    maps: dict[str, ScoreMap]


def fit_map(scorer: str, source: np.ndarray, target: np.ndarray, quantiles: np.ndarray) -> ScoreMap:
    """The quantile-matching map from ``source`` scores onto ``target`` scores (both pooled over the same
    training pools), with knots at ``quantiles``; knots that would not increase are merged."""
    xs = np.quantile(np.asarray(source, dtype=np.float64), quantiles)
    ys = np.quantile(np.asarray(target, dtype=np.float64), quantiles)
    keep = np.concatenate([[True], np.diff(xs) > 1e-9])
    xs, ys = xs[keep], np.maximum.accumulate(ys[keep])
    if len(xs) < 2:
        raise ValueError(f"{scorer}: its scores are all equal; no map can be fitted")
    return ScoreMap(scorer, tuple(float(v) for v in xs), tuple(float(v) for v in ys))


def parse_maps(data: Any, where: str) -> ScoreMaps:
    """The maps from the file's JSON; ModelError saying what is wrong otherwise."""

    def bad(why: str) -> ModelError:
        return ModelError(f"{where} is malformed: {why} (rebuild it: python -m experiments.ldar_score_maps)")

    if not isinstance(data, dict) or data.get("format") != MAPS_FORMAT:
        raise bad(f"format is not {MAPS_FORMAT!r}")
    if data.get("version") != MAPS_VERSION:
        raise bad(f"version {data.get('version')!r}; this ctxsel reads version {MAPS_VERSION}")
    target, maps = data.get("target"), data.get("maps")
    if not isinstance(target, str) or not isinstance(maps, dict):
        raise bad('no "target" scores id or no "maps"')
    out = {}
    for key, m in maps.items():
        try:
            sm = ScoreMap(str(m["scorer"]), tuple(float(v) for v in m["x"]), tuple(float(v) for v in m["y"]))
        except (KeyError, TypeError, ValueError) as e:
            raise bad(f"map {key!r}: {e!r}") from None
        x, y = np.asarray(sm.x), np.asarray(sm.y)
        if len(x) < 2 or len(x) != len(y) or np.any(np.diff(x) <= 0) or np.any(np.diff(y) < 0):
            raise bad(f"map {key!r}: knots must increase (x strictly, y never down), two at least")
        out[key] = sm
    return ScoreMaps(target, out)


@lru_cache(maxsize=1)
def bundled_maps() -> ScoreMaps:
    """The bundled maps, read once their sha256 matches the manifest's (:func:`ctxsel.bundled.verify`)."""
    from ctxsel import bundled

    return parse_maps(*bundled.read_json("ldar-score-maps", MAPS_FILE))


def map_for(trained: str, scores_id: str) -> ScoreMap | None:
    """The bundled map from ``scores_id``'s scores onto ``trained``'s, or None when there is none."""
    maps = bundled_maps()
    return find_same(maps.maps, scores_id) if same_scores(maps.target) == same_scores(trained) else None


__all__ = ["MAPS_FILE", "MAPS_FORMAT", "MAPS_VERSION", "ScoreMap", "ScoreMaps", "bundled_maps", "fit_map", "map_for"]
