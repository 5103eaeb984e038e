"""Scorer registry: one name per scorer, registered the way methods are (:func:`ctxsel.register`).

A new scorer is one class plus one :func:`register_scorer` call; its name then works wherever a
scorer name does (``get_scorer``, ``--scorer``, ``ctxsel serve --scorer``). The built-ins register
by import path, so listing them imports no backend.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any

from ctxsel.errors import InputError, InputTypeError, SpecError
from ctxsel.scoring.base import Scorer
from ctxsel.specs import option_names


@dataclass(frozen=True)
class ScorerInfo:
    name: str
    target: str | type[Any]  # "module:Class" (imported when first used), or the class itself
    summary: str
    #: a scorer whose options this one passes on (hybrid gives the ones it does not take to dense)
    passes_options_to: str | None = None


_REGISTRY: dict[str, ScorerInfo] = {}
_NAME = re.compile(r"^[A-Za-z0-9_\-]+$")


def register_scorer(
    name: str, target: str | type[Any], summary: str = "", passes_options_to: str | None = None
) -> None:
    """Add a scorer: ``target`` is ``"module:Class"`` or a class whose instances have ``score``."""
    if not _NAME.match(name):
        raise InputError(f"scorer name {name!r} must be letters, digits, '-' or '_'")
    if not isinstance(target, (str, type)):
        raise InputTypeError(
            f"register_scorer({name!r}, ...): target must be 'module:Class' or a class, got {target!r}"
        )
    _REGISTRY[name] = ScorerInfo(name, target, summary, passes_options_to)


register_scorer("dense", "ctxsel.scoring.dense:DenseScorer", "an embedding model's cosine similarity (bundled MiniLM)")
register_scorer("bm25", "ctxsel.scoring.bm25:BM25Scorer", "BM25 (bm25s)")
register_scorer("keywords", "ctxsel.scoring.keywords:KeywordScorer", "the question's keywords found in each chunk")
register_scorer(
    "hybrid", "ctxsel.scoring.hybrid:HybridScorer", "dense and BM25 fused (minmax or rrf)", passes_options_to="dense"
)


def available_scorers() -> dict[str, ScorerInfo]:
    """The registered scorers by name, in registration order (the CLI's ``--scorer`` choices)."""
    return dict(_REGISTRY)


def scorer_class(name: str) -> type[Scorer]:
    """The class behind a scorer name; its module (and backend) is imported only now."""
    info = _REGISTRY.get(name)
    if info is None:
        raise SpecError(f"unknown scorer {name!r}; choose {', '.join(_REGISTRY)}")
    if isinstance(info.target, str):
        module, _, cls = info.target.partition(":")
        return getattr(importlib.import_module(module), cls)  # type: ignore[no-any-return]
    return info.target


def scorer_options(name: str) -> tuple[str, ...]:
    """The keyword options a scorer takes, and those of the scorer it passes the rest to."""
    names = option_names(scorer_class(name))
    delegate = _REGISTRY[name].passes_options_to
    return names + scorer_options(delegate) if delegate else names


__all__ = ["ScorerInfo", "available_scorers", "register_scorer", "scorer_class", "scorer_options"]
