"""Scorers: ``score(question, chunks) -> float32 array``, one per chunk.

Heavy backends (sentence-transformers, bm25s) load only when a scorer of
that kind is built.
"""

from __future__ import annotations

import re
from typing import Any

from ctxsel.errors import InputError, SpecError
from ctxsel.scoring.base import Scorer
from ctxsel.specs import spec_value

_SPEC = re.compile(r"^\s*(?P<name>[A-Za-z0-9_\-]+)\s*(?:\[(?P<kv>[^\[\]]*)\])?\s*$")


def parse_scorer_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``"dense[backend=onnx,batch_size=64]"`` -> ``("dense", {"backend": "onnx", "batch_size": 64})``."""
    m = _SPEC.match(spec)
    if not m:
        raise SpecError(f"bad scorer spec {spec!r}: use NAME or NAME[key=value,...], e.g. dense[backend=onnx]")
    return m.group("name"), parse_options(m.group("kv"), f"scorer spec {spec!r}")


def parse_options(kv: str | None, where: str) -> dict[str, Any]:
    """``"a=1,b=x"`` -> ``{"a": 1, "b": "x"}`` (booleans, None, ints and floats read as such); ``where``
    names the spec in the error for a part that is not ``key=value``. Scorer and expansion specs share it."""
    options: dict[str, Any] = {}
    for part in filter(str.strip, (kv or "").split(",")):
        if "=" not in part:
            raise SpecError(f"bad option {part.strip()!r} in {where}: expected key=value")
        key, value = part.split("=", 1)
        options[key.strip()] = spec_value(value)
    return options


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
