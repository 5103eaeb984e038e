"""experiments/holobench_answers.py on a hand-made run: a run without a judge says so (not "not trusted"),
and --answers lists each answer's end beside the ground truth read from the run's data set."""

from __future__ import annotations

import json
from pathlib import Path

from experiments.holobench_answers import main


def test_a_run_without_judge_and_its_answers(tmp_path: Path) -> None:
    data = tmp_path / "set.jsonl"
    data.write_text(json.dumps({"id": "q0", "answers": ["EWR: 3", "JFK: 2"]}) + "\n")
    run = tmp_path / "run"
    run.mkdir()
    config = {"dataset": str(data), "methods": ["oracle"], "answer_format": "structured", "reader": {"template": "t"}}
    (run / "config.json").write_text(json.dumps(config))
    row = {"example_id": "q0", "method": "oracle", "answer": "x" * 300 + " name: 123.45", "overlap_f1": 0.0}
    (run / "results.jsonl").write_text(json.dumps(row) + "\n")
    assert main(["--runs", str(run), "--answers", "--out", str(tmp_path / "out")]) == 0
    md = (tmp_path / "out" / "holobench_answers.md").read_text()
    assert "| no judge |" in md and "not trusted" not in md
    line = next(ln for ln in md.splitlines() if ln.startswith("- q0 oracle"))
    assert line.endswith("name: 123.45 (ground truth: EWR: 3; JFK: 2)") and "(F1 0): ... " in line
