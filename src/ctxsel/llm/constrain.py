"""Constrained replies: one reply format, a JSON schema, enforced where the backend can and parsed strictly.

Every LLM reply ctxsel reads has a format (Context-Picker's ids, SAGE's keys
and YES/NO verdicts, Self-Route's answerability, the judge's labels...). A
:class:`ReplyFormat` is that format as a name and a JSON schema::

    fmt = yes_no_format("sufficient")
    reply = client.complete(prompt, max_tokens=16, reply_format=fmt)
    if reply.constrained:
        verdict = fmt.parse(reply.text)   # {"verdict": "YES"} -> "YES", or ReplyFormatError

A client that can enforce the schema does: :class:`LocalLlamaClient` turns it
into a llama.cpp grammar (:func:`llama_grammar`), :class:`OpenAICompatClient`
sends it as ``response_format`` (``{"type": "json_schema", ...}``, which vLLM,
llama.cpp's server and hosted APIs accept) and resends without it, once and
for the rest of the client's life, when a server refuses it. The
:class:`~ctxsel.llm.base.Completion` says whether the reply was produced
under the constraint (``constrained``); a client that cannot enforce it
(a test fake, the transformers client) reports False and the caller's own
strict parser decides, as before.

:meth:`ReplyFormat.parse` is strict whatever produced the reply: exactly one
JSON value (no prose, fences or text around it, not truncated, no repeated
keys, no NaN), valid against the schema, then turned into the caller's value
by the format's ``convert``. Grammars cannot express everything a schema
says (llama.cpp's converter ignores ``uniqueItems``), so the parser is the
last word: a grammar guarantees the shape, the parser the rest.

Schemas use a portable subset: an object at the root (OpenAI's strict mode
requires it), ``type``, ``properties`` / ``required`` /
``additionalProperties: false``, ``enum`` / ``const``, ``items`` /
``prefixItems``, ``minItems`` / ``maxItems`` / ``uniqueItems``,
``minLength`` / ``maxLength``. Hosted APIs in strict mode reject some of
these (e.g. ``maxLength``); the client then falls back as for any refusal.

This module needs the standard library only; :func:`llama_grammar` imports
llama-cpp-python when called.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any

from ctxsel.errors import DuplicateKey, InputError, InputTypeError, MissingExtraError, ReplyFormatError, install_hint

#: Longest reply :meth:`ReplyFormat.parse` reads (characters), unless the format says otherwise.
DEFAULT_MAX_CHARS = 20_000

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # OpenAI's rule for json_schema names
_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise DuplicateKey(k)
        out[k] = v
    return out


def _no_constant(name: str) -> Any:
    raise InputError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=_no_constant)


def _same(a: Any, b: Any) -> bool:
    """JSON equality: 1 and true differ, 1 and 1.0 do not."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _show(v: Any, limit: int = 40) -> str:
    s = json.dumps(v, ensure_ascii=False)
    return s if len(s) <= limit else s[: limit - 3] + "..."


