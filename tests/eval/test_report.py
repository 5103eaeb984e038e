"""The reading table of summary.md: a judge's score column only where the judge is trusted (kappa >= 0.6)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxsel.eval.report import summarize, write_reports
from ctxsel.eval.stats import judge_agreement


def _rows(pairs: list[tuple[float, float]]) -> list[dict]:
    """One judged answer per (judge score, overlap F1)."""
    return [
        {
            "example_id": f"q{i}",
            "method": "oracle",
            "kind": "llm-judge",
            "score": j,
            "overlap_f1": f,
            "judge_valid": 1.0,
            "answer_valid": 1.0,
        }
        for i, (j, f) in enumerate(pairs)
    ]


# 10 answers: 4 credited by both, 4 by neither, 1 by each alone: p_o 0.8, p_e 0.5, kappa exactly 0.6
AT_THRESHOLD = [(1.0, 1.0)] * 4 + [(0.0, 0.0)] * 4 + [(1.0, 0.0), (0.0, 1.0)]
# one more disagreement in place of a "neither": p_o 0.7, judge 0.6 and overlap 0.5 credit, kappa 0.4
BELOW = [(1.0, 1.0)] * 4 + [(0.0, 0.0)] * 3 + [(1.0, 0.0), (1.0, 0.0), (0.0, 1.0)]


@pytest.mark.parametrize(("pairs", "kappa", "trusted"), [(AT_THRESHOLD, 0.6, True), (BELOW, 0.4, False)])
def test_the_judge_column_is_shown_only_at_kappa_06_or_above(
    tmp_path: Path, pairs: list[tuple[float, float]], kappa: float, trusted: bool
) -> None:
    rows = _rows(pairs)
    agreement = judge_agreement(rows)
    assert agreement is not None and agreement["kappa"] == pytest.approx(kappa)
    assert agreement["trusted"] is trusted
    config: dict[str, object] = {"dataset": "toy", "judge": "fake", "answer_format": "structured", "ci": "none"}
    config["reader"] = {"model": "fake", "template": "holobench-json-v1"}
    write_reports(tmp_path, summarize(rows, ["oracle"], ci="none"), rows, config)
    md = (tmp_path / "summary.md").read_text()
    reading = md.split("## Reading with")[1].split("## The judge")[0]
    header = reading.splitlines()[2]
    assert ("score %" in header) is trusted  # the judge's score: only when trusted
    assert "overlap F1 %" in header and "valid answers %" in header  # the deterministic score always
    assert "holobench-json-v1, structured answers" in reading
    verdict = "trusted." if trusted else "not trusted (below 0.6)"
    assert f"Cohen's kappa {kappa:.2f}: {verdict}" in md
    report = json.loads((tmp_path / "summary.json").read_text())
    assert report["judge_agreement"]["confusion"]["judge_yes_ref_no"] == (1 if trusted else 2)
