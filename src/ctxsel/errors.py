"""One exception tree for the problems a user can act on.

Everything ctxsel raises because of its input, its configuration or its environment is a
:class:`CtxselError`; the CLI prints those as one line and exits 2, the service answers them
422 (or 502 for an LLM backend, 500 for a server missing an extra). Anything else that escapes
is a bug: exit 1 with a hint, HTTP 500 with the request id.

The subclasses also derive from the built-in exception a caller would have caught before the
tree existed (``InputError`` is a ``ValueError``, ``MissingExtraError`` an ``ImportError``),
so ``except ValueError`` around ``ctxsel.select`` keeps working.

    CtxselError
    ├── InputError (ValueError)          a question, chunks, scores or an option the method cannot use
    │   ├── InputTypeError (TypeError)   ... of the wrong type (one str where a list of chunks goes)
    │   └── SpecError                    a method, scorer or expansion spec that does not parse
    ├── DatasetError (ValueError)        a dataset file or record that cannot be read
    ├── ModelError (RuntimeError)        a model file that is missing, corrupt or does not load
    ├── MissingExtraError (ImportError)  an optional dependency that is not installed
    └── LLMError (RuntimeError)          an LLM backend failed (ctxsel.llm.base; its own family)
"""

from __future__ import annotations


class CtxselError(Exception):
    """A problem the user can act on; the message says what to do."""


class InputError(CtxselError, ValueError):
    """Input the call cannot use: the message names the input and the rule it broke."""


class InputTypeError(InputError, TypeError):
    """Input of the wrong type (a str where a sequence of chunks goes, a name where a number goes)."""


class SpecError(InputError):
    """A method, scorer or expansion spec that does not parse or names an unknown option."""


class DatasetError(CtxselError, ValueError):
    """A dataset, or one of its records, that cannot be read."""


class ModelError(CtxselError, RuntimeError):
    """A model (embedding model, GGUF reader, LDAR policy) that is missing or does not load."""


class MissingExtraError(CtxselError, ImportError):
    """An optional dependency that is not installed; the message names the pip extra."""


__all__ = [
    "CtxselError",
    "DatasetError",
    "InputError",
    "InputTypeError",
    "MissingExtraError",
    "ModelError",
    "SpecError",
]
