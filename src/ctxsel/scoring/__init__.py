"""Scorers: ``score(question, chunks) -> float32 array``, one per chunk.

Heavy backends (sentence-transformers, bm25s) load only when a scorer of
that kind is built.
"""

from __future__ import annotations

from typing import Any

from ctxsel.errors import InputError, SpecError
from ctxsel.scoring.base import Scorer
from ctxsel.specs import parse_options, split_spec


def parse_scorer_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``"dense[backend=onnx,batch_size=64]"`` -> ``("dense", {"backend": "onnx", "batch_size": 64})``."""
    name, main, body = split_spec(spec, "scorer spec")
    if main is not None:
        raise SpecError(f"bad scorer spec {spec!r}: use NAME or NAME[key=value,...], e.g. dense[backend=onnx]")
    return name, parse_options(body, f"scorer spec {spec!r}")


#: The scorer names ``get_scorer`` knows (the CLI's ``--scorer`` choices).
SCORERS: tuple[str, ...] = ("dense", "bm25", "keywords", "hybrid")


def get_scorer(name: str = "dense", **options: Any) -> Scorer:
    """``dense`` (MiniLM on torch or ONNX Runtime), ``bm25`` (bm25s), ``keywords``, or
    ``hybrid`` (dense + BM25 fused: ``hybrid[dense=1,bm25=0.25,fusion=minmax|rrf]``, see
    :mod:`ctxsel.scoring.hybrid`; other options go to its dense part, e.g. ``backend=onnx``).

    ``name`` may carry options: ``get_scorer("dense[backend=onnx-int8]")`` equals
    ``get_scorer("dense", backend="onnx-int8")``; an option given both ways is an error.
    """
    name, spec_options = parse_scorer_spec(name)
    both = sorted(set(spec_options) & set(options))
    if both:
        raise InputError(f"scorer option(s) {', '.join(both)} given both in the spec and as arguments")
    options = {**spec_options, **options}
    if name == "dense":
        from ctxsel.scoring.dense import DenseScorer

        return DenseScorer(**options)
    if name == "bm25":
        from ctxsel.scoring.bm25 import BM25Scorer

        return BM25Scorer(**options)
    if name == "keywords":
        from ctxsel.scoring.keywords import KeywordScorer

        return KeywordScorer(**options)
    if name == "hybrid":
        from ctxsel.scoring.hybrid import HybridScorer

        return HybridScorer(**options)
    raise SpecError(f"unknown scorer {name!r}; choose {', '.join(SCORERS)}")


__all__ = ["SCORERS", "Scorer", "get_scorer", "parse_scorer_spec"]
