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
from ctxsel.specs import option_names, parse_options, split_spec


@dataclass(frozen=True)
class ScorerInfo:
    name: str
    target: str | type[Any]  # "module:Class" (imported when first used), or the class itself
    summary: str
    #: a scorer whose options this one passes on (hybrid gives the ones it does not take to dense)
    passes_options_to: str | None = None
    #: a preset: the spec it stands for (``"dense[model=nomic-v1.5]"``); ``target`` is then unused
    preset: str | None = None


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


def _parse(spec: str) -> tuple[str, dict[str, Any]]:
    name, _, body = split_spec(spec, "scorer spec")
    return name, parse_options(body, f"scorer spec {spec!r}")


def register_preset(name: str, spec: str, summary: str = "") -> None:
    """A name for a scorer spec: ``register_preset("accurate", "dense[model=nomic-v1.5]")``. Its options
    are defaults that options given with the preset (``accurate[backend=llama-q8_0]``) override."""
    base, _ = _parse(spec)
    if base not in _REGISTRY or _REGISTRY[base].preset is not None:
        raise InputError(f"preset {name!r}: {base!r} is not a registered scorer")
    if not _NAME.match(name):
        raise InputError(f"scorer name {name!r} must be letters, digits, '-' or '_'")
    _REGISTRY[name] = ScorerInfo(name, _REGISTRY[base].target, summary, preset=spec)


def resolve_preset(name: str, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A preset's scorer name and options, the given ones over the preset's; an option given as None
    (a CLI flag left out) keeps the preset's value. Any other name comes back as it is."""
    info = _REGISTRY.get(name)
    if info is None or info.preset is None:
        return name, options
    base, preset_options = _parse(info.preset)
    given = {k: v for k, v in options.items() if v is not None or k not in preset_options}
    return base, {**preset_options, **given}


def base_scorer(name: str) -> str:
    """The registered scorer a name runs: itself, or the one a preset stands for."""
    info = _REGISTRY.get(name)
    if info is None or info.preset is None:
        return name
    return info.preset.partition("[")[0]


#: The built-in presets: ``fast`` is the default ranking, ``accurate`` the stronger embedder
#: (docs/results.md, "Choosing the default scorer", has the measurement behind the choice).
PRESETS = {"fast": "dense", "accurate": "dense[model=nomic-v1.5]"}
register_preset("fast", PRESETS["fast"], "bundled all-MiniLM-L6-v2, fast on any CPU (the default ranking)")
register_preset(
    "accurate",
    PRESETS["accurate"],
    "nomic-embed-text-v1.5 on llama.cpp, 8k window: higher recall, far slower to embed",
)
# after the presets: a cascade's parts are scorers and presets (``accurate``)
register_scorer(
    "cascade",
    "ctxsel.ranking.cascade:CascadeScorer",
    "hybrid ranks the pool, accurate re-scores its top 5,000 tokens: cascade[head=N|head_tokens=T,fast=,accurate=]",
)


def available_scorers() -> dict[str, ScorerInfo]:
    """The registered scorers by name, in registration order (the CLI's ``--scorer`` choices)."""
    return dict(_REGISTRY)


def scorer_class(name: str) -> type[Scorer]:
    """The class behind a scorer name; its module (and backend) is imported only now."""
    info = _REGISTRY.get(name)
    if info is None:
        raise SpecError(f"unknown scorer {name!r}; choose {', '.join(_REGISTRY)}")
    if info.preset is not None:
        return scorer_class(base_scorer(name))
    if isinstance(info.target, str):
        module, _, cls = info.target.partition(":")
        return getattr(importlib.import_module(module), cls)  # type: ignore[no-any-return]
    return info.target


def scorer_options(name: str) -> tuple[str, ...]:
    """The keyword options a scorer takes, and those of the scorer it passes the rest to."""
    name = base_scorer(name)
    names = option_names(scorer_class(name))
    delegate = _REGISTRY[name].passes_options_to
    return names + scorer_options(delegate) if delegate else names


__all__ = [
    "PRESETS",
    "ScorerInfo",
    "available_scorers",
    "base_scorer",
    "register_preset",
    "register_scorer",
    "resolve_preset",
    "scorer_class",
    "scorer_options",
]
