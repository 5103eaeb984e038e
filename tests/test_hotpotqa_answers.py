"""experiments/hotpotqa_answers.py on hand-made run folders: each row covers the questions it has read and
the table says "partial" while any row has read fewer than the data set, the hybrid run's adaptive-k
gets its own row, each paired difference is McNemar over the questions both rows have read, and every
absent row has a reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.hotpotqa_answers import HYBRID, TABLE, WHY_NOT, build, collect, keep_runs, main
from experiments.run_summary import read_rows


def _run(folder: Path, rows: list[dict[str, object]], methods: list[str]) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"methods": methods}))
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def _row(q: int, method: str, subem: float, wall_s: float = 1.0) -> dict[str, object]:
    return {
        "example_id": f"q{q}",
        "method": method,
        "subem": subem,
        "em": subem,
        "f1": subem,
        "recall": 1.0,
        "n_tokens": 100,
        "wall_s": wall_s,
    }


def test_a_stopped_run_is_partial_and_each_pair_is_compared_on_its_common_questions(tmp_path: Path) -> None:
    # adaptive-k read q0-q9 (right on q0-q4), oracle q0-q7 (right on all)
    rows = [_row(q, "adaptive-k", float(q < 5), wall_s=2.0) for q in range(10)]
    rows += [_row(q, "oracle", 1.0) for q in range(8)]
    rows.append({"example_id": "q8", "method": "oracle", "error": "boom"})  # a failed row is not read
    dense = _run(tmp_path / "dense", rows, ["oracle", "adaptive-k"])
    hybrid = _run(tmp_path / "hybrid", [_row(q, "adaptive-k", 1.0) for q in range(9)], ["adaptive-k"])
    table = build(collect([dense], hybrid), questions=100, min_paired=8)
    assert table["n"] == {"oracle": 8, "adaptive-k": 10, HYBRID: 9} and table["partial"]
    assert table["progress"]["adaptive-k"] == 10 and table["progress"]["oracle"] == 8
    assert list(table["methods"]) == ["oracle", "adaptive-k", HYBRID]
    assert table["methods"]["adaptive-k"]["n"] == 10  # each row over its own questions
    assert table["methods"]["adaptive-k"]["subem"] == pytest.approx(5 / 10)
    assert table["seconds_per_question"]["adaptive-k"] == pytest.approx(2.0)
    # on q0-q7, oracle is right where adaptive-k is wrong on q5-q7, never the other way: p = 2 * 0.5**3
    c = next(
        c for c in table["comparisons"] if c["a"] == "oracle" and c["b"] == "adaptive-k" and c["metric"] == "subem"
    )
    assert c["diff"] == pytest.approx(3 / 8) and c["n"] == 8 and c["p"] == pytest.approx(0.25)
    h = next(c for c in table["comparisons"] if c["a"] == HYBRID and c["metric"] == "subem")
    assert h["n"] == 9 and h["diff"] == pytest.approx(4 / 9)  # q0-q8: hybrid right on q5-q8 as well
    assert not any(c["b"] == "full" for c in table["comparisons"])
    assert set(table["missing"]) == set(TABLE) - {"oracle", "adaptive-k", HYBRID}
    assert table["missing"]["context-picker trained"]["why"] == WHY_NOT["context-picker trained"]
    assert table["missing"]["full"]["hours_for_all"] == pytest.approx(12.9)
    # a pair sharing fewer questions than min_paired is listed, not compared
    fewer = build(collect([dense], hybrid), questions=100, min_paired=9)
    assert fewer["unpaired"] == [{"a": "oracle", "b": "adaptive-k", "n": 8}]
    assert {c["a"] for c in fewer["comparisons"]} == {HYBRID}


def test_the_report_says_partial_and_a_missing_folder_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [_row(q, m, 1.0) for q in range(10) for m in ("adaptive-k", "full")] + [_row(0, "sage", 1.0)]
    dense = _run(tmp_path / "dense", rows, [])
    assert main(["--runs", str(dense), "--questions", "12", "--out", str(tmp_path / "out")]) == 0
    md = (tmp_path / "out" / "hotpotqa_answers.md").read_text()
    assert "**PARTIAL: the rows have read 1 to 10 of 12 questions**" in md and "Paired against `full`" in md
    assert "Not paired yet, fewer than 10 questions shared with `full`: `sage` (1)." in md
    data = json.loads((tmp_path / "out" / "hotpotqa_answers.json").read_text())
    assert data["n"] == {"full": 10, "adaptive-k": 10, "sage": 1} and data["partial"] is True
    assert {(c["a"], c["b"]) for c in data["comparisons"]} == {("full", "adaptive-k"), ("adaptive-k", "full")}
    kept = read_rows(tmp_path / "out" / "hotpotqa_answers_runs" / "dense")
    assert len(kept) == 21  # the default --keep: OUT/NAME_runs/<folder>/examples.csv
    png = tmp_path / "out" / "hotpotqa_answers.png"
    assert png.stat().st_size > 0
    png.unlink()
    assert main(["--plot-only", "--out", str(tmp_path / "out")]) == 0 and png.stat().st_size > 0
    capsys.readouterr()
    assert main(["--runs", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out2")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no eval run") and "Traceback" not in err
    assert main(["--plot-only", "--out", str(tmp_path / "out2")]) == 2
    assert capsys.readouterr().err.startswith("error: no table")


def test_the_kept_copy_holds_the_finished_rows_and_rebuilds_the_same_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [_row(q, "adaptive-k", 0.0) for q in range(4)]  # superseded below: a rescore appends
    rows += [_row(q, "adaptive-k", float(q % 2)) for q in range(4)]
    rows.append({"example_id": "q4", "method": "adaptive-k", "error": "boom"})  # resumes as not done
    whole = {"ids": ["a", "b"], "reduction": 0.0, "cut_detail": {"chunks_after": 1}}
    rows.append(dict(_row(0, "full", 1.0), **whole))  # full's rows: every chunk's id and the cut's lists
    dense = _run(tmp_path / "runs" / "dense", rows, ["adaptive-k"])
    (dense / "llm_responses.sqlite").write_bytes(b"x" * 1000)  # caches stay behind
    (kept,) = keep_runs([dense], tmp_path / "kept")
    assert sorted(p.name for p in kept.iterdir()) == ["config.json", "examples.csv"]  # no run log
    assert "no question, chunk or answer text" in (tmp_path / "kept" / "README.md").read_text()
    assert (kept / "config.json").read_text() == (dense / "config.json").read_text()
    lines = read_rows(kept)
    assert [(r["example_id"], r["method"], r["subem"]) for r in lines] == [
        *[(f"q{q}", "adaptive-k", float(q % 2)) for q in range(4)],
        ("q0", "full", 1.0),
    ]
    assert lines[-1] == _row(0, "full", 1.0) | {"reduction": 0.0}  # no ids, no cut lists: numbers only
    assert build(collect([kept], None), 100) == build(collect([dense], None), 100)
    assert keep_runs([kept], tmp_path / "kept") == [kept]  # rebuilding from the copies copies nothing
    other = _run(tmp_path / "elsewhere" / "dense", rows, ["adaptive-k"])
    with pytest.raises(ValueError, match="share the name 'dense'"):
        keep_runs([dense, other], tmp_path / "kept2")
    out = ["--out", str(tmp_path / "out"), "--keep", str(tmp_path / "kept3")]
    assert main(["--runs", f"{dense},{other}", *out]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: two run folders share the name") and "Traceback" not in err
