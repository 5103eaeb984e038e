"""Context-Picker's two-stage GRPO on the bundled Qwen2.5-Coder-0.5B-Instruct, before and after.

Three steps, which may run on different machines (the pools need the embedder, GRPO wants a GPU):

    python -m experiments.context_picker_grpo prepare --labels --run runs/picker_grpo   # rows.json
    python -m experiments.context_picker_grpo train --run runs/picker_grpo --stage-seconds 150
    python -m experiments.context_picker_grpo report --run runs/picker_grpo

``prepare`` builds every row as ``ctxsel train context-picker`` does (the candidate pool the picker sees at
inference, B = 1,000 tokens of MiniLM-ranked chunks or ``--picker-tokens``; S_gold as pool
numbers) for the hotpotqa-long training split (80/20 into GRPO and validation questions) and for
the 20 held-out test questions, and writes them to RUN/rows.json: training then needs neither the
embedder nor the data.
``--labels`` takes S_gold from HotpotQA's supporting paragraphs, ``--mined FILE`` from ``ctxsel
mine`` (the paper's Algorithm 1). ``train`` runs :func:`ctxsel.train.context_picker.trainer.train_picker`
(adapters, reward curves) and then the greedy picks, with the stage-2 prompt as at inference, of
the untrained model, the stage-1 and the stage-2 adapter on the test rows (RUN/picks.json), and
each stage's picks on the same pools shuffled (RUN/picks_s1_shuffled.json, picks_s2_shuffled.json).
``report`` writes benchmarks/results/context_picker_grpo.{md,json,png}; ``--eval FOLDER...`` appends
the tables of ``ctxsel eval`` runs with the adapters as methods (the reader's SubEM at the
picker's tokens; command in docs/methods/context-picker.md). ``picks`` is a diagnostic: the greedy
test picks of the base or an adapter on ranked or ``--shuffled`` pools (RUN/picks_LABEL.json);
``relevance`` another: how well each bundled model tells a test pool's gold passages from the rest,
one passage at a time (benchmarks/results/context_picker_relevance.{md,json}); ``votes`` compares
the greedy pick with the majority of sampled picks (``context-picker[samples=N]``) on the validation
or test pools (RUN/votes_*.json, which ``report`` tabulates).

``bundle --run RUN [--stage 2] --into DIR`` makes a trained stage the adapter that ships
(:func:`ctxsel.train.context_picker.bundle.bundle_context_picker`, what ``ctxsel train context-picker --bundle DIR``
runs): it copies it into DIR with its LoRA weights in float16 (a 1.5B adapter on q, k, v and o is
17 MB in float32, over the 10 MB a bundled artefact may take), checks that it converts for its base's
GGUF, and writes a MODEL_CARD.md from the run's train_summary.json, rows.json and picks.json and a
manifest.json with the files' sha256. ``--into src/ctxsel/data/context_picker`` makes it the package's.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._common import RESULTS_DIR, header_md, machine_info, md_table, setup_threads, write_report

POOL_TOKENS = 1000


def prepare(args: argparse.Namespace) -> None:
    from ctxsel.datasets import load_dataset
    from ctxsel.datasets.splits import split_ids
    from ctxsel.scoring import get_scorer
    from ctxsel.train.context_picker.mining import labelled_records, read_mined
    from ctxsel.train.context_picker.rewrite import split_records
    from ctxsel.train.context_picker.rows import picker_rows, split_train_val

    examples = {e.id: e for e in load_dataset("hotpotqa-long")}
    train_ids, test_ids = split_ids(list(examples), 0.8, 0)
    records = labelled_records(examples.values()) if args.labels else read_mined(args.mined)
    scorer = get_scorer("dense", num_threads=args.threads, show_progress=True)
    rows, stats = picker_rows(split_records(records, set(train_ids)), examples, scorer, args.picker_tokens)
    train, val = split_train_val(rows, 0.2, 0)
    # test rows carry every gold chunk (recall is against all of them, in the pool or not)
    test_records = labelled_records(examples[i] for i in test_ids)
    test, test_stats = picker_rows(split_records(test_records, set(test_ids)), examples, scorer, args.picker_tokens)
    for r in test:
        r["n_gold"] = len(examples[r["query_id"]].gold_ids)
    data = {
        "labels": "supporting paragraphs" if args.labels else f"mined: {args.mined}",
        "pool_tokens": args.picker_tokens,
        "rows": stats,
        "test_rows": test_stats,
        "train": train,
        "val": val,
        "test": test,
    }
    args.run.mkdir(parents=True, exist_ok=True)
    (args.run / "rows.json").write_text(json.dumps(data) + "\n", encoding="utf-8")
    print(f"{len(train)} training, {len(val)} validation, {len(test)} test rows -> {args.run / 'rows.json'}")


def pick_stats(replies: list[str], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Valid share, mean number named, gold recall (against every gold chunk) and precision of replies."""
    from ctxsel.errors import InvalidReply
    from ctxsel.selectors.context_picker.prompt import parse_reply

    valid = 0
    named: list[float] = []
    recall: list[float] = []
    precision: list[float] = []
    picks: list[list[int] | None] = []
    for text, r in zip(replies, rows):
        try:
            ids = parse_reply(text, len(r["passages"])).ids
        except InvalidReply:
            picks.append(None)
            continue
        valid += 1
        hit = len(set(ids) & set(r["gold"]))
        picks.append(ids)
        named.append(len(ids))
        recall.append(hit / r["n_gold"])
        precision.append(hit / len(ids))
    n = len(rows)

    def mean(xs: list[float]) -> float | None:
        return sum(xs) / len(xs) if xs else None

    return {
        "valid": valid / n,
        "named": mean(named),
        # an invalid reply names nothing: it counts 0 recall here (at inference the picker retries)
        "recall": sum(recall) / n,
        "precision": mean(precision),
        "picks": picks,
        "replies": replies,
    }


