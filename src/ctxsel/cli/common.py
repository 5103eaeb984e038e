"""Argument helpers shared by subcommands."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ctxsel.chunking import chunk_text
from ctxsel.scoring.base import Scorer
from ctxsel.types import Chunk, check_unique_ids

DEFAULT_MAX_BYTES = 20_000_000


def add_scorer_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scorer", default="dense", type=scorer_spec,
                   help="how chunks are scored: dense (default), bm25, keywords, or hybrid (dense + BM25; options as "
                        "hybrid[dense=1,bm25=0.25,fusion=minmax|rrf])")
    p.add_argument("--expand", default=None, metavar="SPEC", type=expansion_spec,
                   help="re-rank before the cut: hop (second-hop re-scoring), links (mention links), or hop+links, "
                        "with options as hop[m=1,weight=0.7] and links[m=1,boost=0.3] (default: off)")
    p.add_argument("--model", default=None, help="embedding model path or name (default: bundled all-MiniLM-L6-v2)")
    p.add_argument("--threads", type=int, default=None,
                   help="threads for embedding (default: torch's choice; ONNX: the usable cores, at most 4)")
    p.add_argument("--backend", default="auto", choices=["auto", "torch", "onnx", "onnx-int8"],
                   help="how the dense scorer runs the model (default auto: ONNX Runtime fp32 when onnxruntime is "
                        "installed and the model is the bundled MiniLM, else torch)")


def scorer_spec(value: str) -> str:
    """``--scorer``: a known scorer name, with or without ``[options]`` (checked when parsed)."""
    from ctxsel.scoring import SCORERS, parse_scorer_spec

    try:
        name, _ = parse_scorer_spec(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if name not in SCORERS:
        raise argparse.ArgumentTypeError(f"unknown scorer {name!r}; choose {', '.join(SCORERS)}")
    return value


def expansion_spec(value: str) -> str:
    """``--expand``: an expansion spec (checked when parsed)."""
    from ctxsel.expansion import parse_expansion

    try:
        parse_expansion(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def make_scorer(args: argparse.Namespace, progress: bool = True, spec: str | None = None,
                expand: str | None = None) -> Scorer:
    """The scorer the flags name (``spec`` overrides ``--scorer``), wrapped in the ``--expand`` stage
    if one is given (``expand`` overrides it). The dense flags (--model, --threads, --backend) go to a
    dense scorer and to a hybrid's dense part."""
    from ctxsel.scoring import get_scorer, parse_scorer_spec

    spec = spec or args.scorer
    name, options = parse_scorer_spec(spec)
    if name in ("dense", "hybrid"):
        dense_flags = {"model": args.model, "num_threads": args.threads, "show_progress": progress,
                       "backend": getattr(args, "backend", "auto")}
        options = {**{k: v for k, v in dense_flags.items() if k not in options}, **options}
    scorer = get_scorer(name, **options)
    expand = expand if expand is not None else getattr(args, "expand", None)
    if expand:
        from ctxsel.expansion import ExpandingScorer

        return ExpandingScorer(scorer, expand)
    return scorer


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


def add_llm_arguments(p: argparse.ArgumentParser, flag: str = "--reader", required: bool = False) -> None:
    """``--reader local|URL`` and its settings (``--judge`` reuses the same shape)."""
    name = flag.lstrip("-")
    p.add_argument(flag, required=required, default=None,
                   help="'local' (the default bundled model via llama.cpp, offline), 'local:NAME' (a bundled model: "
                        "qwen-1.5b, qwen-0.5b, gemma-270m), 'local:PATH.gguf', or the base URL of an "
                        "OpenAI-compatible server (vLLM, llama.cpp, Ollama, a hosted API)")
    p.add_argument(f"{flag}-model", default=None,
                   help="model name the server serves; with 'local', a bundled model's name or a GGUF file")
    p.add_argument(f"{flag}-mode", default="chat", choices=["chat", "completions"],
                   help="HTTP endpoint: chat (messages) or completions (raw prompt, for base models)")
    p.add_argument(f"{flag}-api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    p.add_argument(f"{flag}-timeout", type=float, default=120.0, help="seconds per HTTP attempt")
    if name == "reader":
        p.add_argument("--reader-window", type=int, default=None, metavar="N",
                       help="an HTTP reader's context window in tokens (prompt + answer), e.g. vLLM's --max-model-len: "
                            "a selection that does not fit is cut to its best-ranked chunks (counted with cl100k, "
                            "keeping 10%% + 64 tokens free). With 'local' the window is --n-ctx")
        p.add_argument("--n-ctx", type=int, default=None,
                       help="local model window in its tokens (default: what the model was trained for, 32k)")
        p.add_argument("--llm-threads", type=int, default=None,
                       help="llama.cpp threads (default: the usable cores; use 1 where other busy processes share them)")
        p.add_argument("--llm-cache", default=None,
                       help="SQLite response cache (default $CTXSEL_CACHE_DIR/llm_responses.sqlite); 'off' disables it")


def make_llm(args: argparse.Namespace, flag: str = "reader") -> Any:
    """The client named by ``--reader``/``--judge``, wrapped in the response cache unless it is off."""
    import os

    from ctxsel.llm.cache import CachedClient, ResponseCache

    where = getattr(args, flag)
    model = getattr(args, f"{flag}_model")
    if where == "local" or (where or "").startswith("local:"):
        from ctxsel.llm.local import LocalLlamaClient

        if getattr(args, f"{flag}_window", None) is not None:
            raise ValueError(f"--{flag}-window is for HTTP readers; a local model's window is --n-ctx")
        named = where.partition(":")[2] or model
        client: Any = LocalLlamaClient(named, n_ctx=getattr(args, "n_ctx", None),
                                       n_threads=getattr(args, "llm_threads", None))
    elif where and where.startswith(("http://", "https://")):
        from ctxsel.llm.openai_compat import OpenAICompatClient

        if not model:
            raise ValueError(f"--{flag}-model is required with an HTTP {flag}: the model name the server serves")
        client = OpenAICompatClient(where, model, api_key=os.environ.get(getattr(args, f"{flag}_api_key_env")) or "",
                                    mode=getattr(args, f"{flag}_mode"), timeout=getattr(args, f"{flag}_timeout"),
                                    context_window=getattr(args, f"{flag}_window", None))
    else:
        raise ValueError(f"--{flag} must be 'local', 'local:NAME', 'local:PATH.gguf' or an http(s):// base URL, "
                         f"got {where!r}")
    cache = getattr(args, "llm_cache", None)
    if cache == "off":
        return client
    return CachedClient(client, ResponseCache(cache) if cache else ResponseCache())
