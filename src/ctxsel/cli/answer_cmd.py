"""Answer a question about a document: select chunks, read them with an LLM.

    ctxsel answer --document report.md --question "..." [--method adaptive-k] [--reader local]
    ctxsel answer --document novel.txt --question "Who founded the guild?" --choice Orla --choice Jory

Prints the answer, the chunks it read and the token counts (the selection's
cl100k tokens and the reader's own input and output tokens); --json prints
one object. The default reader is the bundled local model (offline).
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
from ctxsel.types import jsonable

NAME = "answer"
HELP = "answer a question about a document with a reader LLM"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_document_argument(p)
    add_question_arguments(p)
    p.add_argument("--method", default="adaptive-k", help="method spec, e.g. adaptive-k, top-k@5, self-route, sage")
    add_choice_argument(p)
    add_chunking_arguments(p)
    p.add_argument(
        "--template",
        default=None,
        choices=["factoid-qa", "holobench-qa", "multiple-choice"],
        help="reader prompt (default: multiple-choice with --choice, else factoid-qa)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (--json implies it)")
    add_scores_argument(p)
    add_scorer_arguments(p)
    add_stage_argument(p)
    add_llm_arguments(p)
    p.set_defaults(reader="local")


def run(args: argparse.Namespace) -> int:
    from ctxsel import select
    from ctxsel.datasets.multiple_choice import question_with_options
    from ctxsel.reader import Reader
    from ctxsel.selectors.sage.trace import as_counting, as_round

    question = question_from(args)
    chunks = load_document_chunks(args.document, args.chunking, args.max_bytes, args.max_chunk_tokens, args.headings)
    scores = read_scores(args.scores, len(chunks)) if args.scores else None
    client = make_llm(args)
    choices = args.choices or []
    template = args.template or ("multiple-choice" if choices else "factoid-qa")
    progress = not (args.json or args.no_progress)
    sel = select(
        question,
        chunks,
        args.method,
        scores,
        # given --scores, the scorer is built only if the chain needs it (a second hop scores the widened question)
        scorer=make_ranking(args, progress, given_scores=scores is not None),
        llm=client,
        choices=choices,
        stages=args.stage,
    )
    ans = Reader(client, template).answer(question_with_options(question, choices), sel)
    if args.json:
        print(json.dumps(jsonable(ans.to_dict(with_text=True)), ensure_ascii=False))
        return 0
    total = sum(c.n_tokens for c in chunks)
    print(f"answer: {ans.text}\n")
    print(f"{sel.method}: read {sel.k} of {len(chunks)} chunks, {sel.n_tokens:,} of {total:,} tokens (cl100k)")
    print(f"why: {sel.explanation}")
    u = ans.usage
    print(
        f"reader {client.model_id}: {u.calls} call(s), {u.tokens_in:,} tokens in, {u.tokens_out:,} out, "
        f"{ans.seconds:.1f} s\n"
    )
    for step in sel.trace:
        if (r := as_round(step)) is not None:
            imp = r.get("importance")
            verdict = f"sufficient: {r['sufficient']}" if "sufficient" in r else "last round, no verdict asked"
            print(
                f"round {r['round']}: keys {', '.join(r['keys'][:8])} -> {len(r['retrieved'])} retrieved, "
                f"{len(r['neighbours'])} neighbours; importance {'-' if imp is None else short_number(imp)}; "
                f"{verdict}; {r.get('prompt_tokens', 0):,} prompt tokens evaluated"
            )
        elif (check := as_counting(step)) is not None:
            print(f"counting: {', '.join(check['variants'])} -> {check['count']}")
    for failure in sel.meta.get("failures", []):
        print(f"failure: {failure}")
    if sel.trace:
        print()
    for rank, c in enumerate(sel.chunks, start=1):
        preview = " ".join(c.text.split())
        print(f"{rank:>3}. [{c.id}] {preview[:150]}{'...' if len(preview) > 150 else ''}")
    return 0
