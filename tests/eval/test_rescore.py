"""``ctxsel eval --rescore``: a finished run's answers scored again by a judge on the fake server,
with nothing selected or read again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxsel.cli.main import main
from ctxsel.eval.rescore import rescore
from ctxsel.eval.runner import evaluate
from ctxsel.judge import LLMJudge
from ctxsel.reader import Reader
from ctxsel.types import Chunk, Example
from tests.support.fake_server import completion_reply
from tests.support.fake_server import fake_client as client

HOLO = {"benchmark": "holobench"}
EXAMPLES = [
    Example(
        "q1",
        "Which airports?",
        [Chunk("a", "Seattle had 3 flights.", position=0), Chunk("b", "Portland had 2.", position=1)],
        gold_ids=["a", "b"],
        answers=["Seattle: 3", "Portland: 2"],
        meta=HOLO,
    ),
    Example(
        "q2",
        "Which cities?",
        [Chunk("c", "Boston is a city.", position=0), Chunk("d", "Austin too.", position=1)],
        gold_ids=["c"],
        answers=["Boston"],
        meta=HOLO,
    ),
]


def labels(*names: str) -> str:
    return json.dumps({"labels": [{"id": i, "label": n} for i, n in enumerate(names)]})


def write_toy(path: Path) -> str:
    """EXAMPLES in the generic JSONL layout (what the CLI reads)."""
    lines = [
        {
            "id": e.id,
            "question": e.question,
            "chunks": [{"id": c.id, "text": c.text} for c in e.chunks],
            "gold_ids": e.gold_ids,
            "answers": e.answers,
            "meta": e.meta,
        }
        for e in EXAMPLES
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return str(path)


def first_run(server, out: Path) -> None:
    """top-k@1 and oracle read without a judge: scored by set overlap."""
    server.push(
        completion_reply("Answer: Seattle: 3"),  # q1 top-k@1
        completion_reply("Answer: Seattle: 3, Portland: 2"),  # q1 oracle
        completion_reply("- **Reasoning:**"),  # q2 top-k@1: an empty answer
        completion_reply("Answer: Boston"),  # q2 oracle
    )
    evaluate(
        EXAMPLES,
        ["top-k@1", "oracle"],
        output_dir=out,
        scorer="bm25",
        dataset_name="toy",
        reader=Reader(client(server), "holobench-qa"),
        progress=False,
    )


def test_rescore_judges_the_stored_answers_and_keeps_the_rest_of_each_row(server, tmp_path):
    out = tmp_path / "run"
    first_run(server, out)
    before = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["score"] for r in before] == [pytest.approx(2 / 3), 1.0, 0.0, 1.0]  # set-overlap F1
    calls = server.calls

    # three judge calls (the empty answer is not sent), each reply scripted
    server.push(
        completion_reply(labels("Exact Match", "No Match")),
        completion_reply(labels("Exact Match", "Partial Match")),
        completion_reply(labels("Exact Match")),
    )
    summary = rescore(EXAMPLES, out, dataset_name="toy", judge=LLMJudge(client(server)), progress=False)
    assert server.calls - calls == 3  # nothing was read again
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 8  # append-only: the rescored rows follow the first ones
    after = {(r["example_id"], r["method"]): r for r in rows[4:]}
    assert after["q1", "top-k@1"]["score"] == 0.5 and after["q1", "top-k@1"]["kind"] == "llm-judge"
    assert after["q1", "oracle"]["score"] == 0.75 and after["q1", "oracle"]["overlap_f1"] == 1.0
    assert after["q2", "top-k@1"]["score"] == 0.0 and "judge_valid" not in after["q2", "top-k@1"]
    for old in before:  # what was measured stays: the answer, the selection, tokens and timings
        new = after[old["example_id"], old["method"]]
        assert {k: new[k] for k in ("answer", "ids", "n_tokens", "wall_s", "tokens_in")} == {
            k: old[k] for k in ("answer", "ids", "n_tokens", "wall_s", "tokens_in")
        }
    assert summary["top-k@1"]["score"] == 0.25 and summary["oracle"]["score"] == 0.875
    assert summary["oracle"]["judge_valid"] == 1.0
    assert json.loads((out / "config.json").read_text())["judge"] == "fake"
    report = json.loads((out / "summary.json").read_text())
    assert report["methods"]["oracle"]["score"] == 0.875
    # the judge checked against set overlap: 3 judged answers, all credited by both, so kappa is undefined
    # and the judge is not trusted; summary.md shows set-overlap F1 in place of its score
    agreement = report["judge_agreement"]
    assert (agreement["n"], agreement["confusion"]["judge_yes_ref_yes"], agreement["kappa"]) == (3, 3, None)
    assert agreement["trusted"] is False
    md = (out / "summary.md").read_text()
    assert "| method | overlap F1 % |" in md and "score %" not in md
    assert "Cohen's kappa undefined: not trusted" in md


def test_rescore_refuses_another_dataset_and_a_run_without_answers(server, tmp_path):
    out = tmp_path / "run"
    first_run(server, out)
    with pytest.raises(ValueError, match="dataset='toy', not 'other'"):
        rescore(EXAMPLES, out, dataset_name="other", progress=False)
    evaluate(EXAMPLES, ["top-k@1"], output_dir=tmp_path / "unread", scorer="bm25", dataset_name="toy", progress=False)
    with pytest.raises(ValueError, match="no answers to rescore"):
        rescore(EXAMPLES, tmp_path / "unread", dataset_name="toy", progress=False)


def test_cli_rescore_of_a_folder_without_a_run_is_a_clear_error(tmp_path, capsys):
    data = write_toy(tmp_path / "toy.jsonl")
    code = main(["eval", "--dataset", data, "--output", str(tmp_path / "none"), "--rescore", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "holds no finished run" in err and "Traceback" not in err


def test_cli_rescore_without_a_judge_rescores_by_set_overlap(server, tmp_path, capsys):
    data = write_toy(tmp_path / "toy.jsonl")
    out = tmp_path / "run"
    server.push(*[completion_reply(a) for a in ("Answer: Seattle: 3", "- **Reasoning:**")])
    args = ["eval", "--dataset", data, "--methods", "top-k@1", "--scorer", "bm25", "--output", str(out)]
    reader = ["--reader", server.base_url, "--reader-model", "fake", "--reader-mode", "completions", "--no-progress"]
    assert main([*args, *reader, "--answer-format", "free"]) == 0
    assert main([*args, "--rescore", "--no-progress"]) == 0
    assert "rescored the answers" in capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["methods"]["top-k@1"]["score"] == pytest.approx(1 / 3)  # (2/3 + 0) / 2
    assert summary["config"]["answer_format"] == "free"


def test_structured_answers_are_scored_by_their_items_and_a_bad_reply_counts_as_wrong(server, tmp_path):
    data = write_toy(tmp_path / "toy.jsonl")
    out = tmp_path / "run"
    server.push(
        # q1 ("Which airports?": a list): one of the two gold pairs, and one item that is not in the gold
        completion_reply(json.dumps({"answer": ["Seattle: 3", "Denver: 4"]})),
        completion_reply("Answer: Boston"),  # q2: not the format; counted invalid, not parsed leniently
    )
    args = ["eval", "--dataset", data, "--methods", "top-k@1", "--scorer", "bm25", "--output", str(out)]
    reader = ["--reader", server.base_url, "--reader-model", "fake", "--reader-mode", "completions", "--no-progress"]
    assert main([*args, *reader]) == 0  # structured is the default for aggregation data
    sent = server.requests[0].json
    assert sent["response_format"]["json_schema"]["name"] == "aggregation-list"
    assert 'whose "answer" is the list of every item' in sent["prompt"]
    rows = {r["example_id"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert rows["q1"]["answer"] == "Seattle: 3\nDenver: 4" and rows["q1"]["structured"]["items"] == [
        "Seattle: 3",
        "Denver: 4",
    ]
    assert rows["q1"]["overlap_f1"] == pytest.approx(0.5) and rows["q1"]["answer_valid"] == 1.0  # P 1/2, R 1/2
    assert rows["q2"]["answer_valid"] == 0.0 and rows["q2"]["score"] == 0.0 and rows["q2"]["answer"] == "Answer: Boston"
    assert "not valid JSON" in rows["q2"]["structured"]["error"] or "JSON" in rows["q2"]["structured"]["error"]
    report = json.loads((out / "summary.json").read_text())
    assert report["config"]["answer_format"] == "structured" and report["config"]["reader"]["template"] == (
        "holobench-json-v2"
    )
    assert report["methods"]["top-k@1"]["answer_valid"] == 0.5 and report["methods"]["top-k@1"]["score"] == 0.25
    assert "valid answers %" in (out / "summary.md").read_text()
    # a rescore reads the stored items again: the same scores
    assert main([*args, "--rescore", "--no-progress"]) == 0
    again = {r["example_id"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines()[2:])}
    assert again["q1"]["overlap_f1"] == pytest.approx(0.5) and again["q2"]["score"] == 0.0
