"""The spec grammar every method, scorer and expansion spec shares, read the same way everywhere.

    NAME                      top-k, dense, hop
    NAME@VALUE                top-k@5, top-n-tokens@5k (methods only: their main parameter)
    NAME[key=value,...]       adaptive-k[strategy=moving_avg,buffer=3], dense[backend=onnx]

A value is read as a boolean (``true``/``false``), None (``none``/``null``), a count (``5k``,
``2M``), an integer or a float, and otherwise stays text. A number is written with the ASCII
digits 0-9 (not ``５``, not ``1_0``), and an option is given once. A value that must hold ``,``, ``]``,
``=``, ``+``, spaces or a leading quote is quoted, with ``'...'`` or ``"..."``: inside the quotes
everything is literal except the quote itself, written twice (``'it''s'``). A quoted value is
always text (``'5'`` is the string "5"). So any path fits:
``ldar[policy='runs/a,b]/policy']``, ``top-k@'x'``. An unterminated quote is an error that says so.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import re
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from ctxsel.errors import SpecError
from ctxsel.inputs import MAX_SPEC_CHARS

QUOTES = "'\""
_NAME = re.compile(r"[A-Za-z0-9_\-]+")


def split_top(text: str, sep: str, where: str) -> list[str]:
    """``text`` split at ``sep`` outside brackets and quotes (the pieces unstripped)."""
    out: list[str] = []
    cur: list[str] = []
    depth, quote, i = 0, "", 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == quote and text[i + 1 : i + 2] == quote:  # a doubled quote is one literal quote
                cur.append(ch + ch)
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in QUOTES and _value_starts(cur):
            quote = ch
        elif ch == sep and depth == 0:
            out.append("".join(cur))
            cur = []
            i += 1
            continue
        elif ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        cur.append(ch)
        i += 1
    if quote:
        raise SpecError(f"unterminated {quote} quote in {where}: close it, and double a quote inside a quoted value")
    out.append("".join(cur))
    return out


def _value_starts(cur: list[str]) -> bool:
    """Whether a quote here opens a value: at the start of a piece, or right after ``=`` or ``@``."""
    before = "".join(cur).rstrip()
    return not before or before.endswith(("=", "@", ",", "["))


def split_spec(spec: str, where: str) -> tuple[str, str | None, str | None]:
    """``NAME``, ``NAME@VALUE`` or ``NAME[body]`` -> (name, value or None, body or None)."""
    check_spec_length(spec, where)
    s = spec.strip()
    m = _NAME.match(s)
    rest = s[m.end() :].strip() if m else ""
    if m is None:
        raise _bad(spec, where, "it must start with a name (letters, digits, '-' or '_')")
    if not rest:
        return m.group(0), None, None
    if rest.startswith("@"):
        value = rest[1:]
        if not value.strip():
            raise _bad(spec, where, "nothing after @")
        if value.strip()[0] not in QUOTES and any(c in value for c in "[]"):
            raise _bad(spec, where, "quote a value that holds [ or ], e.g. NAME@'a[1]'")
        split_top(value, "\0", f"{where} {spec!r}")  # checks the quotes
        return m.group(0), value, None
    if rest.startswith("["):
        parts = split_top(rest[1:], "]", f"{where} {spec!r}")
        if len(parts) != 2 or parts[1].strip() or len(split_top(parts[0], "[", where)) > 1:
            raise _bad(spec, where, "quote a value that holds [ or ]")
        return m.group(0), None, parts[0]
    raise _bad(spec, where)


def check_spec_length(spec: object, where: str) -> None:
    """A spec (method, stage, expansion, rerank, scorer) has at most :data:`ctxsel.inputs.MAX_SPEC_CHARS`
    characters, on every surface: a longer one is a mistake (a document pasted in its place)."""
    if isinstance(spec, str) and len(spec) > MAX_SPEC_CHARS:
        raise SpecError(f"{where} is too long: {len(spec):,} characters; a spec may have at most {MAX_SPEC_CHARS:,}")


def _bad(spec: str, where: str, why: str = "") -> SpecError:
    unbalanced = " (unbalanced brackets)" if spec.count("[") != spec.count("]") else ""
    return SpecError(
        f"bad {where} {spec!r}{unbalanced}: use NAME, NAME@VALUE or NAME[key=value,...]" + (f"; {why}" if why else "")
    )


def parse_options(kv: str | None, where: str) -> dict[str, Any]:
    """``"a=1,b='x,y'"`` -> ``{"a": 1, "b": "x,y"}``; ``where`` names the spec in the error for a
    part that is not ``key=value``. Method, scorer and expansion specs share it."""
    options: dict[str, Any] = {}
    for part in split_top(kv or "", ",", where):
        if not part.strip():
            continue
        key, eq, value = part.partition("=")
        if not eq or not key.strip() or key.strip()[:1] in QUOTES:
            raise SpecError(f"bad option {part.strip()!r} in {where}: expected key=value")
        if key.strip() in options:
            raise SpecError(f"option {key.strip()!r} is given twice in {where}: give each option once")
        options[key.strip()] = spec_value(value)
    return options


def spec_value(value: str) -> Any:
    """One option's value: quoted text as written, else a boolean, None, a count, a number or text."""
    v = value.strip()
    if v and v[0] in QUOTES:
        q = v[0]
        if len(v) < 2 or v[-1] != q:
            raise SpecError(f"value {value!r}: a quoted value must end with its quote ({q})")
        return v[1:-1].replace(q + q, q)
    low = v.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([kKmM])", v)
    if m:  # exact: 1.5k is 1500; 0.0004k is 0.4, which an integer option refuses (never 0)
        count = Fraction(m.group(1)) * (1000 if m.group(2) in "kK" else 1_000_000)
        return int(count) if count.denominator == 1 else float(count)
    for cast in (int, float):
        try:
            number = cast(v)
        except ValueError:
            continue
        if not v.isascii() or "_" in v:  # Python's int() reads "５" as 5 and "1_0" as 10
            raise _not_ascii_number(v)
        return number
    if re.fullmatch(r"\d+(?:\.\d+)?[kKmM]", v):  # "５k": a count in other digits
        raise _not_ascii_number(v)
    return v


def _not_ascii_number(v: str) -> SpecError:
    return SpecError(
        f"value {v!r}: write a number with the ASCII digits 0-9 and no '_' separators (e.g. 10), "
        "or quote it to mean text"
    )


def quote_value(value: str) -> str:
    """``value`` as it must be written in a spec: unchanged when it reads back as the same text,
    else single-quoted (a path with ``,`` or ``]``, a value that would read as a number)."""
    if value and not any(c in value for c in ",[]=+@'\" ") and spec_value(value) == value:
        return value
    return "'" + value.replace("'", "''") + "'"


@functools.cache  # a server asks on every request; signatures do not change
def option_names(cls: type) -> tuple[str, ...]:
    """The keyword options a class accepts: its own and, through ``**kw``, its bases'."""
    names: list[str] = []
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = list(inspect.signature(init).parameters.values())[1:]
        names += [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in names]
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return tuple(names)


def unknown_option_message(kind: str, name: str, option: str, valid: Sequence[str]) -> str:
    """What a user reads for ``adaptive-k[foo=1]`` or ``bm25[foo=1]``: the options it takes, and the closest."""
    close = difflib.get_close_matches(option, valid, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    takes = f"its options are: {', '.join(valid)}" if valid else "it takes none"
    return f"bad options for {kind} {name!r}: no option {option!r}{hint}; {takes}"
