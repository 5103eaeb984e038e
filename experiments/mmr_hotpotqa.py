"""The ``mmr`` stage on hotpotqa-long: re-rank before the cut against a filter after it.

    python -m experiments.mmr_hotpotqa [--scorer dense]

For every question the scorer ranks the whole pool (991 paragraphs, each question's ten among
them), and three methods cut it: adaptive-k (default options), top-k@3 and top-k@5. Then:

- ``rerank`` (the stage as shipped, run through :class:`ctxsel.stages.mmr.Mmr`): the method's k
  chunks are picked again by MMR from the ranking's top ``fetch`` (default ``max(2k, 20)``),
  relevance min-max scaled over the candidates; for each lambda and fetch in a grid.
- ``raw``: the same picks with the raw cosine as relevance (LangChain's and Haystack's way), to
  measure the scaling.
- ``filter``: the kept chunks in MMR order among themselves (relevance scaled over the same
  candidates), a kept chunk dropped when its marginal value falls below a threshold ``t``; the
  best-ranked is always kept.

Gold recall (the share of a question's two gold paragraphs kept) and cl100k tokens, per question;
the paired difference to the method without a stage, all with 95% bootstrap intervals. Choices are
made on the training split (ctxsel.datasets.splits) and reported on the test split and all 100:
the variant and lambda with the highest mean train recall over the three methods (a filter is chosen
only if it saves tokens without losing train recall). Scores and vectors come from the scorer's
embedding cache (the pool is embedded once).

A check, not a choice: the same questions over the pool with a near-copy of every paragraph (the
paragraph without its last sentence), where a ranking keeps pairs of copies; each method alone, with
``dedup`` and with ``mmr`` (a gold paragraph counts as kept when it or its copy is). Writes
benchmarks/results/mmr_hotpotqa.{md,json}.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

import ctxsel
from ctxsel.chunking import split_sentences
from ctxsel.datasets import load_dataset
from ctxsel.datasets.splits import split_examples
from ctxsel.eval.stats import bootstrap_ci
from ctxsel.query import Query
from ctxsel.ranking.chain import Ranking
from ctxsel.scoring import get_scorer
from ctxsel.stages.mmr import Mmr, mmr_order, scaled
from ctxsel.types import Chunk, Example, Selection

OUT = Path("benchmarks/results")
METHODS = ("adaptive-k", "top-k@3", "top-k@5")
LAMBDAS = (0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
FETCHES: tuple[int | None, ...] = (None, 10, 50)
FILTER_LAMBDAS = (0.5, 0.7)
THRESHOLDS = (-0.3, -0.2, -0.1, 0.0, 0.1)

Row = dict[str, float]
#: the id suffix of a paragraph's near-copy (the check pool)
COPY = " (copy)"
#: what the near-copy check runs after each method
CHECK_STAGES: dict[str, list[str]] = {
    "none": [],
    "dedup": ["dedup"],
    "mmr": ["mmr"],
    "mmr[lambda=0.5]": ["mmr[lambda=0.5]"],
    "mmr[lambda=0.8]": ["mmr[lambda=0.8]"],
}


def measure(sel: Selection, gold: set[str]) -> Row:
    kept = {i.removesuffix(COPY) for i in sel.ids}  # a near-copy of a gold paragraph holds most of it
    return {"recall": len(kept & gold) / max(len(gold), 1), "tokens": float(sel.n_tokens), "k": float(len(sel.ids))}


def copy(sel: Selection) -> Selection:
    return Selection(list(sel.ids), list(sel.scores), list(sel.chunks), sel.method, sel.config, "", sel.n_candidates)


def picked(e: Example, scores: np.ndarray, chosen: list[int]) -> Selection:
    """A selection of pool indices ``chosen``, in that order."""
    ids, chunks = [e.chunks[i].id for i in chosen], [e.chunks[i] for i in chosen]
    return Selection(ids, [float(scores[i]) for i in chosen], chunks, "", {}, "", 0)


def candidates(scores: np.ndarray, k: int, fetch: int | None, kept: list[int]) -> list[int]:
    """The stage's candidates: the top ``fetch`` (default max(2k, 20)) and the kept ones."""
    order = [int(i) for i in np.argsort(-scores, kind="stable")]
    top = order[: fetch if fetch is not None else max(2 * k, 20)]
    return top + [i for i in kept if i not in set(top)]


