"""A request's ``options`` checked against the method's own signature.

A JSON body can say ``"options": {"max_tokens": "abc"}``; the selector
would store it and fail later deep in its arithmetic ("'<' not supported").
Here each option is checked, before the selector is built, against the type
its class declares (``max_tokens: int | None``), and a wrong one gets a
message that names the field, the type it needs and the value it got. An
option the method does not take is named with the ones it does.

Types this module does not understand (a callable, a client object) are
left to the selector's own checks.
"""

from __future__ import annotations

import functools
import inspect
import math
import types
import typing
from typing import Any, Literal, Union

from ctxsel.errors import InputError, SpecError
from ctxsel.inputs import NUMBER_OPTIONS


@functools.cache  # resolving type hints is slow and a server would pay it every request; read-only, do not mutate
def declared_options(cls: type) -> dict[str, Any]:
    """Keyword parameters of ``cls.__init__`` and its bases' (``**kw`` passes
    them up): name -> resolved type (``Any`` where it cannot be resolved)."""
    out: dict[str, Any] = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        try:
            hints = typing.get_type_hints(init)
        except Exception:  # an annotation naming something not importable: check nothing for it
            hints = {}
        for name, param in inspect.signature(init).parameters.items():
            if name == "self" or param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
                continue
            out.setdefault(name, hints.get(name, Any))
    return out


def _describe(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string", type(None): "null"}.get(
        tp, getattr(tp, "__name__", str(tp))
    )


def _matches(tp: Any, value: Any) -> bool | None:
    """True / False when ``tp`` is a JSON-checkable type, None when it is not."""
    if tp is Any:
        return None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return value in args and not (isinstance(value, bool) and not any(isinstance(a, bool) for a in args))
    if origin in (Union, types.UnionType):
        results = [_matches(a, value) for a in args]
        if any(r is True for r in results):
            return True
        return None if any(r is None for r in results) else False
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:  # a whole float (1e9, 5.0) is an integer, as ctxsel.inputs.as_int reads it
        if isinstance(value, float):
            return math.isfinite(value) and value.is_integer()
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    return None


@functools.cache
def check_order(cls: type) -> tuple[str, ...]:
    """Option names in the order the constructor checks them: a selector calls ``super().__init__``
    first, so a base class's options (``min_k``, ``max_tokens``) come before the method's own (``k``)."""
    names: list[str] = []
    for klass in reversed(cls.__mro__):
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        for name, param in inspect.signature(init).parameters.items():
            if name != "self" and param.kind not in (param.VAR_KEYWORD, param.VAR_POSITIONAL) and name not in names:
                names.append(name)
    return tuple(names)


def check_options(
    method: str,
    cls: type,
    options: dict[str, Any],
    prefix: str = "options.",
    *,
    spec: dict[str, Any] | None = None,
    spec_prefix: str = "",
) -> None:
    """ValueError for an option ``cls`` does not take or a value of the wrong
    JSON type, naming it as ``prefix + key`` (``options.max_tokens``). ``spec``: the
    spec's own options, which ``options`` replace (as keywords do in Python); the
    merged options are checked in the order the Python API checks them."""
    from ctxsel.selectors import unknown_option_message

    merged = {**(spec or {}), **options}
    declared = declared_options(cls)
    for key in merged:
        if key not in declared:  # the Python API's words
            raise SpecError(unknown_option_message(method, cls, key))
    order = check_order(cls)
    for key in sorted(merged, key=lambda k: order.index(k) if k in order else len(order)):
        value = merged[key]
        if key in NUMBER_OPTIONS:  # min_k, max_tokens: the Python API's check, in get_selector's words
            try:
                NUMBER_OPTIONS[key](value)
            except InputError as e:
                raise SpecError(f"bad options for method {method!r}: {e}") from None
            continue
        if _matches(declared[key], value) is False:
            refusal = _python_refusal(method, merged)
            if refusal is not None:  # the Python API refuses it too: its very words
                raise refusal
            where = prefix if key in options else spec_prefix
            raise InputError(f"{where}{key} must be {_describe(declared[key])}, got {value!r}")


def _python_refusal(method: str, options: dict[str, Any]) -> SpecError | None:
    """What ``get_selector(method, **options)`` says about these options, or None where it builds the
    selector (a type it would only trip on later, deep in its arithmetic) or fails for another reason."""
    from ctxsel.selectors import get_selector

    try:
        get_selector(method, **options)
    except SpecError as e:
        return e
    except Exception:  # an LLM method without its client, a policy file: not the options' verdict
        return None
    return None


__all__ = ["check_options", "check_order", "declared_options"]
