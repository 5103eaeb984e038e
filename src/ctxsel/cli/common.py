"""Argument helpers shared by subcommands."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ctxsel.chunking import chunk_text
from ctxsel.scoring.base import Scorer
from ctxsel.types import Chunk, check_unique_ids

DEFAULT_MAX_BYTES = 20_000_000


def add_scorer_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scorer", default="dense", choices=["dense", "bm25", "keywords"], help="how chunks are scored (default: dense)")
    p.add_argument("--model", default=None, help="embedding model path or name (default: bundled all-MiniLM-L6-v2)")
    p.add_argument("--threads", type=int, default=None, help="torch threads for embedding (default: torch's choice)")


def make_scorer(args: argparse.Namespace, progress: bool = True) -> Scorer:
    from ctxsel.scoring import get_scorer

    if args.scorer == "dense":
        return get_scorer("dense", model=args.model, num_threads=args.threads, show_progress=progress)
    return get_scorer(args.scorer)


def read_text_file(path: str | Path, max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no such file: {p}")
    size = p.stat().st_size
    if size > max_bytes:
        raise ValueError(
            f"{p} is {size:,} bytes, above the {max_bytes:,}-byte limit (--max-bytes); "
            "split it, or raise --max-bytes if you mean it (embedding it will take long)"
        )
    data = p.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"{p} is not valid UTF-8 ({e.reason} at byte {e.start}); convert it, e.g. "
            f"iconv -f latin1 -t utf-8 {p.name}"
        ) from None


def load_document_chunks(path: str, chunking: str, max_bytes: int) -> list[Chunk]:
    """A text document, or a .jsonl of {"id", "text"} chunks."""
    text = read_text_file(path, max_bytes)
    if path.endswith(".jsonl"):
        chunks = []
        for i, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{i}: not valid JSON ({e.msg})") from None
            if not isinstance(obj, dict) or "text" not in obj:
                raise ValueError(f"{path}:{i}: expected an object with 'text' (and 'id')")
            chunks.append(Chunk(id=str(obj.get("id", len(chunks))), text=obj["text"], position=len(chunks)))
        check_unique_ids(chunks)
    else:
        chunks = chunk_text(text, chunking)  # type: ignore[arg-type]
    if not chunks:
        raise ValueError(f"{path} has no text to select from")
    return chunks
