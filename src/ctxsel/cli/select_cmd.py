"""Select the chunks of a document a reader should see for a question."""

from __future__ import annotations

import argparse
import json

from ctxsel.cli.common import DEFAULT_MAX_BYTES, add_scorer_arguments, load_document_chunks, make_scorer

NAME = "select"
HELP = "select chunks of a document for a question"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--document", required=True, help="text file (chunked) or .jsonl of {id, text} chunks")
    p.add_argument("--question", required=True)
    p.add_argument("--method", default="adaptive-k", help="method spec, e.g. adaptive-k, top-k@5, top-n-tokens@5k")
    p.add_argument("--chunking", default="paragraphs", choices=["paragraphs", "sentences", "tokens", "semantic"])
    p.add_argument("--min-k", type=int, default=None)
    p.add_argument("--max-tokens", type=int, default=None, help="hard token budget")
    p.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_BYTES)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_scorer_arguments(p)


def run(args: argparse.Namespace) -> int:
    from ctxsel import select

    chunks = load_document_chunks(args.document, args.chunking, args.max_bytes)
    options = {k: v for k, v in (("min_k", args.min_k), ("max_tokens", args.max_tokens)) if v is not None}
    sel = select(args.question, chunks, args.method, scorer=make_scorer(args, progress=not args.json, expand=""),
                 expand=args.expand, **options)
    if args.json:
        d = sel.to_dict()
        print(json.dumps({key: d[key] for key in ("method", "k", "n_tokens", "explanation", "chunks", "reading_order", "config")},
                         ensure_ascii=False))
        return 0
    total = sum(c.n_tokens for c in chunks)
    print(f"{sel.method}: kept {sel.k} of {len(chunks)} chunks, {sel.n_tokens:,} of {total:,} tokens")
    print(f"why: {sel.explanation}\n")
    for rank, (c, s) in enumerate(zip(sel.chunks, sel.scores), start=1):
        preview = " ".join(c.text.split())
        preview = preview[:150] + ("..." if len(preview) > 150 else "")
        score = "-" if s is None else f"{s:.3f}"
        print(f"{rank:>3}. [{c.id}] score={score} tokens={c.n_tokens}\n     {preview}")
    return 0