def train(args: argparse.Namespace) -> None:
    import torch

    from ctxsel.train.context_picker.config import PickerTrainConfig
    from ctxsel.train.context_picker.replies import greedy_replies
    from ctxsel.train.context_picker.trainer import train_picker

    data = json.loads((args.run / "rows.json").read_text(encoding="utf-8"))
    cfg = PickerTrainConfig(
        base=args.base,
        stage1_max_steps=args.stage1_max_steps,
        stage2_steps=args.stage2_steps,
        prompts_per_step=args.prompts_per_step,
        eval_every=args.eval_every,
        stage_seconds=args.stage_seconds,
        stage2_seconds=args.stage2_seconds,
        beta=args.kl_beta,
        lr=args.lr,
        n_tokens=data["pool_tokens"],
        threads=args.threads,
        init_adapter=str(args.init_adapter or ""),
        shuffle_candidates=args.shuffle_candidates,
        share_prompt=not args.no_share_prompt,
    )
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    t0 = time.perf_counter()
    info = {"labels": data["labels"], "device": device, "command": " ".join(["python", *sys.argv])}
    res = train_picker(data["train"], data["val"], args.run, cfg, info)
    t_train = time.perf_counter() - t0
    model, tok, test = res["model"], res["tokenizer"], data["test"]
    chat = res["summary"]["chat"]
    t0 = time.perf_counter()

    def replies_to(rows: list[dict[str, Any]]) -> list[str]:
        return greedy_replies(model, tok, rows, 2, cfg.max_completion_length, chat, batch_size=len(rows))

    with model.disable_adapter():
        picks = {"untrained": pick_stats(replies_to(test), test)}
    shuffled = shuffled_rows(test, seed=0)  # the pools in `picks --shuffled`'s order
    for stage in ("stage2", "stage1"):  # the model in hand is the last stage trained
        if stage in res["curves"]:
            if stage != list(res["curves"])[-1]:
                model.load_adapter(str(args.run / stage / "adapter"), adapter_name=stage)
                model.set_adapter(stage)
            picks[stage] = pick_stats(replies_to(test), test)
            t1 = time.perf_counter()  # the shuffled picks too, while the model is on this machine's GPU
            got = replies_to(shuffled)
            diagnostic_picks(
                args.run, f"s{stage[-1]}_shuffled", f"{stage}, shuffled", shuffled, got, time.perf_counter() - t1
            )
    out = {"device": device, "train_seconds": t_train, "pick_seconds": time.perf_counter() - t0, "picks": picks}
    (args.run / "picks.json").write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    for k, v in picks.items():
        print(f"{k}: valid {v['valid']:.0%}, named {v['named']}, recall {v['recall']:.1%}")


