"""Selector registry: one name per method, one spec string per configuration.

A method spec is ``name``, ``name@value`` (the method's main parameter) or
``name[key=value,...]``::

    top-k@5            TopK(k=5)
    top-n-tokens@5k    TopNTokens(n_tokens=5000)
    autocut@2          Autocut(jumps=2)
    adaptive-k[strategy=moving_avg,window=5]

Methods register by import path, so listing them imports nothing heavy.
"""

from __future__ import annotations

import difflib
import importlib
import re
import sys
from typing import Any

from ctxsel.errors import InputError, InputTypeError, MissingLLMError, SpecError
from ctxsel.options import build_options, declared
from ctxsel.selectors.base import _REGISTRY, MethodInfo, ScoreCutSelector, Selector, name_method
from ctxsel.specs import option_names, parse_options, spec_value, split_spec, split_top
from ctxsel.specs import unknown_option_message as _unknown_option

_NAME = re.compile(r"^[A-Za-z0-9_\-]+$")


def register(name: str, target: str | type[Selector], main_param: str | None = None, summary: str = "") -> None:
    """Add a method: one line, from inside the package or outside it.

    ``target`` is ``"module:Class"`` (the built-ins use this, so listing methods
    imports nothing heavy) or a :class:`Selector` subclass. ``main_param`` is
    the option ``NAME@VALUE`` sets. A registered method works everywhere a name
    does: ``ctxsel.select``, ``ctxsel select/eval --method(s)``, the service.
    ``name`` is the method's one name: the class gets it as its ``name`` (now, or when
    its module is imported), so the class does not repeat it.
    """
    if not _NAME.match(name):
        raise InputError(f"method name {name!r} must be letters, digits, '-' or '_'")
    if not isinstance(target, str) and not (isinstance(target, type) and issubclass(target, Selector)):
        raise InputTypeError(
            f"register({name!r}, ...): target must be 'module:Class' or a Selector subclass, got {target!r}"
        )
    cls = target if not isinstance(target, str) else _imported(target)
    if cls is not None:
        name_method(cls, name)
    _REGISTRY[name] = MethodInfo(name, target, main_param, summary)


def _imported(target: str) -> type[Selector] | None:
    """The class ``"module:Class"`` names when its module is already imported (nothing is imported)."""
    module_name, _, cls_name = target.partition(":")
    cls = getattr(sys.modules.get(module_name), cls_name, None)
    return cls if isinstance(cls, type) and issubclass(cls, Selector) else None


register(
    "adaptive-k",
    "ctxsel.selectors.adaptive_k:AdaptiveK",
    "strategy",
    "cut at the largest gap in sorted similarities, plus a buffer (Taguchi et al. 2025)",
)
register(
    "autocut",
    "ctxsel.selectors.autocut:Autocut",
    "jumps",
    "Weaviate's autocut: cut before the N-th jump of the normalised score curve",
)
register("top-k", "ctxsel.selectors.fixed:TopK", "k", "the k best-scoring chunks")
register(
    "top-p", "ctxsel.selectors.top_p:TopP", "p", "the best chunks within p of the softmax mass (Haystack's TopPSampler)"
)
register("knee", "ctxsel.selectors.knee:Knee", "sensitivity", "cut at the knee of the score curve (Kneedle, kneed)")
register("stddev", "ctxsel.selectors.stddev:Stddev", "z", "every chunk scoring at least mean + z standard deviations")
register(
    "top-n-tokens",
    "ctxsel.selectors.fixed:TopNTokens",
    "n_tokens",
    "best-scoring chunks up to a token budget (the paper's fixed-n)",
)
register("full", "ctxsel.selectors.fixed:FullContext", None, "the whole context")
register(
    "self-route",
    "ctxsel.selectors.self_route:SelfRoute",
    "n_tokens",
    "the LLM reads the top 5k tokens; if it says unanswerable, the full context (Li et al. 2024)",
)
register(
    "ldar",
    "ctxsel.selectors.ldar.selector:LDAR",
    "policy",
    "a trained policy reads the similarity distribution and picks a quantile band (LDAR); "
    "the bundled policy, or policy=PATH",
)
register(
    "sage",
    "ctxsel.selectors.sage.selector:SAGE",
    "iter_max",
    "an LLM explores sentences by keywords and neighbours until the evidence suffices (SAGE); no index",
)
register(
    "context-picker",
    "ctxsel.selectors.context_picker.picker:ContextPicker",
    "n_tokens",
    "an LLM names a minimal sufficient set of candidate chunk ids (Context-Picker); adapter=PATH for a trained one",
)
register(
    "closed-book",
    "ctxsel.selectors.reference:ClosedBook",
    None,
    "no context: the reader answers from the question alone (a reference row: the floor)",
)
register(
    "oracle",
    "ctxsel.selectors.reference:Oracle",
    None,
    "exactly the example's gold chunks, in reading order (a reference row: needs gold ids)",
)
register(
    "threshold", "ctxsel.selectors.fixed:ScoreThreshold", "threshold", "every chunk scoring at least the threshold"
)


