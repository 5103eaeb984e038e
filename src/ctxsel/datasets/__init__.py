"""Dataset loaders: a name (``hotpotqa-long``, ``example``) or a JSONL path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxsel.types import Example

BUNDLED = Path(__file__).resolve().parent.parent / "data"


def load_dataset(name_or_path: str | Path, limit: int | None = None, **options: Any) -> list[Example]:
    name = str(name_or_path)
    if name == "hotpotqa-long":
        from ctxsel.datasets.hotpotqa import load_hotpotqa_long

        return load_hotpotqa_long(options.get("hotpotqa_path"), limit=limit)
    if name == "example":
        name = str(BUNDLED / "example.jsonl")
    path = Path(name)
    if not path.is_file():
        raise FileNotFoundError(
            f"dataset {name!r} is neither a known name (hotpotqa-long, example) nor a file"
        )
    from ctxsel.datasets.jsonl import load_jsonl

    return load_jsonl(path, chunking=options.get("chunking", "paragraphs"), limit=limit)


__all__ = ["load_dataset"]
