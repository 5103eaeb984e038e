"""Summaries (JSON, Markdown) and plots of an evaluation."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ctxsel.errors import InputError
from ctxsel.eval.results import write_atomic
from ctxsel.eval.stats import CI_METHODS, TRUSTED_KAPPA, bootstrap_ci, compare, judge_agreement
from ctxsel.paths import disk_full, is_out_of_room
from ctxsel.plotting import pyplot
from ctxsel.types import Example

METRICS = ("recall", "precision", "k", "diff_k", "diff_k_authors", "n_tokens", "reduction", "select_ms")
#: Added by a reader (``ctxsel eval --reader``): answer score and LLM cost per example.
#: ``subem``/``em``/``f1``: factoid answers (HotpotQA's official EM and F1);
#: ``cut``: share of rows whose selection was cut to the reader's window, ``tokens_cut``: tokens dropped per row;
#: ``overlap_f1``: aggregation answers' set-overlap F1, ``judge_valid``: share of valid LLM-judge replies.
READER_METRICS = (
    "score",
    "subem",
    "em",
    "f1",
    "llm_calls",
    "tokens_in",
    "tokens_reused",
    "tokens_out",
    "answer_tokens_in",
    "wall_s",
    "cut",
    "tokens_cut",
    "overlap_f1",
    "judge_valid",
    "answer_valid",
)
#: The paper's Tables 7-16 columns (Score, Context recall, Reduction %, n_in, n_out), then the
#: reader's window (rows cut, tokens dropped) and the rows that failed.
READER_COLUMNS = (
    ("score", "score %", "pct"),
    ("recall", "recall %", "pct"),
    ("reduction", "reduction %", ".1f"),
    ("tokens_in", "n_in", ",.0f"),
    ("answer_tokens_in", "answer n_in", ",.0f"),
    ("tokens_out", "n_out", ",.1f"),
    ("llm_calls", "LLM calls", ".2f"),
    ("wall_s", "wall s", ".1f"),
    ("cut", "cut %", "pct"),
    ("tokens_cut", "tokens cut", ",.0f"),
    ("errors", "errors", "d"),
)
#: For factoid answers the score column becomes SubEM, EM and F1 (HotpotQA's official EM/F1).
FACTOID_COLUMNS = (("subem", "SubEM %", "pct"), ("em", "EM %", "pct"), ("f1", "F1 %", "pct"))
#: Beside an LLM judge's score: how many of its replies were valid (the others fall back to set overlap).
JUDGE_VALID_COLUMN = ("judge_valid", "judge valid %", "pct")
#: In place of an untrusted judge's score: the deterministic set-overlap F1 of the same answers.
OVERLAP_COLUMN = ("overlap_f1", "overlap F1 %", "pct")
#: Structured answers (``--answer-format structured``): the share of replies that parsed under their format.
ANSWER_VALID_COLUMN = ("answer_valid", "valid answers %", "pct")


def reader_columns(
    summary: Mapping[str, Mapping[str, Any]], judge_trusted: bool = True
) -> tuple[tuple[str, str, str], ...]:
    """READER_COLUMNS, with SubEM / EM / F1 in place of the score when the answers are factoid, and the
    LLM judge's valid-reply rate when a judge scored them; a judge that is not trusted
    (``stats.judge_agreement``) has its score column replaced by the set-overlap F1."""
    if any(e.get("subem") is not None for e in summary.values()):
        return FACTOID_COLUMNS + READER_COLUMNS[1:]
    valid = (ANSWER_VALID_COLUMN,) if any(e.get("answer_valid") is not None for e in summary.values()) else ()
    if any(e.get("judge_valid") is not None for e in summary.values()):
        if not judge_trusted:
            return (OVERLAP_COLUMN, *valid, *READER_COLUMNS[1:])
        return (*READER_COLUMNS[:1], JUDGE_VALID_COLUMN, OVERLAP_COLUMN, *valid, *READER_COLUMNS[1:])
    return (*READER_COLUMNS[:1], *valid, *READER_COLUMNS[1:])


#: LLM selectors that parse a reply: Context-Picker's share of invalid replies and of fallbacks,
#: SAGE's share of unreadable YES/NO verdicts.
SELECTOR_REPLY_COLUMNS = (
    ("invalid_share", "invalid replies %", "pct"),
    ("fallback", "fallbacks %", "pct"),
    ("llm_calls", "LLM calls", ".2f"),
    ("recall", "recall %", "pct"),
    ("n_tokens", "tokens", ",.0f"),
    ("unreadable_verdicts", "unreadable verdicts %", "pct"),
)
#: The per-example reply metrics that make a report show SELECTOR_REPLY_COLUMNS.
REPLY_METRICS = ("invalid_share", "fallback", "unreadable_verdicts")


def _mean(values: list[Any]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def summarize_ci(ci: str) -> str:
    """``ci``, checked: an unknown interval method is an error before anything runs."""
    if ci not in CI_METHODS:
        raise InputError(f"unknown interval method {ci!r}; choose {' or '.join(CI_METHODS)}")
    return ci


def summarize(
    rows: Sequence[Mapping[str, Any]], methods: Sequence[str], ci: str = "bootstrap", seed: int = 0
) -> dict[str, Any]:
    """Per method: the mean of every metric over the examples that have it, n and errors; with
    ``ci="bootstrap"`` each mean's 95% interval beside it as ``<metric>_ci95`` (``ctxsel.eval.stats``)."""
    summarize_ci(ci)
    out: dict[str, Any] = {}
    for m in methods:
        mine = [r for r in rows if r["method"] == m]
        if not mine:
            continue
        # n counts every row; errors, the rows that failed; means skip the metrics a row lacks
        entry: dict[str, Any] = {"n": len(mine), "errors": sum(1 for r in mine if r.get("error"))}
        keys = (
            list(METRICS)
            + [k for k in READER_METRICS if any(k in r for r in mine)]
            + sorted({k for r in mine for k in r.get("extra_metrics", {})})
        )
        for key in keys:
            vals = [r.get(key, r.get("extra_metrics", {}).get(key)) for r in mine]
            entry[key] = _mean(vals)
            if ci == "bootstrap" and entry[key] is not None:
                entry[f"{key}_ci95"] = list(bootstrap_ci([float(v) for v in vals if v is not None], seed=seed) or ())
        out[m] = entry
    return out