def shuffled_rows(rows: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """Each pool in a seeded random order, gold renumbered (``picks --shuffled``)."""
    import random

    from ctxsel.train.context_picker.rows import shuffled_row

    rng = random.Random(seed)
    return [shuffled_row(r, rng) for r in rows]


def diagnostic_picks(
    run: Path, label: str, name: str, rows: list[dict[str, Any]], replies: list[str], seconds: float
) -> None:
    """Write RUN/picks_LABEL.json: a picker's greedy test picks beside the recall of naming as many at random."""
    stats = pick_stats(replies, rows)
    # naming m of a pool's N candidates at random finds m/N of its gold on average
    chance = sum(len(p) / len(r["passages"]) if p else 0.0 for p, r in zip(stats["picks"], rows)) / len(rows)
    out = {"picker": name, "seconds": seconds, "chance_recall": chance, **stats}
    path = run / f"picks_{label}.json"
    path.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(
        f"{name}: valid {stats['valid']:.0%}, named {stats['named'] or 0:.2f}, recall "
        f"{stats['recall']:.1%} (chance at these counts {chance:.1%}), precision {stats['precision'] or 0:.1%} -> {path}"
    )


def picks(args: argparse.Namespace) -> None:
    """Greedy picks of the base model, or of ``--adapter``, on the test rows: ranked as at inference,
    or ``--shuffled`` (each pool in a seeded random order), to see how much of a picker's recall
    comes from reading the passages and how much from the retriever's order."""
    import torch

    from ctxsel.llm.hf_client import is_chat_base, load_base
    from ctxsel.train.context_picker.replies import greedy_replies, newline_ends_replies

    rows = json.loads((args.run / "rows.json").read_text(encoding="utf-8"))["test"]
    if args.shuffled:
        rows = shuffled_rows(rows, args.seed)
    model, tok = load_base(args.base)
    if torch.cuda.is_available():  # load_base reads onto the CPU; the GPU machine picks 20 pools in seconds
        model.to("cuda")
    if args.adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(args.adapter / "adapter"))
    newline_ends_replies(model, tok)
    t0 = time.perf_counter()
    replies = greedy_replies(model, tok, rows, 2, 160, is_chat_base(args.base, tok), batch_size=1, progress=True)
    name = f"{args.adapter or args.base}, {'shuffled' if args.shuffled else 'ranked'}"
    diagnostic_picks(args.run, args.label, name, rows, replies, time.perf_counter() - t0)


def vote_recall(samples: list[list[list[int]]], rows: list[dict[str, Any]], floor: int = 0) -> tuple[float, float]:
    """Mean size and gold recall of the majority of each row's sampled picks (0-based), topped up to
    ``floor`` by votes, then rank, as ``context-picker[samples=N,min_k=FLOOR]`` selects."""
    from ctxsel.selectors.context_picker.picker import top_up, vote

    named, recall = [], []
    for picks, r in zip(samples, rows):
        kept = top_up(*vote(picks, len(r["passages"])), floor)
        named.append(len(kept))
        recall.append(len(set(kept) & {i - 1 for i in r["gold"]}) / (r.get("n_gold") or len(r["gold"])))
    return sum(named) / len(named), sum(recall) / len(recall)