def raw_picks(e: Example, scores: np.ndarray, vecs: np.ndarray, base: Selection, lam: float) -> Selection:
    index = {c.id: i for i, c in enumerate(e.chunks)}
    kept = [index[c] for c in base.ids]
    cand = candidates(scores, len(kept), None, kept)
    picks, _ = mmr_order(scores[cand], vecs[cand], lam, len(kept))
    return picked(e, scores, [cand[j] for j in picks])


def filtered(e: Example, scores: np.ndarray, vecs: np.ndarray, base: Selection, lam: float, t: float) -> Selection:
    index = {c.id: i for i, c in enumerate(e.chunks)}
    kept = [index[c] for c in base.ids]
    if not kept:
        return copy(base)
    cand = candidates(scores, len(kept), None, kept)
    rel = dict(zip(cand, scaled(scores[cand])))
    picks, values = mmr_order(np.array([rel[i] for i in kept]), vecs[kept], lam, len(kept))
    stay = [kept[j] for n, (j, v) in enumerate(zip(picks, values)) if n == 0 or v >= t]
    stay.sort(key=lambda i: -scores[i])
    return picked(e, scores, stay)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scorer", default="dense")
    args = ap.parse_args()
    examples = load_dataset("hotpotqa-long")
    scorer = get_scorer(args.scorer)
    ranking = Ranking(scorer)
    texts = [c.text for c in examples[0].chunks]
    pool_vecs: dict[str, np.ndarray] = {}
    rows: dict[str, dict[str, dict[str, Row]]] = {m: {} for m in METHODS}
    for e in tqdm(examples, desc="questions"):
        scores = np.asarray(scorer.score(e.question, e.chunks), dtype=np.float64)
        if [c.text for c in e.chunks] != texts or not pool_vecs:
            dense: Any = scorer  # the dense scorer: its cached vectors
            vecs = np.asarray(dense.embed([c.text for c in e.chunks], dense.document_prefix), dtype=np.float64)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            pool_vecs = {"v": vecs}
        vecs = pool_vecs["v"]
        gold = set(e.gold_ids)
        query = Query(e.question, e.chunks, scores)
        for m in METHODS:
            base = ctxsel.select(e.question, e.chunks, m, scores=scores)
            per = rows[m]
            per.setdefault("none", {})[e.id] = measure(base, gold)
            for lam in LAMBDAS:
                for fetch in FETCHES:
                    stage = Mmr(lam=lam, fetch=fetch)
                    sel = stage.apply(copy(base), query, scores, ranking=ranking)
                    per.setdefault("rerank" + stage.spec().removeprefix("mmr"), {})[e.id] = measure(sel, gold)
                per.setdefault(f"raw[lambda={lam}]", {})[e.id] = measure(raw_picks(e, scores, vecs, base, lam), gold)
            for lam in FILTER_LAMBDAS:
                for t in THRESHOLDS:
                    sel = filtered(e, scores, vecs, base, lam, t)
                    per.setdefault(f"filter[lambda={lam},t={t}]", {})[e.id] = measure(sel, gold)
    check = near_copy_check(examples, scorer)
    report(examples, rows, args.scorer, check)


def near_copies(chunks: list[Chunk]) -> list[Chunk]:
    """The pool with a near-copy of every paragraph after it: the paragraph without its last sentence."""
    out: list[Chunk] = []
    for c in chunks:
        sents = split_sentences(c.text)
        text = " ".join(sents[:-1]) if len(sents) > 1 else c.text
        out += [c, Chunk(id=c.id + COPY, text=text, doc_id=c.doc_id, position=c.position)]
    return out


