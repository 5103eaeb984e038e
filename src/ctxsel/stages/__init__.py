"""Stages: what runs after a method's cut, in order, on every surface.

A stage takes the method's :class:`~ctxsel.types.Selection` and returns one
(:mod:`ctxsel.stages.base`). Stages are named by the spec grammar every method
uses (:mod:`ctxsel.specs`): ``NAME`` or ``NAME[key=value,...]``, and a list of
them is given in order, the same way on every surface:

    Python   ctxsel.select(q, chunks, stages=["reorder"])    Pipeline(selector, stages=["reorder"])
    CLI      ctxsel select ... --stage reorder                (repeat --stage for more, in order)
    HTTP     {"stages": ["reorder"]}
    LangChain, LlamaIndex, Haystack components: stages=["reorder"]

A list given as one string is split at top-level commas (``"reorder,other[x=1]"``).

Registered stages:

- ``reorder``: lost-in-the-middle reading order (:mod:`ctxsel.stages.reorder`).
- ``dedup``: drop kept chunks that repeat a higher-ranked one (:mod:`ctxsel.stages.dedup`).
- ``window``: each kept chunk's neighbours in document order (:mod:`ctxsel.stages.window`).
- ``prune``: query-aware sentence pruning inside each kept chunk (:mod:`ctxsel.stages.prune`).
- ``abstain``: an empty selection flagged ``abstained`` when nothing looks relevant (:mod:`ctxsel.stages.abstain`).
- ``mmr``: the method's k chunks picked again by maximal marginal relevance (:mod:`ctxsel.stages.mmr`).

A new stage is a frozen dataclass subclass of :class:`~ctxsel.stages.base.Stage` and one
:func:`register_stage` line.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
from collections.abc import Sequence
from dataclasses import dataclass

from ctxsel.errors import InputError, InputTypeError, SpecError
from ctxsel.options import build_options
from ctxsel.specs import parse_options, split_spec, split_top
from ctxsel.stages.base import Stage


@dataclass(frozen=True)
class StageInfo:
    """A registered stage: its name, its class (or ``"module:Class"``, imported when first used) and
    one line on what it does."""

    name: str
    target: str | type[Stage]
    summary: str


_STAGES: dict[str, StageInfo] = {}


def register_stage(name: str, target: str | type[Stage], summary: str = "") -> None:
    """Add a stage under ``name`` (letters, digits, ``-``, ``_``); the registration names the class."""
    if not isinstance(name, str) or split_spec(name, "stage name") != (name, None, None):
        raise ValueError(f"a stage name is letters, digits, '-' and '_', got {name!r}")
    if not isinstance(target, str):
        if not (isinstance(target, type) and issubclass(target, Stage) and dataclasses.is_dataclass(target)):
            raise TypeError(f"a stage must be a dataclass subclass of ctxsel.stages.base.Stage, got {target!r}")
        target.name = name
    _STAGES[name] = StageInfo(name, target, summary)


def available_stages() -> dict[str, StageInfo]:
    return dict(_STAGES)


def stage_class(name: str) -> type[Stage]:
    """The class behind a registered stage name (imports its module)."""
    info = _STAGES.get(name)
    if info is None:
        close = difflib.get_close_matches(name, list(_STAGES), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise SpecError(f"unknown stage {name!r}{hint}; available: {', '.join(sorted(_STAGES))}")
    if isinstance(info.target, str):
        module_name, cls_name = info.target.split(":")
        cls: type[Stage] = getattr(importlib.import_module(module_name), cls_name)
        cls.name = name
        _STAGES[name] = StageInfo(name, cls, info.summary)
        return cls
    return info.target


def get_stage(spec: str | Stage) -> Stage:
    """A Stage from a spec (``"reorder"``, ``"NAME[key=value]"``), or as given."""
    if isinstance(spec, Stage):
        return spec
    if not isinstance(spec, str):
        raise InputTypeError(f"a stage must be a spec string such as 'reorder' or a Stage, got {type(spec).__name__}")
    name, main, body = split_spec(spec, "stage spec")
    cls = stage_class(name)
    if main is not None:
        raise SpecError(f"stage {name!r} takes no @value: give options as {name}[key=value]")
    try:
        return build_options(cls, parse_options(body, repr(spec)), kind="stage", owner=name)
    except SpecError:
        raise
    except InputError as e:  # a value its declaration refuses, in a method's words
        raise SpecError(f"bad options for stage {name!r}: {e}") from None


def parse_stages(stages: str | Stage | Sequence[str | Stage] | None) -> list[Stage]:
    """Stages in order from a list of specs or Stages, or one string of comma-separated specs."""
    if stages is None:
        return []
    if isinstance(stages, (str, Stage)):
        items: Sequence[str | Stage] = (
            [s.strip() for s in split_top(stages, ",", f"stage list {stages!r}") if s.strip()]
            if isinstance(stages, str)
            else [stages]
        )
    elif isinstance(stages, Sequence):
        items = stages
    else:
        raise InputTypeError(f"stages must be a list of stage specs such as ['reorder'], got {type(stages).__name__}")
    if any(isinstance(s, str) and not s.strip() for s in items):
        raise InputError("a stage spec is empty: name a stage, e.g. 'reorder'")
    return [get_stage(s.strip() if isinstance(s, str) else s) for s in items]


register_stage("dedup", "ctxsel.stages.dedup:Dedup", "drop kept chunks that repeat a higher-ranked one")
register_stage("reorder", "ctxsel.stages.reorder:Reorder", "lost-in-the-middle reading order: best first, second last")
register_stage("window", "ctxsel.stages.window:Window", "add each kept chunk's neighbours in document order")
register_stage("prune", "ctxsel.stages.prune:Prune", "query-aware sentence pruning inside each kept chunk")
register_stage("abstain", "ctxsel.stages.abstain:Abstain", "an empty selection, flagged, when nothing looks relevant")
register_stage("mmr", "ctxsel.stages.mmr:Mmr", "pick the method's k chunks again by maximal marginal relevance")

__all__ = [
    "Stage",
    "StageInfo",
    "available_stages",
    "get_stage",
    "parse_stages",
    "register_stage",
    "stage_class",
]
