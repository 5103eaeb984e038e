"""experiments/run_summary.py: a run log's per-example numbers without its texts, read back as the same numbers,
so that every table built from them (summaries, paired comparisons) is the table of the log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.run_summary import SUMMARY, compact, from_csv, main, read_rows, to_csv

ROWS: list[dict[str, object]] = [
    {
        "example_id": "q0",
        "method": "sage",
        "k": 3,
        "n_tokens": 134,
        "reduction": 99.89786040413742,
        "recall": 0.5,
        "ids": ["Ed Wood", "Ed Wood (film)"],
        "explanation": 'picked 2, with a comma, and "quotes"',
        "answer": "No, he was not",
        "trace": [{"step": "reply", "text": "{...}"}],
        "extra_metrics": {"unreadable_verdicts": 0.0},
        "kind": "subem",
        "subem": 0.0,
        "em": 0.0,
        "f1": 0.1234567890123456789,
        "wall_s": 385.7,
        "route": "explore",
        "select_ms": None,
    },
    {"example_id": "q1", "method": "adaptive-k", "recall": 1.0, "subem": 1.0, "route": None, "answer": "Yes"},
    {"example_id": "q2", "method": "adaptive-k", "error": "LLMContextLengthError: 9,000 > 8,192"},
]


def test_the_summary_keeps_every_number_and_no_text() -> None:
    back = from_csv(to_csv(ROWS))
    assert back[0] == {
        "example_id": "q0",
        "method": "sage",
        "k": 3,
        "n_tokens": 134,
        "reduction": 99.89786040413742,
        "recall": 0.5,
        "extra_metrics": {"unreadable_verdicts": 0.0},
        "kind": "subem",
        "subem": 0.0,
        "em": 0.0,
        "f1": 0.1234567890123456789,
        "wall_s": 385.7,
        "route": "explore",
        "select_ms": None,
        "answer_words": 4,
    }
    assert back[1] == {"example_id": "q1", "method": "adaptive-k", "recall": 1.0, "subem": 1.0, "route": None} | {
        "answer_words": 1
    }
    assert back[1] == compact(ROWS[1])
    assert back[2] == {"example_id": "q2", "method": "adaptive-k", "error": "LLMContextLengthError: 9,000 > 8,192"}
    text = to_csv(ROWS)
    for word in ("Ed Wood", "picked", "No, he", "reply", "answer,", "ids", "trace", "explanation"):
        assert word not in text, word
    assert to_csv(back) == text  # a summary rewritten from itself is the same file


def test_a_table_of_the_summary_is_the_table_of_the_log() -> None:
    from ctxsel.eval.report import summarize
    from ctxsel.eval.stats import compare

    rows = [
        {"example_id": f"q{i}", "method": m, "subem": float((i * 7 + j) % 3 == 0), "f1": ((i * 13 + j) % 10) / 9.0}
        | {"n_tokens": 100 + i * j, "recall": i / 20, "answer": "x " * i, "ids": [str(i)]}
        for i in range(20)
        for j, m in enumerate(("adaptive-k", "full"))
    ]
    back = from_csv(to_csv(rows))
    assert summarize(back, ["adaptive-k", "full"]) == summarize(rows, ["adaptive-k", "full"])
    assert compare(back, ["adaptive-k", "full"], "full") == compare(rows, ["adaptive-k", "full"], "full")


def test_a_folder_is_read_from_its_log_else_its_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    assert read_rows(run) == []  # not started yet
    later = dict(ROWS[1], subem=0.0)  # a rescore appends: the last row per (example, method) counts
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [*ROWS, later]))
    assert main([str(run)]) == 0 and capsys.readouterr().out == f"wrote {run / SUMMARY}\n"
    assert [r["subem"] for r in read_rows(run) if r["example_id"] == "q1"] == [0.0]  # from the log
    (run / "results.jsonl").unlink()
    assert [(r["example_id"], r.get("subem")) for r in read_rows(run)] == [("q0", 0.0), ("q1", 0.0), ("q2", None)]
    assert main([str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "no results.jsonl in" in err and "Traceback" not in err