def markdown_table(
    summary: Mapping[str, Mapping[str, Any]], columns: Sequence[tuple[str, str, str]] | None = None
) -> str:
    """columns: (key, header, format) -- recall/precision shown as percentages."""
    if columns is None:
        columns = (
            ("recall", "recall %", "pct"),
            ("precision", "precision %", "pct"),
            ("k", "k", ".1f"),
            ("diff_k", "diff-k", ".1f"),
            ("n_tokens", "tokens", ",.0f"),
            ("reduction", "reduction %", ".1f"),
        )
        if any(e.get("errors") for e in summary.values()):  # failed rows are shown where they happen
            columns += (("errors", "errors", "d"),)
    head = "| method | " + " | ".join(h for _, h, _ in columns) + " |"
    sep = "|---|" + "|".join("---:" for _ in columns) + "|"
    lines = [head, sep]
    for m, e in summary.items():
        cells = []
        for key, _, fmt in columns:
            v, ci = e.get(key), e.get(f"{key}_ci95")
            if v is None or (isinstance(v, float) and math.isnan(v)):
                cells.append("-")
            else:
                cells.append(_number(v, fmt) + (f" [{_number(ci[0], fmt)}, {_number(ci[1], fmt)}]" if ci else ""))
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def agreement_text(agreement: Mapping[str, Any], judge: str) -> str:
    """The judge's check in words and its confusion table (summary.md)."""
    c, kappa = agreement["confusion"], agreement["kappa"]
    verdict = "trusted" if agreement["trusted"] else f"not trusted (below {TRUSTED_KAPPA}): its score is left out above"
    k = "undefined" if kappa is None else f"{kappa:.2f}"
    ref = agreement["reference"]
    return (
        f"## The judge `{judge}` against {ref}\n\n"
        f"Credit means a score >= {agreement['credit_at']}. Over {agreement['n']} judged answers the judge agrees "
        f"with {ref} on {100 * agreement['agreement']:.1f}%, Cohen's kappa {k}: {verdict}.\n\n"
        f"| | {ref} credits | {ref} does not |\n|---|---:|---:|\n"
        f"| judge credits | {c['judge_yes_ref_yes']} | {c['judge_yes_ref_no']} |\n"
        f"| judge does not | {c['judge_no_ref_yes']} | {c['judge_no_ref_no']} |\n"
    )


