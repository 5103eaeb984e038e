"""Options declared once: a frozen dataclass per method and stage.

A method's (or a stage's) options are the fields of one frozen dataclass. Everything a
surface needs is read from there: the names a spec may set, each value's check (type,
range, whole numbers), the message a bad value gets, the listing ``ctxsel env`` and the
docs print, and which options a request may not set. Python, the command line and HTTP
all build options through :func:`build_options`, so a value gets one verdict, in one
wording, on every surface, by construction.

    @dataclass(frozen=True)
    class TopKOptions(CommonOptions):
        k: int = option(5, minimum=0, doc="how many chunks to keep")

The value rules, by the field's type:

- ``int``: an integer, or a whole finite float (``5.0``, ``1e3``: JSON and specs give those);
  ``2.5``, NaN, a bool or a numeric string is refused; then ``minimum`` / ``maximum``.
- ``float``: a finite number (not a bool, not a string); then the bounds (``below``: strictly).
- ``bool``: ``true`` or ``false`` only (not 1, not "yes").
- ``str`` and ``Literal[...]``: a string (one of the listed ones).
- ``X | None``: None, or X's rule.

Anything else (a client object, a path or a loaded policy) is a resource, not an option:
it is left to the method. An option that does not apply to the configuration chosen is
refused by the class's :meth:`Options.refuse` with the reason, never silently ignored.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeVar, Union

import numpy as np

from ctxsel.errors import InputError, InputTypeError, SpecError
from ctxsel.inputs import as_float, as_int
from ctxsel.specs import unknown_option_message

O = TypeVar("O", bound="Options")

#: what ``option()`` puts in a field's metadata
_META = ("minimum", "maximum", "below", "doc", "server_flag", "key")


def option(
    default: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    below: float | None = None,
    doc: str = "",
    server_flag: str | None = None,
    key: str | None = None,
) -> Any:
    """A declared option: its default, bounds (``minimum``/``maximum`` inclusive, ``below``
    exclusive), one line for the option table, ``server_flag`` for an option that changes
    the whole process (thread counts): a request may not set it, the server's flag does, and
    ``key``, the option's name in specs, requests and records when it cannot be the field's
    (``lambda``, a Python keyword: ``lam: float = option(0.7, key="lambda")``)."""
    meta = {"minimum": minimum, "maximum": maximum, "below": below, "doc": doc, "server_flag": server_flag, "key": key}
    return dataclasses.field(default=default, metadata=meta)


@dataclasses.dataclass(frozen=True)
class Options:
    """The base of every options dataclass."""

    def refuse(self, given: frozenset[str]) -> str | None:
        """Why an option that was ``given`` does not apply to this configuration, or None."""
        return None

    def as_config(self) -> dict[str, Any]:
        """The options as a run's config records them: the owner's own first, then the common ones."""
        common = declared(CommonOptions)
        infos = sorted(declared(type(self)).values(), key=lambda i: i.name in common)
        return {i.name: getattr(self, i.attr) for i in infos}


@dataclasses.dataclass(frozen=True)
class CommonOptions(Options):
    """``min_k``, ``max_tokens`` and ``nan_policy``: what every built-in method takes."""

    min_k: int = option(1, minimum=0, doc="keep at least this many chunks (capped at the pool)")
    max_tokens: int | None = option(None, minimum=0, doc="a hard token budget; it wins over min_k")
    nan_policy: Literal["raise", "last"] = option("raise", doc="NaN or infinite scores: refuse, or rank them last")


@dataclasses.dataclass(frozen=True)
class OptionInfo:
    """One declared option, as the spec parser, the checks and the listings read it: ``name`` is its
    key in specs, requests and records, ``attr`` the dataclass field that holds it (the same name
    unless the option declares a ``key``)."""

    name: str
    type: Any
    default: Any
    minimum: float | None = None
    maximum: float | None = None
    below: float | None = None
    doc: str = ""
    server_flag: str | None = None
    attr: str = ""

    def __post_init__(self) -> None:
        if not self.attr:
            object.__setattr__(self, "attr", self.name)

    def describe(self) -> str:
        """What a value must be, in words: ``an integer >= 0``, ``one of 'raise', 'last'``, ``an integer
        >= 1, or none``."""
        args = typing.get_args(self.type)
        if typing.get_origin(self.type) in (Union, types.UnionType) and type(None) in args:
            rest = [a for a in args if a is not type(None)]
            if len(rest) == 1:
                return f"{_describe(rest[0])}{self._bounds()}, or none"
        return _describe(self.type) + self._bounds()

    def _bounds(self) -> str:
        parts = []
        if self.minimum is not None:
            parts.append(f">= {_num(self.minimum)}")
        if self.maximum is not None:
            parts.append(f"<= {_num(self.maximum)}")
        if self.below is not None:
            parts.append(f"< {_num(self.below)}")
        return (" " + " and ".join(parts)) if parts else ""


_DECLARED: dict[type, dict[str, OptionInfo]] = {}


def declared(cls: type[Options]) -> dict[str, OptionInfo]:
    """The options ``cls`` declares, by name, in declaration order (a base's first); read once per class."""
    got = _DECLARED.get(cls)
    if got is None:
        got = _DECLARED[cls] = _read_declaration(cls)
    return got


def _read_declaration(cls: type[Options]) -> dict[str, OptionInfo]:
    hints = typing.get_type_hints(cls)
    out: dict[str, OptionInfo] = {}
    for f in dataclasses.fields(cls):
        meta = {k: f.metadata.get(k) for k in _META if k != "key"}
        key = f.metadata.get("key") or f.name
        if key in out:
            raise TypeError(f"{cls.__name__} declares option {key!r} twice")
        out[key] = OptionInfo(key, hints.get(f.name, Any), f.default, **meta, attr=f.name)  # type: ignore[arg-type]
    return out


def check_value(info: OptionInfo, value: Any) -> Any:
    """``value`` for option ``info`` as its declaration reads it, or the one message every surface gives."""
    return _check(info, info.type, value)


def _check(info: OptionInfo, tp: Any, value: Any, optional: bool = False) -> Any:
    name = info.name
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return _check(info, rest[0], value, optional=type(None) in args)
        return value  # a resource (a path or an object): the method's to check
    if tp is bool:
        if not isinstance(value, (bool, np.bool_)):
            raise InputTypeError(f"{name} must be true or false, got {value!r}")
        return bool(value)
    if tp is int:  # the whole-number rule every integer parameter follows (ctxsel.inputs.as_int)
        return _bounded(info, as_int(name, value), optional)
    if tp is float:
        return _bounded(info, as_float(name, value), optional)
    if origin is Literal:
        if isinstance(value, bool) or value not in args:
            raise InputError(f"{name} must be one of {', '.join(map(repr, args))}, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise InputTypeError(f"{name} must be a string, got {value!r}")
        return value
    return value  # not a JSON-checkable type: the method's to check


def _bounded(info: OptionInfo, x: float, optional: bool = False) -> Any:
    low, high, below = info.minimum, info.maximum, info.below
    if (low is not None and x < low) or (high is not None and x > high) or (below is not None and x >= below):
        raise InputError(f"{info.name} must be{info._bounds()}{' or None' if optional else ''}, got {_num(x)}")
    return x


def build_options(
    cls: type[O],
    given: Mapping[str, Any],
    *,
    kind: str = "method",
    owner: str = "",
    server: bool = False,
    extra: Sequence[str] = (),
) -> O:
    """``cls`` from the options a caller ``given``, each checked by its declaration, in declaration order.

    An option ``cls`` does not declare is a :class:`SpecError` that lists those it does (``kind`` and
    ``owner`` name the method or stage); with ``server`` (a request to the service), an option with a
    ``server_flag`` is refused with the flag that sets it; an option that does not apply to the
    configuration is refused with the reason (:meth:`Options.refuse`). ``extra`` are the other keywords
    the owner takes (its resources: a policy, an adapter): not options, so not checked here, and listed
    among the valid names."""
    options = declared(cls)
    for key in given:
        if key not in options and key not in extra:
            common = declared(CommonOptions)
            valid = [n for n in options if n not in common] + [n for n in extra if n != "llm"]
            valid += [n for n in options if n in common]
            raise SpecError(unknown_option_message(kind, owner, key, valid))
    values: dict[str, Any] = {}
    if server:
        refuse_server_options(owner, cls, given)
    for key, info in options.items():
        if key in given:
            values[info.attr] = check_value(info, given[key])
    built = cls(**values)
    why = built.refuse(frozenset(given))
    if why is not None:
        raise InputError(why)
    return built


def refuse_server_options(owner: str, cls: type[Options], given: Mapping[str, Any]) -> None:
    """A request to the service may not set an option that changes the whole process (its ``server_flag``)."""
    for key, info in declared(cls).items():
        if key in given and info.server_flag:
            raise InputError(
                f"'{key}' changes the whole server, not one request of {owner!r}: the server's "
                f"{info.server_flag} sets it"
            )


def positional(cls: type[Options], base: type[Options], args: Sequence[Any]) -> dict[str, Any]:
    """Positional arguments as the options ``cls`` declares after ``base``'s, in order (``TopK(3)``)."""
    own = [n for n in declared(cls) if n not in declared(base)]
    if len(args) > len(own):
        raise InputTypeError(f"takes at most {len(own)} positional option(s) ({', '.join(own)}), got {len(args)}")
    return dict(zip(own, args))


def option_table(cls: type[Options]) -> list[dict[str, str]]:
    """One row per option (name, type and bounds, default, what it does): the docs' and ``env``'s table."""
    return [
        {"option": i.name, "value": i.describe(), "default": repr(i.default), "doc": i.doc}
        for i in declared(cls).values()
    ]


def _describe(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    words = {int: "an integer", float: "a number", bool: "true or false", str: "a string", type(None): "none"}
    return words.get(tp, getattr(tp, "__name__", str(tp)))


def _num(x: float) -> str:
    if isinstance(x, int):
        return str(x)
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(float(x))


__all__ = [
    "CommonOptions",
    "OptionInfo",
    "Options",
    "build_options",
    "check_value",
    "declared",
    "option",
    "option_table",
    "positional",
    "refuse_server_options",
]