def validate(value: Any, schema: Mapping[str, Any], path: str = "") -> None:
    """Raise :class:`ReplyFormatError` unless ``value`` is valid against ``schema`` (the subset above)."""
    where = path or "the reply"
    t = schema.get("type")
    if t is not None:
        types = [t] if isinstance(t, str) else list(t)
        if not any(_TYPES[x](value) for x in types):
            raise ReplyFormatError(f"{where} must be {' or '.join(types)}, got {_show(value)}")
    if "const" in schema and not _same(value, schema["const"]):
        raise ReplyFormatError(f"{where} must be {_show(schema['const'])}, got {_show(value)}")
    if "enum" in schema and not any(_same(value, e) for e in schema["enum"]):
        allowed = schema["enum"]
        shown = ", ".join(_show(e) for e in allowed[:12]) + (", ..." if len(allowed) > 12 else "")
        raise ReplyFormatError(f"{where} is {_show(value)}, not one of {shown}")
    if "anyOf" in schema:
        errors = []
        for sub in schema["anyOf"]:
            try:
                validate(value, sub, path)
                break
            except ReplyFormatError as e:
                errors.append(str(e))
        else:
            raise ReplyFormatError(" or ".join(errors))
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            raise ReplyFormatError(
                f"{where} is shorter than {schema['minLength']} characters" if value else f"{where} is empty"
            )
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            raise ReplyFormatError(f"{where} has {len(value):,} characters, over the {schema['maxLength']:,} allowed")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise ReplyFormatError(f"{where} is {value}, below the minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            raise ReplyFormatError(f"{where} is {value}, above the maximum {schema['maximum']}")
    if isinstance(value, list):
        _validate_array(value, schema, path)
    if isinstance(value, dict):
        _validate_object(value, schema, path)


def _validate_array(value: list[Any], schema: Mapping[str, Any], path: str) -> None:
    where = path or "the reply"
    n = len(value)
    if n < schema.get("minItems", 0):
        raise ReplyFormatError(
            f"{where} is empty"
            if n == 0
            else f"{where} has {n:,} items, fewer than the {schema['minItems']:,} required"
        )
    if "maxItems" in schema and n > schema["maxItems"]:
        raise ReplyFormatError(f"{where} has {n:,} items, over the {schema['maxItems']:,} allowed")
    prefix = schema.get("prefixItems") or []
    for i, (item, sub) in enumerate(zip(value, prefix)):
        validate(item, sub, f"{path}[{i}]")
    items = schema.get("items")
    if len(value) > len(prefix):
        if items is False:
            raise ReplyFormatError(f"{where} has {n:,} items, over the {len(prefix):,} allowed")
        if isinstance(items, Mapping):
            for i in range(len(prefix), n):
                validate(value[i], items, f"{path}[{i}]")
    if prefix and items is False and n < len(prefix):
        raise ReplyFormatError(f"{where} has {n:,} items, {len(prefix):,} required")
    if schema.get("uniqueItems"):
        for i in range(n):
            for j in range(i):
                if _same(value[i], value[j]):
                    raise ReplyFormatError(f"{path}[{i}] repeats {_show(value[i])}: each item may appear once")


def _validate_object(value: dict[str, Any], schema: Mapping[str, Any], path: str) -> None:
    where = path or "the reply"
    props: Mapping[str, Any] = schema.get("properties", {})
    missing = [k for k in schema.get("required", []) if k not in value]
    if missing:
        raise ReplyFormatError(f"{where} lacks {', '.join(repr(k) for k in missing)}")
    extra = schema.get("additionalProperties", True)
    for k, v in value.items():
        sub = f"{path}.{k}" if path else k
        if k in props:
            validate(v, props[k], sub)
        elif extra is False:
            raise ReplyFormatError(f"{where} has an unknown key {k!r} (allowed: {', '.join(props)})")
        elif isinstance(extra, Mapping):
            validate(v, extra, sub)


def parse_json_reply(text: Any, max_chars: int = DEFAULT_MAX_CHARS) -> Any:
    """Exactly one JSON value in ``text`` (surrounding whitespace allowed), or :class:`ReplyFormatError`."""
    if not isinstance(text, str):
        raise ReplyFormatError(f"the reply is not text ({type(text).__name__})")
    if len(text) > max_chars:
        raise ReplyFormatError(f"the reply is {len(text):,} characters long, over the {max_chars:,} allowed")
    body = text.strip()
    if not body:
        raise ReplyFormatError("the reply is empty: expected one JSON object")
    try:
        value, end = _DECODER.raw_decode(body)
    except DuplicateKey as e:
        raise ReplyFormatError(f"the key {str(e)!r} appears twice in the JSON object") from None
    except json.JSONDecodeError as e:
        if e.pos >= len(body) - 1 or "Unterminated" in e.msg:
            what = "ends before its JSON is complete (truncated, or prose instead of the format)"
        else:
            what = f"is not valid JSON ({e.msg} at character {e.pos})"
        raise ReplyFormatError(f"the reply {what}") from None
    except ValueError as e:  # NaN / Infinity
        raise ReplyFormatError(f"the reply is not valid JSON ({e})") from None
    if body[end:].strip():
        raise ReplyFormatError(f"text after the JSON value: {body[end:].strip()[:40]!r}")
    return value


class ReplyFormat:
    """A reply format: a ``name``, a JSON ``schema`` and a strict :meth:`parse`.

    ``convert`` turns the validated JSON value into what the caller wants
    (``{"verdict": "YES"}`` -> ``True``) and may raise
    :class:`ReplyFormatError` for rules a schema cannot state. ``key`` (the
    name and a hash of the schema) identifies the format in cache keys and
    grammar caches, and formats with the same key compare equal. Formats are
    immutable by convention: build a new one rather than editing ``schema``.

    ``words`` makes a choice among bare words (``{"YES": True, "NO": False}``):
    llama.cpp's grammar is then the words themselves, the reply a prompt such
    as "ANSWER (YES or NO):" asks for, while a server still gets the JSON
    schema; :meth:`parse` takes exactly one of the words or a JSON reply.
    Why: forced into ``{"verdict": ...}``, the bundled Qwen 1.5B answered YES
    to every question in a check where its free and bare-word answers agreed
    with each other (benchmarks/results/verdict_formats.md).
    """

    __slots__ = ("convert", "key", "max_chars", "name", "schema", "words")

    def __init__(
        self,
        name: str,
        schema: Mapping[str, Any],
        convert: Callable[[Any], Any] | None = None,
        *,
        max_chars: int = DEFAULT_MAX_CHARS,
        words: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise InputError(f"a reply format's name must be 1-64 letters, digits, '_' or '-', got {name!r}")
        if not isinstance(schema, Mapping):
            raise InputTypeError(f"a reply format's schema must be a dict (a JSON schema), got {type(schema).__name__}")
        try:
            canonical = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise InputError(f"the schema of reply format {name!r} is not JSON: {e}") from e
        self.name = name
        # a private copy, in the order written (the grammar writes properties in this order)
        self.schema: dict[str, Any] = json.loads(json.dumps(schema, allow_nan=False))
        self.convert = convert
        self.max_chars = int(max_chars)
        self.words = dict(words) if words else None
        if self.words:
            canonical += "|words:" + ",".join(self.words)
        self.key = f"{name}:{hashlib.sha256(canonical.encode('ascii')).hexdigest()[:16]}"

    def __repr__(self) -> str:
        return f"ReplyFormat({self.key!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ReplyFormat) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    def validate(self, value: Any) -> None:
        """:class:`ReplyFormatError` unless ``value`` (already decoded JSON) fits the schema."""
        validate(value, self.schema)

    def parse(self, text: Any) -> Any:
        """The reply's value: one of ``words``, or one JSON value valid against the schema, through ``convert``."""
        if self.words and isinstance(text, str) and text.strip() in self.words:
            return self.words[text.strip()]
        value = parse_json_reply(text, self.max_chars)
        self.validate(value)
        return self.convert(value) if self.convert is not None else value

    def response_format(self) -> dict[str, Any]:
        """The OpenAI ``response_format`` that asks a server to enforce this format."""
        return {"type": "json_schema", "json_schema": {"name": self.name, "schema": self.schema, "strict": True}}


# ---------------------------------------------------------------------------
# builders of the formats shared by several methods (method-specific ones live beside their method)
# ---------------------------------------------------------------------------


def _object(props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def _field(key: str) -> Callable[[Any], Any]:
    return lambda obj: obj[key]


def yes_no_format(name: str = "yes-no", key: str = "verdict") -> ReplyFormat:
    """``YES`` or ``NO`` (a server: ``{"verdict": "YES" | "NO"}``); parses to True (YES) or False (NO)."""
    return ReplyFormat(
        name,
        _object({key: {"type": "string", "enum": ["YES", "NO"]}}),
        lambda obj: obj[key] == "YES",
        max_chars=200,
        words={"YES": True, "NO": False},
    )


def string_list_format(name: str, key: str, *, max_items: int, max_chars: int = 40, min_items: int = 1) -> ReplyFormat:
    """``{key: ["...", ...]}``: ``min_items``..``max_items`` non-empty strings of at most
    ``max_chars``; parses to the list."""
    if max_items < max(min_items, 1):
        raise InputError(f"max_items must be >= {max(min_items, 1)}, got {max_items}")
    item = {"type": "string", "minLength": 1, "maxLength": int(max_chars)}
    return ReplyFormat(
        name,
        _object({key: {"type": "array", "items": item, "minItems": int(min_items), "maxItems": int(max_items)}}),
        _field(key),
    )


def option_vote_format(n_options: int, *, max_reason_chars: int = 100, name: str = "option-vote") -> ReplyFormat:
    """A multiple-choice vote, the letter first: ``{"option": "B", "reason": "..."}``.

    Parses to ``"B. <reason>"``, the reply a free-text voter writes (the
    option at the head), so :func:`~ctxsel.datasets.multiple_choice.parse_choice`
    and everything downstream read both alike.
    """
    from string import ascii_uppercase

    if not 1 <= n_options <= 26:
        raise InputError(f"a vote needs 1 to 26 options, got {n_options}")
    letters = list(ascii_uppercase[:n_options])
    schema = _object(
        {
            "option": {"type": "string", "enum": letters},
            "reason": {"type": "string", "maxLength": int(max_reason_chars)},
        }
    )
    return ReplyFormat(name, schema, lambda obj: f"{obj['option']}. {obj['reason']}".strip())


def answer_format(name: str = "answer", *, max_chars: int = 128) -> ReplyFormat:
    """``{"answer": "..."}``: a non-empty answer of at most ``max_chars``; parses to the answer (stripped)."""
    schema = _object({"answer": {"type": "string", "minLength": 1, "maxLength": int(max_chars)}})

    def convert(obj: dict[str, Any]) -> str:
        answer = str(obj["answer"]).strip()
        if not answer:
            raise ReplyFormatError("answer is blank")
        return answer

    return ReplyFormat(name, schema, convert)


# ---------------------------------------------------------------------------
# llama.cpp grammars
# ---------------------------------------------------------------------------

# llama.cpp's JSON-schema converter lets a string hold raw control characters ([^"\\]), which JSON
# forbids and which would run into a newline stop sequence: exclude them.
_CHAR_RULE = re.compile(r'^char ::= \[\^"\\\\\]', re.MULTILINE)
_STRICT_CHAR = r'char ::= [^"\\\x00-\x1F\x7F]'
_ROOT_RULE = re.compile(r"^root ::= (.*)$", re.MULTILINE)

_GRAMMARS: dict[str, Any] = {}
_GBNF: dict[str, str] = {}
_GRAMMAR_LOCK = threading.Lock()


#: The longest ``maxLength`` a llama.cpp grammar enforces. The converter writes ``maxLength`` N as N nested
#: optional rules, and the sampler walks them at every token, so a long bound makes every token slow: at 1,536
#: (Self-Route's answer on HoloBench-style data) a reply does not end in any useful time (docs/archive/results-log.md).
#: A longer string is bounded in the grammar only by
#: the call's ``max_tokens``, and its length is still checked when the reply is parsed.
GRAMMAR_MAX_LENGTH = 256


def _grammar_schema(schema: Any) -> Any:
    """``schema`` without the ``maxLength`` bounds over :data:`GRAMMAR_MAX_LENGTH` (see there)."""
    if isinstance(schema, dict):
        return {
            k: _grammar_schema(v)
            for k, v in schema.items()
            if not (k == "maxLength" and isinstance(v, int) and v > GRAMMAR_MAX_LENGTH)
        }
    if isinstance(schema, list):
        return [_grammar_schema(v) for v in schema]
    return schema


def gbnf(fmt: ReplyFormat) -> str:
    """The GBNF grammar llama.cpp enforces for ``fmt`` (cached by ``fmt.key``).

    Made by llama-cpp-python's own JSON-schema converter, which supports
    ``enum``, ``const``, ``prefixItems``, ``minItems`` / ``maxItems`` and
    ``minLength`` / ``maxLength`` (up to :data:`GRAMMAR_MAX_LENGTH`) but not
    ``uniqueItems``; whitespace between tokens is at most one space, one
    space may precede the value, and strings hold no raw control characters.
    """
    with _GRAMMAR_LOCK:
        cached = _GBNF.get(fmt.key)
    if cached is not None:
        return cached
    if fmt.words:  # a choice of bare words, one space allowed before it
        return 'root ::= " "? (' + " | ".join(json.dumps(w) for w in fmt.words) + ")"
    try:
        from llama_cpp.llama_grammar import json_schema_to_gbnf
    except ImportError:
        raise MissingExtraError(f"llama.cpp grammars need llama-cpp-python: {install_hint('local')}") from None
    try:
        text = json_schema_to_gbnf(json.dumps(_grammar_schema(fmt.schema), ensure_ascii=False))
    except Exception as e:  # the converter asserts on what it does not know
        raise InputError(f"llama.cpp cannot turn reply format {fmt.name!r} into a grammar: {e}") from e
    text, n = _CHAR_RULE.subn(lambda m: _STRICT_CHAR, text)
    if "char ::=" in text and n != 1:  # pragma: no cover - a converter change; better loud than lax
        raise RuntimeError("unexpected llama.cpp grammar for JSON strings: update ctxsel.llm.constrain")
    # one optional space before the value: a prompt ends at "Reply:" and models like to write " {"
    text, n = _ROOT_RULE.subn(lambda m: f'root ::= " "? ({m.group(1)})', text)
    if n != 1:  # pragma: no cover
        raise RuntimeError("llama.cpp's grammar has no root rule: update ctxsel.llm.constrain")
    with _GRAMMAR_LOCK:
        _GBNF[fmt.key] = text
    return text


def llama_grammar(fmt: ReplyFormat) -> Any:
    """A ``llama_cpp.LlamaGrammar`` that makes llama.cpp write only replies of ``fmt`` (cached by ``fmt.key``)."""
    with _GRAMMAR_LOCK:
        cached = _GRAMMARS.get(fmt.key)
    if cached is not None:
        return cached
    text = gbnf(fmt)
    from llama_cpp import LlamaGrammar  # type: ignore[attr-defined]  # exported at run time, not in its stubs

    grammar = LlamaGrammar.from_string(text, verbose=False)
    with _GRAMMAR_LOCK:
        return _GRAMMARS.setdefault(fmt.key, grammar)


__all__ = [
    "DEFAULT_MAX_CHARS",
    "GRAMMAR_MAX_LENGTH",
    "ReplyFormat",
    "answer_format",
    "gbnf",
    "llama_grammar",
    "option_vote_format",
    "parse_json_reply",
    "string_list_format",
    "validate",
    "yes_no_format",
]
