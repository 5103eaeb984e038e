"""The rules every surface (Python, CLI, HTTP, framework adapters) applies to what a user hands in.

One place, so ``ctxsel.select``, the selectors, the command line and the
service reject the same inputs with the same words: a message that names
the input, the rule it broke and what to do instead.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from ctxsel.errors import InputError, InputTypeError

_SURROGATE = re.compile("[\ud800-\udfff]")


def check_text(text: str, what: str) -> None:
    """Reject a lone surrogate (U+D800-U+DFFF): it is not valid Unicode, cannot be encoded as
    UTF-8, and tokenizers fail on it deep inside. It comes from decoding bytes with
    ``errors="surrogateescape"`` or from a JSON ``"\\ud800"`` escape."""
    if text.isascii():  # the common case, checked at C speed
        return
    m = _SURROGATE.search(text)
    if m is not None:
        raise InputError(
            f"{what} contains a lone surrogate U+{ord(m.group()):04X} at character {m.start()}, which is not "
            "valid Unicode: decode the source bytes with errors='replace' (or remove the character)"
        )


def check_question(question: Any) -> str:
    """The question as a non-empty string; an empty or whitespace-only one would select arbitrary chunks."""
    if not isinstance(question, str):
        raise InputTypeError(f"question must be a string, got {type(question).__name__}: pass the question's text")
    if not question.strip():
        raise InputError(
            "question is empty (or only whitespace): there is nothing to rank the chunks against; "
            "pass the question's text"
        )
    check_text(question, "question")
    return question


def check_chunk_sequence(items: Any, what: str = "chunks") -> None:
    """A sequence of chunks must not be one str or bytes: iterating it would make one chunk per character."""
    if isinstance(items, (str, bytes, bytearray)):
        kind = type(items).__name__
        raise InputTypeError(
            f"{what} must be a sequence of chunk texts or Chunks, got a single {kind} of {len(items):,} "
            f"{'characters' if kind == 'str' else 'bytes'}: pass [text] for one chunk, or split a document with "
            "ctxsel.chunking.chunk_text(text)"
        )
    if items is None or not hasattr(items, "__iter__"):
        raise InputTypeError(f"{what} must be a sequence of chunk texts or Chunks, got {type(items).__name__}")


def as_int(name: str, value: object) -> int:
    """An integer parameter; 1.5 or "3" is an error, not a silent truncation (1e9, a whole float, is fine)."""
    if isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InputError(f"{name} must be an integer, got {value!r}")
    return int(value)


def as_float(name: str, value: object) -> float:
    """A finite number parameter: "abc", None or NaN is an error that names the parameter."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InputError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise InputError(f"{name} must be finite, got {value!r}")
    return float(value)