def available_methods() -> dict[str, MethodInfo]:
    return dict(_REGISTRY)


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``"top-k@5"`` -> ``("top-k", {"k": 5})`` (the grammar, quoting included: :mod:`ctxsel.specs`)."""
    if not isinstance(spec, str):
        raise InputTypeError(
            f"method must be a spec string such as 'top-k@5' (or a Selector), got {type(spec).__name__}"
        )
    try:
        name, main, body = split_spec(spec, "method spec")
    except SpecError as e:
        raise SpecError(f"{e} (e.g. top-k@5 or adaptive-k[buffer=3])") from None
    info = _REGISTRY.get(name)
    if info is None:
        close = difflib.get_close_matches(name, list(_REGISTRY), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise SpecError(f"unknown method {name!r}{hint}; available: {', '.join(sorted(_REGISTRY))}")
    if main is not None:
        if info.main_param is None:
            raise SpecError(f"method {name!r} takes no @value")
        return name, {info.main_param: spec_value(main)}
    return name, parse_options(body, repr(spec))


def with_option(spec: str, key: str, value: int) -> str:
    """``spec`` with ``key=value`` set, or as it is when it sets ``key`` itself (the spec wins over a
    command-line alias): ``self-route`` -> ``self-route[fallback_max_tokens=30000]``,
    ``self-route@3k`` -> ``self-route[n_tokens=3k,fallback_max_tokens=30000]``."""
    name, options = parse_spec(spec)
    if key in options:
        return spec
    _, main, body = split_spec(spec, "method spec")
    parts = [f"{_REGISTRY[name].main_param}={main.strip()}"] if main is not None else []
    parts += [body.strip()] if body and body.strip() else []
    return f"{name}[{','.join([*parts, f'{key}={value}'])}]"


def split_specs(specs: str) -> list[str]:
    """Split a comma-separated method list, keeping commas inside [...] and inside quotes."""
    return [s.strip() for s in split_top(specs, ",", f"method list {specs!r}") if s.strip()]


def get_selector_class(name: str) -> type[Selector]:
    """The class behind a registered method name (imports its module)."""
    target = _REGISTRY[name].target
    if not isinstance(target, str):
        return target
    module_name, cls_name = target.split(":")
    cls: type[Selector] = getattr(importlib.import_module(module_name), cls_name)
    if cls.__dict__.get("name") != name:  # a class re-exported under another path than its own
        name_method(cls, name)
    return cls


def get_selector(
    method: str | Selector, *, llm: Any = None, resources: dict[str, Any] | None = None, **options: Any
) -> Selector:
    """A Selector from a spec string (plus keyword options), or as given.

    ``llm`` (an LLM client) goes to methods that call one (``needs_llm``)
    and is ignored by the rest, so callers need not know which is which.
    ``resources`` (e.g. ``{"policy": PATH}``, a server's LDAR policy) go the same
    way: to the methods that take an option of that name, unless the spec sets it.
    An option the method does not take is an error that lists the ones it does.
    """
    if isinstance(method, Selector):
        if options:
            raise InputError("options cannot be combined with a Selector instance")
        return method
    name, spec_options = parse_spec(method)
    cls = get_selector_class(name)
    if cls.needs_llm and llm is not None:
        options["llm"] = llm
    takes = set(accepted_options(cls)) if resources else set()
    for key, value in (resources or {}).items():
        if key in takes and key not in spec_options and key not in options and value is not None:
            options[key] = value
    try:
        return cls(**{**spec_options, **options})
    except (MissingLLMError, SpecError):
        raise
    except InputError as e:  # a value its declaration refuses
        raise _bad_options(name, e) from None
    except TypeError as e:
        unknown = re.search(r"unexpected keyword argument '([^']+)'", str(e))
        if unknown is None:
            raise SpecError(f"bad options for method {name!r}: {e}") from e
        raise SpecError(unknown_option_message(name, cls, unknown.group(1))) from None
    except ValueError as e:
        raise SpecError(f"bad options for method {name!r}: {e}") from e


def check_options(name: str, given: dict[str, Any], *, server: bool = False) -> None:
    """The verdict :func:`get_selector` gives on ``given`` options of method ``name``, without building
    it (nor needing its LLM); ``server``: an option that changes the whole process is refused too."""
    cls = get_selector_class(name)
    try:
        build_options(cls.Options, given, owner=name, server=server, extra=accepted_options(cls))
    except SpecError:
        raise
    except InputError as e:
        raise _bad_options(name, e) from None


def _bad_options(name: str, e: InputError) -> SpecError:
    return SpecError(f"bad options for method {name!r}: {e}")


def unknown_option_message(name: str, cls: type[Selector], option: str) -> str:
    """What a user reads for ``adaptive-k[foo=1]``: the options the method takes, and the closest."""
    return _unknown_option("method", name, option, [n for n in accepted_options(cls) if n != "llm"])


def accepted_options(cls: type[Selector]) -> tuple[str, ...]:
    """The keywords a method takes: its declared options and its resources (and, for a method that
    keeps a constructor of its own, that constructor's parameters)."""
    return tuple(dict.fromkeys([*declared(cls.Options), *cls.resources, *option_names(cls)]))


__all__ = [
    "MethodInfo",
    "ScoreCutSelector",
    "Selector",
    "accepted_options",
    "available_methods",
    "check_options",
    "get_selector",
    "get_selector_class",
    "option_names",
    "parse_spec",
    "register",
    "split_specs",
    "with_option",
]
