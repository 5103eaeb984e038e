"""Does the shape a grammar forces change a YES/NO verdict? SAGE's two verdicts on the default reader.

For each question of the hotpotqa-long test split (none of which asks for a
count) and a few counting questions written here, the default local reader
answers SAGE's "is this a counting question?" prompt three ways: free text,
under a grammar for the JSON object ``{"verdict": "YES" | "NO"}``, and under a
grammar for the bare words ``YES | NO`` (what ``ReplyFormat.words`` makes
llama.cpp enforce). The table gives each way's share of YES and its agreement
with the free answer.

The sufficiency verdict (Prompt 2) is asked the same ways, free and under the
bare-word grammar, on SAGE-shaped evidence gathered without an LLM: the
question's own words as keys (SAGE's fallback when the keys are unreadable),
its ``recall_index`` best sentences of the whole pool and the neighbours of
the best 5, each question once with an importance score of 0.2 and once with
0.8 (the prompt's end differs only, so llama.cpp reuses the evidence's
state). Its table gives the share of readable verdicts each way (a free reply
is readable when it holds YES or NO), the goal being >= 98% with
constraints on, and the share of YES.

    OMP_NUM_THREADS=1 python -m experiments.verdict_formats

Writes benchmarks/results/verdict_formats.md and .json.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from benchmarks._common import add_common_args, header_md, loadavg, machine_info, setup_threads, write_report

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
    from ctxsel.errors import ReplyFormatError
    from ctxsel.llm.constrain import ReplyFormat
    from ctxsel.llm.local import LocalLlamaClient
    from ctxsel.llm.prompts import SAGE_IS_COUNTING, SAGE_SUFFICIENT
    from ctxsel.selectors.sage.graph import SentenceGraph
    from ctxsel.selectors.sage.replies import COUNTING_FORMAT, SUFFICIENT_FORMAT, parse_verdict
    from ctxsel.selectors.sage.selector import SAGE

    as_object = ReplyFormat("sage_is_counting_object", COUNTING_FORMAT.schema, lambda o: o["verdict"] == "YES")
    test = split_examples(load_dataset("hotpotqa-long"), "test")
    questions = [(e.question, False) for e in test]
    questions += [(q, True) for q in COUNTING]
    client = LocalLlamaClient(n_ctx=4096, n_threads=args.llm_threads)
    rows = []
    for q, counting in tqdm(questions, desc="verdicts", unit="q"):
        prompt = SAGE_IS_COUNTING.render(query=q)
        free = parse_verdict(client.complete(prompt, max_tokens=8).text)
        obj = as_object.parse(client.complete(prompt, max_tokens=24, reply_format=as_object).text)
        bare = COUNTING_FORMAT.parse(client.complete(prompt, max_tokens=8, reply_format=COUNTING_FORMAT).text)
        rows.append({"question": q, "counting": counting, "free": free, "json_object": obj, "bare_words": bare})
    sage = SAGE(client)  # its default recall_index, n_seeds and neighbor_num
    graph = SentenceGraph(test[0].chunks)  # one pool for every question of hotpotqa-long
    sufficiency = []
    for ex in tqdm(test, desc="sufficiency", unit="q"):
        hits, _ = graph.retrieve([ex.question], sage.recall_index)
        evidence = dict.fromkeys([*hits, *graph.neighbours(hits[: sage.n_seeds], sage.neighbor_num)])
        for importance in ("0.200", "0.800"):
            prompt = SAGE_SUFFICIENT.render(query=ex.question, retrieved=graph.text(evidence), importance=importance)
            free_text = client.complete(prompt, max_tokens=8).text
            bare = client.complete(prompt, max_tokens=8, reply_format=SUFFICIENT_FORMAT).text
            try:
                constrained: bool | None = SUFFICIENT_FORMAT.parse(bare)
            except ReplyFormatError:
                constrained = None
            sufficiency.append(
                {
                    "question": ex.question,
                    "importance": importance,
                    "sentences": len(evidence),
                    "free_raw": free_text,
                    "free": parse_verdict(free_text),
                    "bare_words": constrained,
                }
            )
    info["loadavg_end"] = loadavg()

    def share(key: str, sub: list[dict[str, Any]]) -> str:
        return f"{100 * sum(bool(r[key]) for r in sub) / len(sub):.0f}%"

    def agree(key: str, sub: list[dict[str, Any]]) -> str:
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

    def readable(key: str) -> str:
        n = sum(r[key] is not None for r in sufficiency)
        return f"{100 * n / len(sufficiency):.0f}% ({n} of {len(sufficiency)})"

    lines += [
        "",
        "## Sufficiency (Prompt 2) on SAGE-shaped evidence, hotpotqa-long test split",
        "",
        f"{len(test)} questions x importance 0.2 and 0.8; evidence: the question's words as keys, "
        f"{sage.recall_index} sentences + {sage.neighbor_num} neighbours "
        f"(mean {sum(r['sentences'] for r in sufficiency) / len(sufficiency):.0f} sentences).",
        "",
        "| way | readable | YES | agrees with free |",
        "|---|---:|---:|---:|",
        f"| free | {readable('free')} | {share('free', sufficiency)} | - |",
        f"| bare words (constrained) | {readable('bare_words')} | {share('bare_words', sufficiency)} | "
        f"{agree('bare_words', sufficiency)} |",
    ]
    md = "\n".join(lines) + "\n"
    write_report("verdict_formats", args.out, md, {"machine": info, "rows": rows, "sufficiency": sufficiency})
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
