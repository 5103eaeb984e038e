"""Command-line flags generated from a config dataclass, as TRL's ``*_config.py`` generate theirs.

A trainer's settings are written once, in its config dataclass (type, default, and the help text
in ``field(metadata={"help": ...})``); ``ctxsel train ...`` and ``ctxsel mine`` add flags for the
fields they expose and build the config back from the parsed arguments, so a flag cannot drift
from the setting it sets.

- the flag is ``--field-name`` unless ``metadata["flag"]`` names another (two trainers share the
  ``train`` parser, so Context-Picker's ``lr`` is ``--picker-lr``);
- ``int``, ``float`` and ``str`` fields take a value of that type; a ``Literal`` field's values
  are its choices;
- a ``bool`` field defaulting to False is a ``--flag`` that sets it; one defaulting to True is a
  ``--no-flag`` that clears it;
- the help ends with the default, unless the help text already states it.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Sequence
from typing import Any, Literal, TypeVar

T = TypeVar("T")

ArgGroup = argparse.ArgumentParser | argparse._ArgumentGroup


def _flag(f: dataclasses.Field[Any]) -> str:
    flag = f.metadata.get("flag")
    if flag:
        return str(flag)
    prefix = "--no-" if f.type in (bool, "bool") and f.default is True else "--"
    return prefix + f.name.replace("_", "-")


def _dest(f: dataclasses.Field[Any]) -> str:
    """Where argparse stores the value: the field's name for a switch, else the flag's name (so
    two trainers' ``lr`` fields, ``--lr`` and ``--picker-lr``, do not collide)."""
    if f.type in (bool, "bool"):
        return f.name
    return _flag(f).lstrip("-").replace("-", "_")


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    raise AttributeError(f"field {f.name!r} has no default: a flag needs one")


def _fields(cls: type[Any], names: Sequence[str]) -> list[dataclasses.Field[Any]]:
    by_name = {f.name: f for f in dataclasses.fields(cls)}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise AttributeError(f"{cls.__name__} has no field(s) {unknown}")
    return [by_name[n] for n in names]


def add_dataclass_arguments(group: ArgGroup, cls: type[Any], names: Sequence[str]) -> None:
    """Add a flag to ``group`` for each of ``cls``'s fields ``names``."""
    hints = typing.get_type_hints(cls)
    for f in _fields(cls, names):
        kind = hints[f.name]
        default = _default(f)
        help_text = str(f.metadata.get("help", ""))
        if kind is bool:
            action = "store_false" if default else "store_true"
            group.add_argument(_flag(f), action=action, dest=_dest(f), default=default, help=help_text)
            continue
        if "default" not in help_text:
            help_text = f"{help_text} (default {default})".strip()
        if typing.get_origin(kind) is Literal:
            choices = list(typing.get_args(kind))
            group.add_argument(_flag(f), choices=choices, default=default, dest=_dest(f), help=help_text)
        else:
            group.add_argument(_flag(f), type=kind, default=default, dest=_dest(f), help=help_text)


def from_args(cls: type[T], args: argparse.Namespace, names: Sequence[str], **fixed: Any) -> T:
    """``cls`` built from the parsed flags of its fields ``names`` (and ``fixed`` values for others)."""
    values: dict[str, Any] = {}
    for f in _fields(cls, names):
        values[f.name] = getattr(args, _dest(f))
    return cls(**values, **fixed)


__all__ = ["add_dataclass_arguments", "from_args"]