def votes(args: argparse.Namespace) -> None:
    """The greedy pick and ``--samples`` sampled picks of ``--adapter`` or of the untrained 1.5B
    (llama.cpp, under the grammar, as ``ctxsel eval`` runs it) on the ``--rows`` pools, and the recall
    of four rules: greedy, greedy with the min_k=3 floor, the majority of the samples, and the majority
    with the floor (``context-picker[samples=N]``). Written to RUN/votes_ROWS.json (``_untrained``
    without an adapter, ``_seedS`` for ``--seed S``). Recall counts every gold chunk on test rows and
    the gold inside the pool on validation rows, whose rows carry no count of the rest."""
    from tqdm.auto import tqdm

    from ctxsel.errors import ReplyFormatError
    from ctxsel.llm.local import LocalLlamaClient
    from ctxsel.llm.lora_gguf import llama_adapter_client
    from ctxsel.selectors.context_picker.picker import ContextPicker, PickerDetails
    from ctxsel.selectors.context_picker.prompt import picker_format
    from ctxsel.types import Chunk

    rows = json.loads((args.run / "rows.json").read_text(encoding="utf-8"))[args.rows]
    client = (
        llama_adapter_client(args.adapter, n_threads=args.threads)
        if args.adapter
        else LocalLlamaClient("qwen-1.5b", n_threads=args.threads)  # the untrained picker: the bundled reader
    )
    n_tokens, max_candidates = 10**9, 10**6  # the rows are the pools, in rank order
    greedy = ContextPicker(client, n_tokens=n_tokens, max_candidates=max_candidates)
    sampler = ContextPicker(
        client,
        samples=args.samples,
        temperature=args.temperature,
        seed=args.seed,
        n_tokens=n_tokens,
        max_candidates=max_candidates,
    )
    out: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for r in tqdm(rows, desc=f"votes {args.rows}", unit="q"):
        chunks = [Chunk(str(i), text, position=i) for i, text in enumerate(r["passages"], 1)]
        scores = [-float(i) for i in range(len(chunks))]
        g = greedy.select(r["question"], chunks, scores)
        v = sampler.select(r["question"], chunks, scores)
        samples = []
        for text in v.details_as(PickerDetails).replies:
            try:
                samples.append([i - 1 for i in picker_format(len(chunks)).parse(text).ids])
            except ReplyFormatError:  # an invalid sample does not vote
                continue
        out.append({"query_id": r["query_id"], "greedy": [int(i) - 1 for i in g.ids], "samples": samples})
    seconds = time.perf_counter() - t0

    greedy_picks = [[o["greedy"]] for o in out]  # one pick: itself, the floor topped up by rank
    sampled = [o["samples"] for o in out]
    rules = {
        "greedy": vote_recall(greedy_picks, rows),
        "greedy, min_k=3": vote_recall(greedy_picks, rows, 3),
        "vote": vote_recall(sampled, rows),
        "vote, min_k=3": vote_recall(sampled, rows, 3),
    }
    data = {
        "adapter": str(args.adapter) if args.adapter else None,
        "rows": args.rows,
        "samples": args.samples,
        "temperature": args.temperature,
        "seed": args.seed,
        "seconds": seconds,
        "rules": {k: {"named": named, "recall": recall} for k, (named, recall) in rules.items()},
        "picks": out,
    }
    label = ("" if args.adapter else "_untrained") + (f"_seed{args.seed}" if args.seed else "")
    path = args.run / f"votes_{args.rows}{label}.json"
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    for k, v in data["rules"].items():
        print(f"{k}: named {v['named']:.2f}, recall {v['recall']:.1%}")
    print(f"{seconds:.0f} s -> {path}")


#: One passage at a time, so the score cannot come from the pool's order.
RELEVANCE_PROMPT = (
    "Question: {question}\n\nPassage: {passage}\n\nIs this passage needed to answer the question, alone or "
    "together with other passages? Reply YES or NO."
)


def yes_share(client: Any, question: str, passage: str, yes: list[int], no: list[int]) -> float:
    """P(YES) / (P(YES) + P(NO)) for the first token of a llama.cpp chat model's reply to
    :data:`RELEVANCE_PROMPT`; the prefix the context already holds (the question) is not recomputed."""
    import numpy as np

    llm = client._llm  # the first reply token's distribution: llama.cpp's logits, not a sampled token
    tokens = client._tokens(client.render(RELEVANCE_PROMPT.format(question=question, passage=passage))[0])
    held, n = llm.input_ids[: llm.n_tokens], 0
    while n < min(len(held), len(tokens) - 1) and held[n] == tokens[n]:
        n += 1
    llm.n_tokens = n
    llm.eval(tokens[n:])
    logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)).astype(np.float64)
    p = np.exp(logits - logits.max())
    return float(p[yes].sum() / (p[yes].sum() + p[no].sum()))


def relevance_scores(run: Path, model: str, threads: int) -> dict[str, Any]:
    """Every candidate of every test pool scored alone by ``model`` (:func:`yes_share`), with the gold
    recall of its top 1-3 (ties in the retriever's order); RUN/relevance_MODEL.json, read back if there."""
    path = run / f"relevance_{model}.json"
    if path.is_file():
        return dict(json.loads(path.read_text(encoding="utf-8")))
    from tqdm.auto import tqdm

    from ctxsel.llm.local import LocalLlamaClient

    rows = json.loads((run / "rows.json").read_text(encoding="utf-8"))["test"]
    client = LocalLlamaClient(model, n_ctx=4096, n_threads=threads)

    def first_tokens(variants: tuple[str, ...]) -> list[int]:
        return sorted({client._llm.tokenize(v.encode(), add_bos=False, special=False)[0] for v in variants})

    yes, no = first_tokens(("YES", "Yes", "yes")), first_tokens(("NO", "No", "no"))
    t0 = time.perf_counter()
    scores = [
        [yes_share(client, r["question"], passage, yes, no) for passage in r["passages"]]
        for r in tqdm(rows, desc=f"relevance {model}", unit="q")
    ]
    out: dict[str, Any] = {"model": model, "seconds": time.perf_counter() - t0, "threads": threads}
    for k in (1, 2, 3):
        top = [sorted(range(1, len(s) + 1), key=lambda i, s=s: (-s[i - 1], i))[:k] for s in scores]  # type: ignore[misc]
        out[f"recall@{k}"] = sum(len(set(t) & set(r["gold"])) / r["n_gold"] for t, r in zip(top, rows)) / len(rows)
    gold = [s[i - 1] for s, r in zip(scores, rows) for i in r["gold"]]
    other = [x for s, r in zip(scores, rows) for i, x in enumerate(s, 1) if i not in r["gold"]]
    # AUC: the chance that a gold passage scores above another passage of any pool (ties count half)
    out["auc"] = sum((g > o) + 0.5 * (g == o) for g in gold for o in other) / (len(gold) * len(other))
    out["mean_yes_gold"], out["mean_yes_other"] = sum(gold) / len(gold), sum(other) / len(other)
    out["scores"] = scores
    path.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return out