def near_copy_check(examples: list[Example], scorer: Any) -> dict[str, dict[str, Row]]:
    """Each method with and without the stages over the pool with near-copies: where MMR has work."""
    pool = near_copies(list(examples[0].chunks))
    rows: dict[str, dict[str, Row]] = {}
    for e in tqdm(examples, desc="near-copies"):
        assert [c.id for c in e.chunks] == [c.id for c in pool[::2]], "one shared pool"
        scores = np.asarray(scorer.score(e.question, pool), dtype=np.float64)
        for m in METHODS:
            for name, stages in CHECK_STAGES.items():
                sel = ctxsel.select(e.question, pool, m, scores=scores, scorer=scorer, stages=stages)
                rows.setdefault(f"{m} {name}", {})[e.id] = measure(sel, set(e.gold_ids))
    return rows


def summary(per: dict[str, Row], none: dict[str, Row], ids: list[str]) -> dict[str, Any]:
    recall = [per[i]["recall"] for i in ids]
    tokens = [per[i]["tokens"] for i in ids]
    diff = [per[i]["recall"] - none[i]["recall"] for i in ids]
    dtok = [per[i]["tokens"] - none[i]["tokens"] for i in ids]
    return {
        "n": len(ids),
        "recall": float(np.mean(recall)),
        "recall_ci": bootstrap_ci(recall),
        "tokens": float(np.mean(tokens)),
        "tokens_ci": bootstrap_ci(tokens),
        "k": float(np.mean([per[i]["k"] for i in ids])),
        "recall_diff": float(np.mean(diff)),
        "recall_diff_ci": bootstrap_ci(diff),
        "tokens_diff": float(np.mean(dtok)),
        "tokens_diff_ci": bootstrap_ci(dtok),
    }


