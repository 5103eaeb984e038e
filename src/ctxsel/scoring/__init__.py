"""Scorers: ``score(question, chunks) -> float32 array``, one per chunk.

Heavy backends (sentence-transformers, bm25s) load only when a scorer of
that kind is built. Scorers are looked up by name in a registry
(:mod:`ctxsel.scoring.registry`): a new one is a class plus a
:func:`register_scorer` call.
"""

from __future__ import annotations

from typing import Any

from ctxsel.errors import InputError, SpecError
from ctxsel.scoring.base import Scorer
from ctxsel.scoring.registry import (
    DEFAULT_SCORER,
    PRESETS,
    ScorerInfo,
    available_scorers,
    default_scorer,
    register_preset,
    register_scorer,
    resolve_preset,
    scorer_class,
    scorer_options,
)
from ctxsel.specs import parse_options, split_spec, unknown_option_message


def parse_scorer_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``"dense[backend=onnx,batch_size=64]"`` -> ``("dense", {"backend": "onnx", "batch_size": 64})``."""
    name, main, body = split_spec(spec, "scorer spec")
    if main is not None:
        raise SpecError(f"bad scorer spec {spec!r}: use NAME or NAME[key=value,...], e.g. dense[backend=onnx]")
    return name, parse_options(body, f"scorer spec {spec!r}")


def get_scorer(name: str | None = None, **options: Any) -> Scorer:
    """The default scorer (None: :func:`~ctxsel.scoring.registry.default_scorer`, the cascade), or
    ``dense`` (MiniLM on torch or ONNX Runtime), ``bm25`` (bm25s), ``keywords``, ``cascade``, or
    ``hybrid`` (dense + BM25 fused: ``hybrid[dense=1,bm25=0.25,fusion=minmax|rrf]``, see
    :mod:`ctxsel.scoring.hybrid`; other options go to its dense part, e.g. ``backend=onnx``), or a
    preset: ``fast`` (= ``dense``) or ``accurate`` (= ``dense[model=nomic-v1.5]``).

    ``name`` may carry options: ``get_scorer("dense[backend=onnx-int8]")`` equals
    ``get_scorer("dense", backend="onnx-int8")``; an option given both ways is an error, and so is
    an option the scorer does not take (the message lists the ones it does) or a value it cannot use.
    """
    name, spec_options = parse_scorer_spec(default_scorer() if name is None else name)
    both = sorted(set(spec_options) & set(options))
    if both:
        raise InputError(f"scorer option(s) {', '.join(both)} given both in the spec and as arguments")
    base, options = resolve_preset(name, {**spec_options, **options})
    cls, valid = scorer_class(base), scorer_options(base)
    for key in options:
        if key not in valid:
            raise InputError(unknown_option_message("scorer", name, key, valid))
    try:
        return cls(**options)
    except (TypeError, ValueError) as e:  # ctxsel's checks (InputError) and any a library makes
        raise InputError(f"bad options for scorer {name!r}: {e}") from None


__all__ = [
    "DEFAULT_SCORER",
    "PRESETS",
    "Scorer",
    "ScorerInfo",
    "available_scorers",
    "default_scorer",
    "get_scorer",
    "parse_scorer_spec",
    "register_preset",
    "register_scorer",
    "resolve_preset",
    "scorer_class",
    "scorer_options",
]