def relevance(args: argparse.Namespace) -> None:
    """Can a bundled model tell the gold passages of a test pool from the rest, one passage at a time?

    The model's top 1-3 by :func:`relevance_scores` is the reading a picker built on it can start
    from; the retriever's own top 1-3 (the pool's order) and naming as many at random are the floors
    it has to beat. Writes benchmarks/results/context_picker_relevance.{md,json}.
    """
    data = json.loads((args.run / "rows.json").read_text(encoding="utf-8"))
    rows = data["test"]
    results = [relevance_scores(args.run, m, args.threads) for m in args.models]
    chance = {
        k: sum(k * len(r["gold"]) / len(r["passages"]) / r["n_gold"] for r in rows) / len(rows) for k in (1, 2, 3)
    }
    table = md_table(
        ["ranked by", "recall@1 %", "recall@2 %", "recall@3 %", "AUC", "P(YES) gold / other", "seconds"],
        [
            [
                f"{r['model']}, one passage at a time",
                *(_fmt(r[f"recall@{k}"]) for k in (1, 2, 3)),
                f"{r['auc']:.3f}",
                f"{r['mean_yes_gold']:.3f} / {r['mean_yes_other']:.3f}",
                f"{r['seconds']:.0f}",
            ]
            for r in results
        ]
        + [["the retriever (the pool's order)", *(_fmt(top_k_recall(rows, k)) for k in (1, 2, 3)), "", "", ""]]
        + [["at random", *(_fmt(chance[k]) for k in (1, 2, 3)), "0.500", "", ""]],
    )
    info = machine_info(args.thread_info, ("llama_cpp",))
    n_cand = sum(len(r["passages"]) for r in rows)
    notes = [
        f"{len(rows)} hotpotqa-long test pools of {n_cand / len(rows):.1f} candidates (B = "
        f"{data['pool_tokens']} tokens, {args.run}); "
        f"gold recall against every gold paragraph, in the pool or not. llama.cpp, {args.threads} threads.",
        f"Prompt (the model's chat template; score P(YES) / (P(YES) + P(NO)) of its first reply token): "
        f"`{RELEVANCE_PROMPT!r}`",
    ]
    md = header_md("Can the bundled models read a Context-Picker pool? One passage at a time", info, notes)
    command = f"python -m experiments.context_picker_grpo relevance --run {args.run} --models {' '.join(args.models)}"
    md += f"\n{table}\n\nCommand: `{command} --threads {args.threads}`\n"
    write_report(
        "context_picker_relevance",
        args.out,
        md,
        {"results": [{k: v for k, v in r.items() if k != "scores"} for r in results], "chance": chance},
    )
    print(md)


def ranked_prefix_share(picks: list[list[int] | None]) -> float | None:
    """Share of valid picks that are the first m candidates of the ranked pool (1..m): a picker
    that names these reads the retriever's order, not the passages."""
    valid = [p for p in picks if p is not None]
    return sum(sorted(p) == list(range(1, len(p) + 1)) for p in valid) / len(valid) if valid else None


def prefix_hits(row: dict[str, Any], m: int) -> int:
    """Gold chunks among the first m candidates of a ranked pool."""
    return len(set(row["gold"]) & set(range(1, m + 1)))


def same_count_recall(picks: list[list[int] | None], rows: list[dict[str, Any]]) -> float:
    """Gold recall of the retriever's first m candidates, m being what the picker named for each
    question (0 for an invalid reply): the picker beats the pool's order only where it is above this."""
    return float(sum(prefix_hits(r, len(p or [])) / r["n_gold"] for p, r in zip(picks, rows)) / len(rows))