def _number(v: float, fmt: str) -> str:
    return f"{100 * v:.1f}" if fmt == "pct" else format(v, fmt)


def verdict(comparison: Mapping[str, Any]) -> str:
    """What a paired difference is called: "real" where its 95% interval excludes 0 *and* its paired
    test gives p < 0.05, "borderline" where only one of the two holds, "" otherwise. Both, because
    the two can disagree on few discordant pairs: a bootstrap interval of 4-0 McNemar pairs excludes
    0 while the exact test gives p = 0.125, and one question more would move it."""
    lo, hi = comparison["ci95"]
    excludes_zero = lo > 0 or hi < 0
    significant = comparison["p"] < 0.05
    return "real" if excludes_zero and significant else "borderline" if excludes_zero or significant else ""


def comparisons_table(comparisons: Sequence[Mapping[str, Any]]) -> str:
    """The paired differences, a - b, percentages for the 0-1 metrics, each with its :func:`verdict`."""
    lines = ["| a | b | metric | a - b | 95% interval | p | n | test |", "|---|---|---|---:|---:|---:|---:|---|"]
    for c in comparisons:
        fmt = ",.0f" if c["metric"] == "n_tokens" else "pct"
        lo, hi = c["ci95"]
        said = f" ({v})" if (v := verdict(c)) else ""
        lines.append(
            f"| {c['a']} | {c['b']} | {c['metric']} | {_number(c['diff'], fmt)}{said} | "
            f"[{_number(lo, fmt)}, {_number(hi, fmt)}] | {c['p']:.3g} | {c['n']} | {c['test']} |"
        )
    return "\n".join(lines) + "\n"


def write_reports(
    out: Path, summary: dict[str, Any], rows: Sequence[Mapping[str, Any]], config: dict[str, Any]
) -> None:
    """summary.json, summary.md and the plots; with ``config["compare"]`` (``--compare``) the paired
    differences to that method too (``comparisons``)."""
    report: dict[str, Any] = {"config": config, "methods": summary}
    agreement = judge_agreement(rows) if config.get("judge") else None
    if agreement is not None:
        report["judge_agreement"] = agreement
    against, refused = config.get("compare"), None
    if against:
        try:
            report["comparisons"] = compare(rows, list(summary), against, seed=int(config.get("seed") or 0))
        except InputError as e:  # the rest of the report is still written, then the refusal is said
            against, refused = None, e
    write_atomic(out / "summary.json", json.dumps(report, indent=2))
    n = max((e["n"] for e in summary.values()), default=0)
    md = f"# ctxsel eval: {config.get('dataset') or 'dataset'}\n\n{n} examples, scorer `{config.get('scorer')}`."
    if config.get("ci", "bootstrap") == "bootstrap":
        md += " Brackets: 95% bootstrap interval over examples."
    md += "\n\n" + markdown_table(summary)
    if config.get("reader"):
        r = config["reader"]
        how = f", {config['answer_format']} answers" if config.get("answer_format") else ""
        md += f"\n## Reading with `{r['model']}` ({r['template']}{how})\n\n"
        trusted = agreement is None or agreement["trusted"]
        md += markdown_table(summary, reader_columns(summary, judge_trusted=trusted))
    if agreement is not None:
        md += "\n" + agreement_text(agreement, str(config["judge"]))
    if any(k in e for e in summary.values() for k in REPLY_METRICS):
        md += "\n## LLM selector replies\n\n" + markdown_table(summary, SELECTOR_REPLY_COLUMNS)
    if against:
        md += f"\n## Paired differences to `{against}`\n\n" + comparisons_table(report["comparisons"])
    write_atomic(out / "summary.md", md)
    if summary:
        plot_tradeoff(out / "plots", summary, rows)
        if config.get("reader"):  # the headline answer score too: the first column of the reading table
            answer = reader_columns(summary, judge_trusted=agreement is None or agreement["trusted"])[0][0]
            plot_tradeoff(out / "plots", summary, rows, metric=answer, tokens="answer_tokens_in", per_method=False)
    if report.get("comparisons"):
        plot_comparisons(out / "plots" / "comparisons.png", report["comparisons"])
    if refused is not None:
        raise refused


