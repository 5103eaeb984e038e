"""Assemble HoloBench-style aggregation examples (Maekawa et al., 2025).

For one query instance, with ``info_amount`` and ``size`` in cl100k tokens
(sums of the per-sentence counts, the ``n_tokens`` ctxsel gives each chunk):

1. **Relevant rows.** ``relevance="rows"`` (default): the rows taking part
   in the query's result tuples (its WHERE and join conditions; see
   queries.py). ``relevance="tables"``: every row of the query's tables, as
   HoloBench's own ``load_context`` does (its "main context").
2. **Eligibility.** An instance is used only if its relevant rows hold at
   least ``info_amount`` tokens; others are skipped (never padded, never
   repeated), so every example carries info_amount tokens of relevant text
   minus less than one sentence.
3. **Subsample.** Relevant result tuples (rows mode) or rows taken
   round-robin over the query's tables (tables mode) are shuffled and taken
   while they fit in ``info_amount``; the first one that does not fit stops
   it. Relevant rows left out are left out of the context altogether (never
   used as distractors), and the gold answer is the query run by DuckDB on
   the rows that are in the context, as HoloBench computes it on its
   sub-database.
4. **Distractors.** The other rows fill the context up to ``size``, taken
   round-robin over the tables (as HoloBench's loop does) from a shuffled
   pool per table, until the next one does not fit. In rows mode the pool
   holds every row that is not relevant, including the rows of the query's
   own tables that fail its condition (hard negatives); in tables mode it
   holds only the rows of the other tables.
5. **Merge** (HoloBench's strategies, with the authors' Adaptive-k fix that
   swaps HoloBench's original ``middle``/``bimodal``): ``uniform`` spreads
   the distractors evenly through the relevant sentences; ``begin`` puts
   the relevant block first; ``end`` last; ``middle`` in the middle of the
   distractors; ``bimodal`` splits it in two halves, at the start and at the
   end.
6. **Ids.** One chunk per sentence, ``s00000``, ``s00001`` ... in context
   order, so an id says nothing about relevance. ``gold_ids`` are the
   relevant sentences' ids; ``answers`` the result rendered as strings (one
   per item: ``"value"`` or ``"key: value"``); ``meta`` holds the SQL, the
   tables, the raw answer, the strategy, the sizes and ``sources`` (chunk
   id -> ``"table:_rid"``).

Everything random comes from numpy generators seeded with ``seed`` and fixed
integers (never Python's salted ``hash``); the content of an example
(subsample, distractors) depends on (seed, info_amount, size, query) but not
on the strategy, so strategies differ only in placement.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ctxsel.datasets.holobench.queries import TEMPLATES, QueryInstance, candidates
from ctxsel.datasets.holobench.tables import TABLE_NAMES, load_tables, verbalise
from ctxsel.errors import InputError, MissingExtraError, install_hint

MERGE_STRATEGIES: tuple[str, ...] = ("uniform", "begin", "end", "middle", "bimodal")
RELEVANCE_MODES: tuple[str, ...] = ("rows", "tables")
INFO_AMOUNTS: tuple[int, ...] = (5000, 10000, 25000, 50000)

RowKey = tuple[str, int]


def merge_contexts(main: Sequence[Any], aux: Sequence[Any], strategy: str = "uniform") -> tuple[list[Any], list[int]]:
    """Merge relevant (``main``) and distractor (``aux``) items; return the
    merged list and the positions of the main items in it."""
    if strategy not in MERGE_STRATEGIES:
        raise InputError(f"merge strategy must be one of {MERGE_STRATEGIES}, got {strategy!r}")
    main, aux = list(main), list(aux)
    if not main or not aux:
        return main + aux, list(range(len(main)))
    n, m = len(main), len(aux)
    if strategy == "uniform":
        total = n + m
        aux_pos = {int(i * total / m) for i in range(m)}
        merged: list[Any] = []
        ai = mi = 0
        main_pos = []
        for p in range(total):
            if p in aux_pos:
                merged.append(aux[ai])
                ai += 1
            else:
                merged.append(main[mi])
                main_pos.append(p)
                mi += 1
        return merged, main_pos
    if strategy == "begin":
        return main + aux, list(range(n))
    if strategy == "end":
        return aux + main, list(range(m, m + n))
    if strategy == "middle":
        mid = m // 2
        return aux[:mid] + main + aux[mid:], list(range(mid, mid + n))
    half = n // 2  # bimodal
    return main[:half] + aux + main[half:], list(range(half)) + list(range(half + m, m + n))


def render_value(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        f = float(v)
        if f.is_integer():
            return str(int(f))
        return f"{f:.2f}".rstrip("0").rstrip(".")
    return str(v)


def render_answer(kind: str, rows: Sequence[Sequence[Any]]) -> list[str]:
    if kind == "pairs":
        return [f"{render_value(r[0])}: {render_value(r[1])}" for r in rows]
    return [render_value(r[0]) for r in rows]


def _json_value(v: Any) -> Any:
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    return v


class _DB:
    """DuckDB over pandas frames, one thread (deterministic float sums)."""

    def __init__(self, frames: dict[str, Any]) -> None:
        try:
            import duckdb
        except ImportError as e:
            raise MissingExtraError(
                "the HoloBench-style generator runs its queries with DuckDB: " + install_hint("holo")
            ) from e
        self.con = duckdb.connect(":memory:")
        self.con.execute("SET threads TO 1")
        for name, df in frames.items():  # native tables: queries on them run faster than on views
            self.con.register("_frame", df)
            self.con.execute(f"CREATE TABLE {name} AS SELECT * FROM _frame")
            self.con.unregister("_frame")

    def run(self, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        cur = self.con.execute(sql)
        return [d[0] for d in cur.description], cur.fetchall()

    def close(self) -> None:
        self.con.close()


@dataclass
class Corpus:
    """The tables of one seed, a sentence and a token count per row."""

    seed: int
    tables: dict[str, Any]
    sentences: dict[str, list[str]]
    tokens: dict[str, np.ndarray]

    def sentence(self, key: RowKey) -> str:
        return self.sentences[key[0]][key[1]]

    def n_tokens(self, keys: Sequence[RowKey]) -> int:
        return int(sum(int(self.tokens[t][r]) for t, r in keys))

    def table_rows(self, table: str) -> list[RowKey]:
        return [(table, r) for r in range(len(self.tables[table]))]


@lru_cache(maxsize=4)
def build_corpus(seed: int = 0) -> Corpus:
    from ctxsel.tokens import count_tokens_batch

    tables = load_tables()
    sentences = verbalise(tables, seed)
    tokens = {t: np.asarray(count_tokens_batch(s), dtype=np.int64) for t, s in sentences.items()}
    return Corpus(seed, tables, sentences, tokens)


def _provenance_arrays(db: _DB, q: QueryInstance) -> list[np.ndarray]:
    """Distinct result tuples of the provenance query, one rid array per table."""
    cols = ", ".join(f"r{i}" for i in range(len(q.template.tables)))
    res = db.con.execute(f"SELECT DISTINCT * FROM ({q.provenance_sql}) ORDER BY {cols}").fetchnumpy()
    return [np.asarray(res[f"r{i}"], dtype=np.int64) for i in range(len(q.template.tables))]


def _provenance(db: _DB, q: QueryInstance) -> list[tuple[RowKey, ...]]:
    arrays = [a.tolist() for a in _provenance_arrays(db, q)]
    tables = q.template.tables
    return [tuple(zip(tables, row)) for row in zip(*arrays)]


def _units(corpus: Corpus, db: _DB, q: QueryInstance, relevance: str) -> list[tuple[RowKey, ...]]:
    """The relevant units (tuples of rows taken together), in a fixed order."""
    if relevance == "rows":
        return _provenance(db, q)
    return [(k,) for t in q.template.tables for k in corpus.table_rows(t)]


def _round_robin(pools: Sequence[Sequence[RowKey]]) -> list[RowKey]:
    out: list[RowKey] = []
    longest = max((len(p) for p in pools), default=0)
    for i in range(longest):
        for p in pools:
            if i < len(p):
                out.append(p[i])
    return out


def _take(corpus: Corpus, units: Sequence[Sequence[RowKey]], budget: int) -> tuple[list[RowKey], int]:
    """Units in order while they fit; stop at the first that does not."""
    chosen: list[RowKey] = []
    have: set[RowKey] = set()
    used = 0
    for unit in units:
        new = [k for k in dict.fromkeys(unit) if k not in have]
        cost = corpus.n_tokens(new)
        if used + cost > budget:
            break
        chosen.extend(new)
        have.update(new)
        used += cost
    return chosen, used


def _rng(seed: int, *parts: int | str) -> np.random.Generator:
    ints = [seed] + [p if isinstance(p, int) else zlib.crc32(p.encode()) for p in parts]
    return np.random.default_rng(ints)


_TOTALS: dict[tuple[int, str], dict[str, int]] = {}


def relevant_token_totals(corpus: Corpus, relevance: str = "rows") -> dict[str, int]:
    """Query key -> tokens of all its relevant rows (cached per seed and mode)."""
    cache_key = (corpus.seed, relevance)
    if cache_key not in _TOTALS:
        out: dict[str, int] = {}
        db = _DB(corpus.tables)
        try:
            for q in candidates(corpus.tables):
                if relevance == "rows":
                    res = db.con.execute(q.provenance_sql).fetchnumpy()
                    out[q.key] = int(
                        sum(
                            corpus.tokens[t][np.unique(np.asarray(res[f"r{i}"], dtype=np.int64))].sum()
                            for i, t in enumerate(q.template.tables)
                        )
                    )
                else:
                    out[q.key] = int(sum(corpus.tokens[t].sum() for t in q.template.tables))
        finally:
            db.close()
        _TOTALS[cache_key] = out
    return _TOTALS[cache_key]


def select_queries(
    corpus: Corpus, info_amount: int, n_queries: int, relevance: str = "rows"
) -> tuple[list[QueryInstance], int]:
    """Pick up to ``n_queries`` eligible instances, round-robin over the
    templates (template order and each template's parameter order are
    shuffled by the seed). Returns (chosen, number eligible)."""
    totals = relevant_token_totals(corpus, relevance)
    eligible: dict[str, list[QueryInstance]] = {t.id: [] for t in TEMPLATES}
    for q in candidates(corpus.tables):
        if totals[q.key] >= info_amount:
            eligible[q.template.id].append(q)
    n_eligible = sum(len(v) for v in eligible.values())
    order = [TEMPLATES[i].id for i in _rng(corpus.seed, "template-order").permutation(len(TEMPLATES))]
    shuffled = {}
    for tid in order:
        items = eligible[tid]
        perm: list[int] = _rng(corpus.seed, "params", tid).permutation(len(items)).tolist() if items else []
        shuffled[tid] = [items[i] for i in perm]
    chosen: list[QueryInstance] = []
    depth = 0
    while len(chosen) < n_queries and any(depth < len(v) for v in shuffled.values()):
        for tid in order:
            if depth < len(shuffled[tid]) and len(chosen) < n_queries:
                chosen.append(shuffled[tid][depth])
        depth += 1
    return chosen, n_eligible


def build_example(
    corpus: Corpus,
    q: QueryInstance,
    *,
    example_id: str,
    info_amount: int,
    size: int,
    strategy: str = "uniform",
    relevance: str = "rows",
) -> dict[str, Any]:
    """One example in ctxsel's generic JSONL layout (see module doc)."""
    if relevance not in RELEVANCE_MODES:
        raise InputError(f"relevance must be one of {RELEVANCE_MODES}, got {relevance!r}")
    if strategy not in MERGE_STRATEGIES:
        raise InputError(f"merge strategy must be one of {MERGE_STRATEGIES}, got {strategy!r}")
    if not 0 < info_amount <= size:
        raise InputError(f"need 0 < info_amount <= size, got info_amount={info_amount}, size={size}")
    rng = _rng(corpus.seed, info_amount, size, q.key)
    db_full = _DB(corpus.tables)
    try:
        units = _units(corpus, db_full, q, relevance)
    finally:
        db_full.close()
    relevant_all = {k for u in units for k in u}

    # 1. relevant subsample
    if relevance == "rows":
        ordered_units = [units[i] for i in rng.permutation(len(units))]
    else:
        pools = []
        for t in q.template.tables:
            rows = [u[0] for u in units if u[0][0] == t]
            pools.append([rows[i] for i in rng.permutation(len(rows))])
        ordered_units = [(k,) for k in _round_robin(pools)]
    relevant, info_tokens = _take(corpus, ordered_units, info_amount)

    # 2. distractors, round-robin over the tables
    excluded = relevant_all if relevance == "rows" else {k for t in q.template.tables for k in corpus.table_rows(t)}
    pools = []
    for t in TABLE_NAMES:
        rows = [k for k in corpus.table_rows(t) if k not in excluded]
        pools.append([rows[i] for i in rng.permutation(len(rows))])
    filler, fill_tokens = _take(corpus, [(k,) for k in _round_robin(pools)], size - info_tokens)
    if info_tokens + fill_tokens < size - 500:
        raise InputError(
            f"size {size} is more than the tables can fill for {q.template.id} (got {info_tokens + fill_tokens} tokens)"
        )

    # 3. answer and gold on the rows in the context
    in_context = set(relevant) | set(filler)
    frames = {
        t: df[df["_rid"].isin([r for tt, r in in_context if tt == t])]
        for t, df in corpus.tables.items()
        if t in q.template.tables
    }
    db = _DB(frames)
    try:
        columns, rows = db.run(q.sql)
        gold_keys = set(relevant)
        if relevance == "rows":
            prov = _provenance(db, q)
            gold_keys = {k for u in prov for k in u}
            if gold_keys != set(relevant):  # pragma: no cover - the construction guarantees it
                raise AssertionError(f"{q.key}: relevant rows in the context differ from the subsample")
    finally:
        db.close()

    # 4. order and merge
    order_rng = _rng(corpus.seed, info_amount, size, q.key, "order")
    main = [relevant[i] for i in order_rng.permutation(len(relevant))]
    aux = [filler[i] for i in order_rng.permutation(len(filler))]
    merged, _ = merge_contexts(main, aux, strategy)
    width = max(5, len(str(len(merged) - 1)))
    ids = [f"s{i:0{width}d}" for i in range(len(merged))]
    chunks = [{"id": cid, "text": corpus.sentence(k)} for cid, k in zip(ids, merged)]
    gold_ids = [cid for cid, k in zip(ids, merged) if k in gold_keys]
    answer_rows = [[_json_value(v) for v in r] for r in rows]
    return {
        "id": example_id,
        "question": q.question,
        "chunks": chunks,
        "gold_ids": gold_ids,
        "answers": render_answer(q.template.kind, rows),
        "meta": {
            "benchmark": "holobench-style",
            "template": q.template.id,
            "params": q.params,
            "tables": list(q.template.tables),
            "sql": q.sql,
            "where": q.where,
            "answer": {"kind": q.template.kind, "columns": columns, "rows": answer_rows},
            "strategy": strategy,
            "relevance": relevance,
            "seed": corpus.seed,
            "info_amount": info_amount,
            "size": size,
            "info_tokens": info_tokens,
            "total_tokens": info_tokens + fill_tokens,
            "n_chunks": len(chunks),
            "n_relevant": len(gold_ids),
            "n_relevant_full": len(relevant_all),
            "sources": {cid: f"{k[0]}:{k[1]}" for cid, k in zip(ids, merged)},
        },
    }