def top_k_recall(rows: list[dict[str, Any]], k: int, precision: bool = False) -> float:
    """Gold recall (against every gold chunk), or precision, of the first k candidates of each ranked pool."""
    return sum(prefix_hits(r, k) / (k if precision else r["n_gold"]) for r in rows) / len(rows)


def val_span(val: list[dict[str, Any]]) -> str:
    """The validation reward at a stage's first and last check (runs before the end-of-stage check
    may have only the first)."""
    if not val:
        return "-"
    if len(val) == 1:
        return f"{_fmt(val[0]['reward'], False)} (step {val[0]['step']} only)"
    return f"{_fmt(val[0]['reward'], False)} -> {_fmt(val[-1]['reward'], False)}"


def _fmt(x: float | None, pct: bool = True) -> str:
    if x is None:
        return "-"
    return f"{100 * x:.1f}" if pct else f"{x:.2f}"


def report(args: argparse.Namespace) -> None:
    run = args.run
    rows = json.loads((run / "rows.json").read_text(encoding="utf-8"))
    summary = json.loads((run / "train_summary.json").read_text(encoding="utf-8"))
    curves = json.loads((run / "reward_curves.json").read_text(encoding="utf-8"))
    picks = json.loads((run / "picks.json").read_text(encoding="utf-8"))
    test = rows["test"]
    top_rows = []
    for k in (1, 2, 3):
        recall = _fmt(top_k_recall(test, k))  # also its recall "at the same counts"
        top_rows.append(
            [
                f"top-{k} of the same ranked pools",
                "-",
                f"{k:.2f}",
                recall,
                recall,
                _fmt(top_k_recall(test, k, precision=True)),
                "100.0",
            ]
        )
    table = md_table(
        [
            "picker (stage-2 prompt, greedy)",
            "valid %",
            "named",
            "gold recall %",
            "top-m recall at the same counts %",
            "precision %",
            "ranked prefix %",
        ],
        [
            [
                k,
                _fmt(v["valid"]),
                _fmt(v["named"], False),
                _fmt(v["recall"]),
                _fmt(same_count_recall(v["picks"], test)),
                _fmt(v["precision"]),
                _fmt(ranked_prefix_share(v["picks"])),
            ]
            for k, v in ((k, picks["picks"][k]) for k in ("untrained", "stage1", "stage2") if k in picks["picks"])
        ]
        + top_rows,
    )
    # the `picks` diagnostic's runs (RUN/picks_LABEL.json): ranked or shuffled pools, base or adapter
    diag = [json.loads(f.read_text(encoding="utf-8")) for f in sorted(run.glob("picks_*.json"))]
    diagnostics = md_table(
        ["picker, pools", "valid %", "named", "gold recall %", "naming as many at random %", "precision %"],
        [
            [
                d["picker"],
                _fmt(d["valid"]),
                _fmt(d["named"], False),
                _fmt(d["recall"]),
                _fmt(d["chance_recall"]),
                _fmt(d["precision"]),
            ]
            for d in diag
        ],
    )
    # the `votes` runs (RUN/votes_ROWS*.json): greedy against the majority of sampled picks, with and without
    # the floor; each (picker, pools) once for greedy, once per seed set, and once for all its seed sets pooled
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for f in sorted(run.glob("votes_*.json")):
        v = json.loads(f.read_text(encoding="utf-8"))
        groups.setdefault((v["adapter"] or "untrained 1.5B", v["rows"]), []).append(v)
    vote_rows: list[list[str]] = []
    for (picker, split), runs in groups.items():
        runs.sort(key=lambda v: v.get("seed", 0))
        pools = rows[split]
        label = f"{split} ({len(pools)})"
        vote_rows += [
            [picker, label, rule, _fmt(runs[0]["rules"][rule]["named"], False), _fmt(runs[0]["rules"][rule]["recall"])]
            for rule in ("greedy", "greedy, min_k=3")
        ]
        for v in runs:
            for rule in ("vote", "vote, min_k=3"):
                r = v["rules"][rule]
                desc = f"{rule}: {v['samples']} samples at T = {v['temperature']}, seeds {v.get('seed', 0)}.."
                vote_rows.append([picker, label, desc, _fmt(r["named"], False), _fmt(r["recall"])])
        if len(runs) > 1:
            pooled = [[pick for v in runs for pick in v["picks"][i]["samples"]] for i in range(len(pools))]
            for floor in (False, True):
                v_named, v_recall = vote_recall(pooled, pools, 3 if floor else 0)
                n_samples = sum(v["samples"] for v in runs)
                desc = f"vote{', min_k=3' if floor else ''}: the {n_samples} samples above together"
                vote_rows.append([picker, label, desc, _fmt(v_named, False), _fmt(v_recall)])
    votes_table = md_table(["picker", "pools", "rule", "named", "gold recall %"], vote_rows)
    stage_rows = []
    for stage in (k for k in ("stage1", "stage2") if k in curves):
        c = curves[stage]
        secs = [s["seconds"] for s in c["seconds"]]
        tr = [p["reward"] for p in c["train"]]
        stage_rows.append(
            [
                stage,
                str(c["steps"]),
                f"{sum(secs) / max(1, len(secs)):.1f}",
                _fmt(tr[0] if tr else None, False) + " -> " + _fmt(tr[-1] if tr else None, False),
                val_span(c["val"]),
                c.get("stopped") or "step limit",
            ]
        )
    stages = md_table(
        ["stage", "steps", "s/step", "train reward first -> last", "validation reward first -> last", "stopped"],
        stage_rows,
    )
    info = machine_info(args.thread_info, ("torch", "transformers", "trl", "peft"))
    notes = [
        f"GRPO ran on: {picks['device']} ({picks['train_seconds']:.0f} s training, validation included; "
        f"{picks['pick_seconds']:.0f} s for the test picks); this header describes the machine that wrote the report.",
        f"S_gold: {rows['labels']}; pools of {rows['pool_tokens']} tokens; rows {rows['rows']}; "
        f"{len(rows['train'])} training, {len(rows['val'])} validation and {len(rows['test'])} test rows.",
    ]
    md = (
        header_md(f"Context-Picker GRPO on the bundled {summary['config']['base']}", info, notes)
        + "\n## Held-out picks (20 hotpotqa-long test questions)\n\n"
        + table
        + (
            "\n\n## Diagnostic picks (`picks`): the same test questions, pools ranked or in a seeded random order\n\n"
            + diagnostics
            if diag
            else ""
        )
        + (
            "\n\n## Votes (`votes`): the greedy pick against the majority of sampled picks, llama.cpp under the "
            "grammar (validation recall: the gold inside the pool)\n\n" + votes_table
            if groups
            else ""
        )
        + "\n\n## GRPO stages\n\n"
        + stages
        + f"\n\n![reward curves]({args.name}.png)\n\nCommand: `{summary.get('command') or ''}`\n"
    )
    for folder in args.eval:  # the reader's answers with the trained adapters as methods (`ctxsel eval`)
        md += "\n## Read by the bundled reader (`ctxsel eval`)\n\n" + (folder / "summary.md").read_text(
            encoding="utf-8"
        )
    data = {
        "summary": summary,
        "picks": {k: {kk: vv for kk, vv in v.items() if kk != "replies"} for k, v in picks["picks"].items()},
        "device": picks["device"],
        "train_seconds": picks["train_seconds"],
        "rows": rows["rows"],
        "votes": [{k: v for k, v in d.items() if k != "picks"} for runs in groups.values() for d in runs],
    }
    write_report(args.name, args.out, md, data)
    shutil.copyfile(run / "reward_curves.png", args.out / f"{args.name}.png")
    shutil.copyfile(run / "reward_curves.json", args.out / f"{args.name}_curve.json")
    print(f"wrote {args.out / (args.name + '.md')}")