def _save(fig: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp.png")
    try:
        fig.savefig(tmp, dpi=110, bbox_inches="tight")
        tmp.replace(path)
    except OSError as e:  # a full disk: no half-written PNG left, and the error in words
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if is_out_of_room(e):
            raise disk_full(path, e) from e
        raise


def plot_tradeoff(
    folder: Path,
    summary: Mapping[str, Any],
    rows: Sequence[Mapping[str, Any]],
    metric: str = "recall",
    tokens: str = "n_tokens",
    per_method: bool = True,
) -> None:
    """One PNG with every method's mean (metric vs tokens), and (``per_method``) one per method
    with its per-example points. ``tokens``: the selection's (``n_tokens``), or for an answer score
    the prompt's the reader was given (``answer_tokens_in``: full cut to the window reads the window,
    not the document). Nothing without matplotlib (``ctxsel.plotting``)."""
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    families: dict[str, list[tuple[float, float, str]]] = {}
    bars: dict[str, tuple[float, float]] = {}  # a method's 95% interval, drawn as an error bar
    for m, e in summary.items():
        if e.get(metric) is None or e.get(tokens) is None:
            continue
        families.setdefault(m.split("@")[0].split("[")[0], []).append((max(e[tokens], 1), 100 * e[metric], m))
        if e.get(f"{metric}_ci95"):
            bars[m] = (100 * e[metric] - 100 * e[f"{metric}_ci95"][0], 100 * e[f"{metric}_ci95"][1] - 100 * e[metric])
    if not families:  # no labels to measure recall against (e.g. multiple-choice data)
        plt.close(fig)
        return
    markers = iter("o*sPD^vX<>ph" * 4)
    for fam, pts in families.items():
        # a fixed baseline swept over its parameter reads best as a curve;
        # adaptive methods and singletons as individual labelled markers
        if fam in ("top-k", "top-n-tokens") and len(pts) > 1:
            pts.sort()
            line = ax.plot([p[0] for p in pts], [p[1] for p in pts], "-o", ms=4, lw=1, alpha=0.7, label=fam)
            for x, y, m in pts:
                if m in bars:
                    ax.errorbar(x, y, yerr=[[bars[m][0]], [bars[m][1]]], color=line[0].get_color(), lw=0.8)
        else:
            for x, y, m in pts:
                dot = ax.scatter(x, y, s=70, marker=next(markers), zorder=3, label=m)
                if m in bars:
                    ax.errorbar(x, y, yerr=[[bars[m][0]], [bars[m][1]]], color=dot.get_facecolor()[0], lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel(("input tokens" if tokens == "n_tokens" else "the reader's prompt tokens") + " (mean, log scale)")
    ax.set_ylabel(f"{metric} (%)")
    ax.set_title(f"{metric} against tokens" + (" (bars: 95% intervals)" if bars else ""))
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    _save(fig, folder / f"{metric}_vs_tokens.png")
    plt.close(fig)
    for m in summary if per_method else ():
        points: list[tuple[float, float]] = [
            (r[tokens], r[metric])
            for r in rows
            if r["method"] == m and r.get(metric) is not None and r.get(tokens) is not None
        ]
        if not points:
            continue
        fig, ax = plt.subplots(figsize=(5, 3.5))
        xs = np.maximum([p[0] for p in points], 1)
        ys = 100 * np.asarray([p[1] for p in points], dtype=float)
        jitter = np.random.default_rng(0).uniform(-1.5, 1.5, len(ys))
        ax.scatter(xs, ys + jitter, s=10, alpha=0.5)
        ax.scatter([xs.mean()], [ys.mean()], s=60, marker="x", color="black", label="mean")
        ax.set_xscale("log")
        ax.set_xlabel("input tokens (log)")
        ax.set_ylabel(f"{metric} (%)")
        ax.set_title(m)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        _save(fig, folder / "methods" / f"{safe_filename(m)}.png")
        plt.close(fig)


def forest_rows(comparisons: Sequence[Mapping[str, Any]], metric: str) -> list[tuple[str, float, float, float, str]]:
    """One metric's paired differences as (label, diff, lo, hi, verdict), in points: what
    :func:`plot_comparisons` draws, with the table's :func:`verdict`."""
    out = []
    for c in comparisons:
        if c["metric"] == metric:
            lo, hi = c["ci95"]
            out.append((f"{c['a']} - {c['b']} (n={c['n']})", 100 * c["diff"], 100 * lo, 100 * hi, verdict(c)))
    return out


def plot_comparisons(
    path: Path, comparisons: Sequence[Mapping[str, Any]], metrics: Sequence[str] | None = None
) -> None:
    """A forest plot of the paired differences: a panel a metric, a row a pair, its 95% interval as a
    bar, a line at 0. Real differences (:func:`verdict`) filled, borderline ones hollow and blue, the
    others hollow and grey, so which rows differ reads at a glance. The 0-1 metrics only
    (``n_tokens`` is on another scale)."""
    plt = pyplot()
    if plt is None:
        return
    metrics = metrics or [m for m in dict.fromkeys(c["metric"] for c in comparisons) if m != "n_tokens"]
    panels = [(m, rows) for m in metrics if (rows := forest_rows(comparisons, m))]
    if not panels:
        return
    labels = list(dict.fromkeys(r[0] for _, rows in panels for r in rows))
    y_of = {label: len(labels) - 1 - i for i, label in enumerate(labels)}  # the first pair on top
    fig, axes = plt.subplots(
        1, len(panels), figsize=(4.2 * len(panels) + 2.5, 0.9 + 0.28 * len(labels)), sharey=True, squeeze=False
    )
    for ax, (metric, rows) in zip(axes[0], panels, strict=True):
        for label, diff, lo, hi, said in rows:
            color = "tab:blue" if said else "0.55"
            real = said == "real"
            ax.errorbar(
                diff,
                y_of[label],
                xerr=[[diff - lo], [hi - diff]],
                fmt="o",
                color=color,
                capsize=2,
                lw=1.1,
                mfc=color if real else "white",
            )
        ax.axvline(0, color="black", lw=0.8, ls="--")
        ax.set_xlabel(f"{metric}, a - b (points)")
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].set_yticks([y_of[label] for label in labels], labels, fontsize=7)
    fig.suptitle(
        "paired differences, 95% intervals (filled: real, the interval excludes 0 and p < 0.05; "
        "hollow blue: one of the two)",
        fontsize=9,
    )
    _save(fig, path)
    plt.close(fig)


def plot_similarity_curve(path: Path, ex: Example, scores: np.ndarray, selectors: Mapping[str, Any]) -> None:
    """Sorted similarities of one example, gold ranks marked, each method's cut drawn (if matplotlib is there)."""
    plt = pyplot()
    if plt is None:
        return
    order = np.argsort(-scores, kind="stable")
    s = scores[order]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(np.arange(1, len(s) + 1), s, lw=1.2, color="tab:blue", label="similarity (sorted)")
    gold = set(ex.gold_ids)
    gold_ranks = [r + 1 for r, i in enumerate(order) if ex.chunks[i].id in gold]
    if gold_ranks:
        ax.scatter(gold_ranks, s[np.asarray(gold_ranks) - 1], color="tab:red", zorder=3, label="gold chunks")
    tokens = np.asarray([c.n_tokens for c in ex.chunks], dtype=np.int64)
    colors = plt.get_cmap("tab20")
    for j, (m, sel) in enumerate(selectors.items()):
        # an LLM-routed cut is not a function of the scores; reference rows (oracle, closed-book) cut nothing
        if m == "full" or sel.needs_llm or not sel.needs_scores:
            continue
        d = sel.decide(scores, tokens)
        band = d.details.kept_band() if d.details is not None else None
        if band is not None:  # a band that need not start at the top (LDAR's): shaded
            lo, hi = band
            ax.axvspan(lo - 0.5, hi + 0.5, color=colors(j % 20), alpha=0.2, label=f"{m}: ranks {lo}-{hi}")
            continue
        ax.axvline(d.k + 0.5, color=colors(j % 20), ls="--", lw=0.9, label=f"{m}: k={d.k}")
    ax.set_xscale("log")
    ax.set_xlabel("rank (log)")
    ax.set_ylabel("score")
    ax.set_title(f"{ex.id}: {ex.question[:80]}", fontsize=9)
    ax.legend(fontsize=6, ncol=2)
    ax.grid(alpha=0.3)
    _save(fig, path)
    plt.close(fig)


def safe_filename(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