def report(
    examples: list[Example], rows: dict[str, dict[str, dict[str, Row]]], scorer: str, check: dict[str, dict[str, Row]]
) -> None:
    splits = {
        "train": [e.id for e in split_examples(examples, "train")],
        "test": [e.id for e in split_examples(examples, "test")],
        "all": [e.id for e in examples],
    }
    table = {
        m: {v: {p: summary(per, rows[m]["none"], ids) for p, ids in splits.items()} for v, per in rows[m].items()}
        for m in METHODS
    }
    variants = list(rows[METHODS[0]])

    def train_mean(v: str, key: str) -> float:
        return float(np.mean([table[m][v]["train"][key] for m in METHODS]))

    rerankers = [v for v in variants if v.startswith("rerank")]
    best_rerank = max(rerankers, key=lambda v: (round(train_mean(v, "recall"), 6), v == "rerank"))
    filters = [v for v in variants if v.startswith("filter")]
    lossless = [v for v in filters if train_mean(v, "recall") >= train_mean("none", "recall")]
    best_filter = (
        min(lossless, key=lambda v: train_mean(v, "tokens"))
        if lossless
        else max(filters, key=lambda v: train_mean(v, "recall"))
    )
    best_raw = max((v for v in variants if v.startswith("raw")), key=lambda v: train_mean(v, "recall"))
    # the train-best lambda replaces the default (0.7) only when its paired gain is outside the noise
    gain = [
        float(np.mean([rows[m][best_rerank][i]["recall"] - rows[m]["rerank"][i]["recall"] for m in METHODS]))
        for i in splits["train"]
    ]
    gain_ci = bootstrap_ci(gain)
    chosen = best_rerank if gain_ci is not None and gain_ci[0] > 0 else "rerank"
    if lossless and train_mean(best_filter, "recall") >= train_mean(chosen, "recall"):
        chosen = best_filter
    shown = list(dict.fromkeys(["none", "rerank", chosen, best_rerank, best_raw, best_filter]))
    OUT.mkdir(parents=True, exist_ok=True)
    data = {
        "scorer": scorer,
        "methods": METHODS,
        "chosen": chosen,
        "best_rerank": best_rerank,
        "best_raw": best_raw,
        "best_filter": best_filter,
        "best_rerank_gain_over_default": {"mean": float(np.mean(gain)), "ci": gain_ci},
        "train_mean_recall": {v: train_mean(v, "recall") for v in variants},
        "train_mean_tokens": {v: train_mean(v, "tokens") for v in variants},
        "table": table,
    }
    (OUT / "mmr_hotpotqa.json").write_text(json.dumps(data, indent=1), encoding="utf-8")

    def ci(x: Any, places: int = 3) -> str:
        return "-" if x is None else f"[{x[0]:.{places}f}, {x[1]:.{places}f}]"

    lines = [
        f"# mmr on hotpotqa-long (scorer: {scorer})",
        "",
        "Command: `PYTHONPATH=src OMP_NUM_THREADS=1 python -m experiments.mmr_hotpotqa`.",
        "Each question over the whole 991-paragraph pool; recall: the share of its two gold paragraphs kept;",
        "tokens: cl100k, mean per question; differences are paired, against the same method without a stage.",
        "95% percentile-bootstrap intervals. `rerank`: the `mmr` stage (the method's k picked again from the",
        "ranking's top max(2k, 20), relevance min-max scaled); `raw`: the same with the raw cosine as relevance;",
        "`filter`: kept chunks in MMR order among themselves, dropped below a marginal value t.",
        "Chosen on the training split by the mean recall over the three methods: the best lambda and fetch",
        "replace the default (`rerank`, lambda 0.7) only if their paired train gain's interval excludes 0; a filter",
        f"only if it keeps train recall and saves tokens. Best re-rank on train: `{best_rerank}`, paired gain over",
        f"`rerank` {np.mean(gain):+.4f} {ci(gain_ci, 4)}. **Chosen: `{chosen}`** (best filter: `{best_filter}`,",
        f"best raw: `{best_raw}`).",
        "",
        "## Training split: every variant (mean over adaptive-k, top-k@3, top-k@5)",
        "",
        "| variant | train recall | train tokens |",
        "|---|---|---|",
    ]
    for v in variants:
        lines.append(f"| `{v}` | {train_mean(v, 'recall'):.3f} | {train_mean(v, 'tokens'):.0f} |")
    for part in ("test", "train", "all"):
        lines += [
            "",
            f"## {part} split ({len(splits[part])} questions)",
            "",
            "| method | stage | k | recall | 95% CI | recall diff | 95% CI | tokens | 95% CI | tokens diff | 95% CI |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for m in METHODS:
            for v in shown:
                s = table[m][v][part]
                lines.append(
                    f"| {m} | `{v}` | {s['k']:.2f} | {s['recall']:.3f} | {ci(s['recall_ci'])} | {s['recall_diff']:+.3f} | "
                    f"{ci(s['recall_diff_ci'])} | {s['tokens']:.0f} | {ci(s['tokens_ci'], 0)} | {s['tokens_diff']:+.0f} | "
                    f"{ci(s['tokens_diff_ci'], 0)} |"
                )
    check_table = {
        name: {p: summary(per, check[name.split(" ")[0] + " none"], ids) for p, ids in splits.items()}
        for name, per in check.items()
    }
    data["near_copies"] = check_table
    (OUT / "mmr_hotpotqa.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
    lines += [
        "",
        "## A check, not a choice: the pool with a near-copy of every paragraph (all 100 questions)",
        "",
        "The same questions over 1,982 paragraphs: each of the 991 followed by a near-copy without its last",
        "sentence (a one-sentence paragraph: an exact copy). A gold paragraph counts as kept when it or its",
        "copy is; differences are paired against the method alone.",
        "",
        "| method | stage | k | recall | 95% CI | recall diff | 95% CI | tokens | 95% CI | tokens diff | 95% CI |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, parts in check_table.items():
        m, stage = name.split(" ", 1)
        s = parts["all"]
        lines.append(
            f"| {m} | `{stage}` | {s['k']:.2f} | {s['recall']:.3f} | {ci(s['recall_ci'])} | {s['recall_diff']:+.3f} | "
            f"{ci(s['recall_diff_ci'])} | {s['tokens']:.0f} | {ci(s['tokens_ci'], 0)} | {s['tokens_diff']:+.0f} | "
            f"{ci(s['tokens_diff_ci'], 0)} |"
        )
    (OUT / "mmr_hotpotqa.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
