"""Does the shape a grammar forces change a YES/NO verdict? SAGE's counting check on the default reader.

For each question of the hotpotqa-long test split (none of which asks for a
count) and a few counting questions written here, the default local reader
answers SAGE's "is this a counting question?" prompt three ways: free text,
under a grammar for the JSON object ``{"verdict": "YES" | "NO"}``, and under a
grammar for the bare words ``YES | NO`` (what ``ReplyFormat.words`` makes
llama.cpp enforce). The table gives each way's share of YES and its agreement
with the free answer.

    OMP_NUM_THREADS=1 python benchmarks/verdict_formats.py

Writes benchmarks/results/verdict_formats.md and .json.
"""

from __future__ import annotations

import argparse
import sys

from _common import add_common_args, header_md, loadavg, machine_info, setup_threads, write_report

COUNTING = [
    "How many times does the word dome appear in the handbook?",
    "How many members does the Friends of the Observatory have?",
    "How many street lamps did the town switch to amber lights?",
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--llm-threads", type=int, default=1)
    add_common_args(p)
    args = p.parse_args(argv)
    info = machine_info(setup_threads(args.threads), versions=("llama_cpp",))

    from tqdm.auto import tqdm

    from ctxsel.datasets import load_dataset
    from ctxsel.datasets.splits import split_examples
    from ctxsel.llm.constrain import ReplyFormat
    from ctxsel.llm.local import LocalLlamaClient
    from ctxsel.llm.prompts import SAGE_IS_COUNTING
    from ctxsel.selectors.sage.selector import COUNTING_FORMAT, parse_verdict

    as_object = ReplyFormat("sage_is_counting_object", COUNTING_FORMAT.schema, lambda o: o["verdict"] == "YES")
    questions = [(e.question, False) for e in split_examples(load_dataset("hotpotqa-long"), "test")]
    questions += [(q, True) for q in COUNTING]
    client = LocalLlamaClient(n_ctx=2048, n_threads=args.llm_threads)
    rows = []
    for q, counting in tqdm(questions, desc="verdicts", unit="q"):
        prompt = SAGE_IS_COUNTING.render(query=q)
        free = parse_verdict(client.complete(prompt, max_tokens=8).text)
        obj = as_object.parse(client.complete(prompt, max_tokens=24, reply_format=as_object).text)
        bare = COUNTING_FORMAT.parse(client.complete(prompt, max_tokens=8, reply_format=COUNTING_FORMAT).text)
        rows.append({"question": q, "counting": counting, "free": free, "json_object": obj, "bare_words": bare})
    info["loadavg_end"] = loadavg()

    def share(key: str, sub: list[dict]) -> str:
        return f"{100 * sum(bool(r[key]) for r in sub) / len(sub):.0f}%"

    def agree(key: str, sub: list[dict]) -> str:
        return f"{100 * sum(r[key] == r['free'] for r in sub) / len(sub):.0f}%"

    lines = [
        header_md(
            "YES/NO verdicts under a grammar: JSON object against bare words",
            info,
            [f"Default local reader, greedy, {args.llm_threads} llama.cpp thread(s); SAGE's counting-check prompt."],
        ),
        "| questions | n | YES, free | YES, JSON object | YES, bare words | JSON agrees with free | bare agrees with free |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, sub in (
        ("hotpotqa-long test split (not counting)", [r for r in rows if not r["counting"]]),
        ("counting questions", [r for r in rows if r["counting"]]),
    ):
        lines.append(
            f"| {name} | {len(sub)} | {share('free', sub)} | {share('json_object', sub)} | "
            f"{share('bare_words', sub)} | {agree('json_object', sub)} | {agree('bare_words', sub)} |"
        )
    md = "\n".join(lines) + "\n"
    write_report("verdict_formats", args.out, md, {"machine": info, "rows": rows})
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
