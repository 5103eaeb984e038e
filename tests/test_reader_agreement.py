"""experiments/reader_agreement.py: answer agreement overall and where both runs read the same selection."""

from __future__ import annotations

import json
from pathlib import Path

from experiments.reader_agreement import agreement


def _run(folder: Path, rows: list[tuple[str, list[str], str]]) -> Path:
    folder.mkdir()
    lines = [
        json.dumps({"example_id": q, "method": "adaptive-k", "ids": ids, "answer": a, "subem": 0.0})
        for q, ids, a in rows
    ]
    (folder / "results.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def test_agreement_counts_answers_overall_and_where_the_selection_is_the_same(tmp_path: Path) -> None:
    a1 = _run(tmp_path / "a1", [("q1", ["x", "y"], "Paris"), ("q2", ["x"], "Rome")])
    a2 = _run(tmp_path / "a2", [("q3", ["z"], "Oslo"), ("q4", ["w"], "Bern")])
    b = _run(
        tmp_path / "b",
        [("q1", ["x", "y"], "Paris"), ("q2", ["y"], "Rome"), ("q3", ["z"], "Bergen"), ("q4", ["v"], "Basel")],
    )
    [row] = agreement(f"{a1},{a2}", b)  # two folders on one side, merged
    assert row["n"] == 4 and row["identical"] == 0.5  # q1 and q2 answered alike
    assert row["same_selection"] == 2  # q1 and q3 read the same ids
    assert row["identical_same_selection"] == 0.5  # of those, q1 alike, q3 not
