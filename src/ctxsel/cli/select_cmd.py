"""Select the chunks of a document a reader should see for a question.

    ctxsel select --document report.md --question "Who built the telescope?"
    ctxsel select --document report.md --question-file long_question.txt --method top-k@5 --json
    ctxsel select --document chunks.jsonl --question "..." --scores scores.txt --method adaptive-k
    ctxsel select --document - --question "..." < report.md | head -5

Prints the kept chunks, best first, and why the cut fell where it did; --json prints one object, the
same as the HTTP service's POST /select response; --html FILE also writes the selection's page
(ctxsel.explainer), as POST /explain answers it.
"""

from __future__ import annotations

import argparse
import json

from ctxsel.cli.common import (
    add_choice_argument,
    add_chunking_arguments,
    add_document_argument,
    add_llm_arguments,
    add_question_arguments,
    add_scores_argument,
    load_document_chunks,
    make_llm,
    question_from,
    read_scores,
)
from ctxsel.cli.scorer_args import add_scorer_arguments, add_stage_argument, make_ranking
from ctxsel.numbers import short_number
from ctxsel.types import Selection, jsonable

NAME = "select"
HELP = "select chunks of a document for a question"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_document_argument(p)
    add_question_arguments(p)
    p.add_argument("--method", default="adaptive-k", help="method spec, e.g. adaptive-k, top-k@5, top-n-tokens@5k")
    add_chunking_arguments(p)
    p.add_argument(
        "--min-k",
        default=None,
        metavar="N",
        help="keep at least N chunks whatever the method decides (default 1; capped at the chunks there are)",
    )
    p.add_argument(
        "--max-tokens",
        default=None,
        metavar="N",
        help="hard token budget (cl100k): the kept chunks never exceed it",
    )
    add_choice_argument(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--html",
        default=None,
        metavar="FILE",
        help="also write the selection as one self-contained HTML page: the score curve with the cut, "
        "the document with the kept chunks highlighted",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars (--json implies it)")
    add_scores_argument(p)
    add_scorer_arguments(p)
    add_stage_argument(p)
    g = p.add_argument_group("LLM (only for methods that call one: self-route, sage, context-picker)")
    add_llm_arguments(g)


def number_options(args: argparse.Namespace) -> dict[str, object]:
    """--min-k and --max-tokens, their text read as a spec reads a number (1e3 and 5k are whole numbers,
    as in Python and HTTP; 2.5 stays 2.5): ``ctxsel.select`` checks them, in its order and words."""
    from ctxsel.errors import InputError
    from ctxsel.specs import spec_value

    out: dict[str, object] = {}
    for key in ("min_k", "max_tokens"):
        text = getattr(args, key)
        if text is None:
            continue
        try:
            out[key] = spec_value(text)
        except InputError as e:
            raise InputError(f"--{key.replace('_', '-')}: {e}") from None
    return out


def write_html(path: str, sel: Selection) -> None:
    """The selection's page (:mod:`ctxsel.explainer`) at ``path``; where it went is said on stderr."""
    import sys
    from pathlib import Path

    from ctxsel.errors import InputError
    from ctxsel.explainer import selection_html

    try:
        Path(path).write_text(selection_html(sel), encoding="utf-8")
    except OSError as e:
        raise InputError(f"--html {path}: cannot write it: {e.strerror or e}") from None
    print(f"ctxsel select: wrote {path}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from ctxsel import select
    from ctxsel.selectors import get_selector_class, parse_spec

    question = question_from(args)
    chunks = load_document_chunks(args.document, args.chunking, args.max_bytes, args.max_chunk_tokens, args.headings)
    scores = read_scores(args.scores, len(chunks)) if args.scores else None
    needs_llm = get_selector_class(parse_spec(args.method)[0]).needs_llm
    options: dict[str, object] = number_options(args)
    if needs_llm:
        options["llm"] = make_llm(args) if args.reader else None
    progress = not (args.json or args.no_progress)
    # given --scores, the scorer is built only if the chain needs it (a second hop scores the widened question)
    sel = select(
        question,
        chunks,
        args.method,
        scores,
        scorer=make_ranking(args, progress, given_scores=scores is not None),
        choices=args.choices,
        stages=args.stage,
        **options,
    )
    if args.html:
        write_html(args.html, sel)
    if args.json:  # the shape of POST /select's response (ctxsel.service.models.SelectionOut)
        print(json.dumps(jsonable(sel.to_dict(with_text=True)), ensure_ascii=False))
        return 0
    total = sum(c.n_tokens for c in chunks)
    print(f"{sel.method}: kept {sel.k} of {len(chunks)} chunks, {sel.n_tokens:,} of {total:,} tokens")
    if sel.abstained:
        print(f"abstained: {sel.abstain_reason}")
    print(f"why: {sel.explanation}\n")
    for rank, (c, s) in enumerate(zip(sel.chunks, sel.scores), start=1):
        preview = " ".join(c.text.split())
        preview = preview[:150] + ("..." if len(preview) > 150 else "")
        score = "-" if s is None else short_number(s)
        print(f"{rank:>3}. [{c.id}] score={score} tokens={c.n_tokens}\n     {preview}")
    return 0