# -- the bundled adapter ---------------------------------------------------------------------------------


def bundle(args: argparse.Namespace) -> None:
    """RUN/stageN made the adapter that ships, in --into (``bundle_context_picker``),
    with the card written from this script's RUN/rows.json and picks.json as well as train_summary.json."""
    import re

    from ctxsel.train.context_picker.bundle import bundle_context_picker, picker_card

    run = args.run
    stage = run / f"stage{args.stage}"
    summary = json.loads((run / "train_summary.json").read_text(encoding="utf-8"))
    rows = json.loads((run / "rows.json").read_text(encoding="utf-8"))
    picks_file = run / "picks.json"
    picks = json.loads(picks_file.read_text(encoding="utf-8")) if picks_file.is_file() else {}
    command = f"python -m experiments.context_picker_grpo bundle --run {run} --stage {args.stage} --into {args.into}"
    commands = [
        f"python -m experiments.context_picker_grpo prepare --labels --picker-tokens {rows['pool_tokens']} --run RUN",
        re.sub(r"^python \S*context_picker_grpo\.py", "python -m experiments.context_picker_grpo", summary["command"]),
        command,
    ]
    data = {"labels": rows["labels"], "pool_tokens": rows["pool_tokens"], "n_test": len(rows["test"])}

    def card(dest: Path, sums: Any) -> str:
        return picker_card(dest, sums, summary, args.stage, commands, data=data, picks=picks)

    sums = bundle_context_picker(stage, args.into, made_by=command, card=card)
    print(f"{stage} -> {args.into}; sha256 {sums['adapter/adapter_model.safetensors'][:16]}; manifest.json")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="step", required=True)
    for name in ("prepare", "train", "picks", "votes", "relevance", "report", "bundle"):
        s = sub.add_parser(name)
        s.add_argument("--run", type=Path, default=Path("runs/picker_grpo"))
        s.add_argument("--threads", type=int, default=1)
        s.add_argument("--out", type=Path, default=RESULTS_DIR)
    pp = sub.choices["prepare"]
    src = pp.add_mutually_exclusive_group(required=True)
    src.add_argument("--labels", action="store_true", help="S_gold = HotpotQA's supporting paragraphs")
    src.add_argument("--mined", type=Path, help="S_gold from `ctxsel mine` (Algorithm 1)")
    pp.add_argument("--picker-tokens", type=int, default=POOL_TOKENS, help="candidate pool budget B in tokens")
    rp = sub.choices["report"]
    rp.add_argument("--eval", type=Path, nargs="*", default=[], help="`ctxsel eval` folders whose summaries to append")
    rp.add_argument("--name", default="context_picker_grpo", help="benchmarks/results/NAME.{md,json,png}")
    tp = sub.choices["train"]
    tp.add_argument("--base", default="qwen-0.5b")
    tp.add_argument("--stage1-max-steps", type=int, default=300)
    tp.add_argument("--stage2-steps", type=int, default=150)
    tp.add_argument("--prompts-per-step", type=int, default=2)
    tp.add_argument("--eval-every", type=int, default=10)
    tp.add_argument("--stage-seconds", type=float, default=0.0)
    tp.add_argument("--stage2-seconds", type=float, default=-1.0, help="stage 2's limit (negative: --stage-seconds)")
    tp.add_argument("--kl-beta", type=float, default=0.0, help="KL weight to the untrained model (default 0)")
    tp.add_argument("--lr", type=float, default=1e-4)
    tp.add_argument("--init-adapter", type=Path, help="go on training this stage folder (a previous run's)")
    tp.add_argument("--shuffle-candidates", type=float, default=0.0, help="share of training pools shown shuffled")
    tp.add_argument("--no-share-prompt", action="store_true", help="read every sample's prompt separately (TRL's way)")
    kp = sub.choices["picks"]
    kp.add_argument("--base", default="qwen-0.5b")
    kp.add_argument("--adapter", type=Path, help="a stage folder (RUN/stage2); default: the base untrained")
    kp.add_argument("--shuffled", action="store_true", help="each test pool in a random order (gold renumbered)")
    kp.add_argument("--seed", type=int, default=0)
    kp.add_argument("--label", required=True, help="writes RUN/picks_LABEL.json")
    vp = sub.choices["votes"]
    vp.add_argument("--adapter", type=Path, help="a stage folder (RUN/stage2); default: the untrained 1.5B")
    vp.add_argument("--rows", choices=("val", "test"), default="val")
    vp.add_argument("--samples", type=int, default=8)
    vp.add_argument("--temperature", type=float, default=1.0)
    vp.add_argument("--seed", type=int, default=0, help="the samples' seeds are SEED..SEED+N-1")
    sub.choices["relevance"].add_argument(
        "--models", nargs="+", default=["qwen-0.5b", "qwen-1.5b"], help="bundled models"
    )
    bp = sub.choices["bundle"]
    bp.add_argument("--stage", type=int, choices=(1, 2), default=2, help="which stage's adapter ships")
    bp.add_argument(
        "--into",
        type=Path,
        required=True,
        help="the folder to write (the package's own: src/ctxsel/data/context_picker, given by hand)",
    )
    args = p.parse_args(argv)
    args.thread_info = setup_threads(args.threads)
    steps = (prepare, train, picks, votes, relevance, report, bundle)
    {step.__name__: step for step in steps}[args.step](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