@dataclass
class Generated:
    examples: list[dict[str, Any]]
    n_eligible: int


def make_examples(
    info_amount: int,
    size: int = 100_000,
    seed: int = 0,
    n_queries: int = 30,
    strategy: str = "uniform",
    relevance: str = "rows",
) -> Generated:
    """The examples of one HoloBench-style set (see module doc)."""
    if relevance not in RELEVANCE_MODES:
        raise InputError(f"relevance must be one of {RELEVANCE_MODES}, got {relevance!r}")
    if strategy not in MERGE_STRATEGIES:
        raise InputError(f"merge strategy must be one of {MERGE_STRATEGIES}, got {strategy!r}")
    if n_queries < 1:
        raise InputError(f"n_queries must be >= 1, got {n_queries}")
    if not 0 < info_amount <= size:
        raise InputError(f"need 0 < info_amount <= size, got info_amount={info_amount}, size={size}")
    corpus = build_corpus(seed)
    chosen, n_eligible = select_queries(corpus, info_amount, n_queries, relevance)
    examples = [
        build_example(
            corpus,
            q,
            example_id=f"holo-i{info_amount}-q{i:03d}",
            info_amount=info_amount,
            size=size,
            strategy=strategy,
            relevance=relevance,
        )
        for i, q in enumerate(chosen)
    ]
    return Generated(examples, n_eligible)


def dumps_jsonl(examples: Sequence[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in examples).encode("utf-8")


def write_jsonl(examples: Sequence[dict[str, Any]], path: str | Path) -> str:
    """Write the examples; return the file's sha256."""
    data = dumps_jsonl(examples)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(p)
    return hashlib.sha256(data).hexdigest()
