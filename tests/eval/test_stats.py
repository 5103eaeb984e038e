"""Intervals and paired comparisons of an evaluation (ctxsel.eval.stats, ctxsel eval --ci / --compare)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ctxsel.cli.main import main
from ctxsel.errors import InputError
from ctxsel.eval.stats import bootstrap_ci, cohen_kappa, compare, judge_agreement, mcnemar_exact, paired_difference


def _by_hand(values: list[float], seed: int = 0, resamples: int = 2000) -> tuple[float, float]:
    """The percentile bootstrap written out: the same draws, a Python loop, linear interpolation by hand."""
    idx = np.random.default_rng(seed).integers(0, len(values), size=(resamples, len(values)))
    means = sorted(sum(values[i] for i in row) / len(values) for row in idx.tolist())

    def quantile(q: float) -> float:
        pos = q * (resamples - 1)
        lo = int(pos)
        return means[lo] + (pos - lo) * (means[lo + 1] - means[lo])

    return quantile(0.025), quantile(0.975)


def test_the_bootstrap_interval_is_the_hand_computed_one() -> None:
    values = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    ci = bootstrap_ci(values)
    assert ci is not None
    lo, hi = ci
    assert (lo, hi) == pytest.approx(_by_hand(values), abs=1e-12)
    assert lo < 0.4 < hi
    tokens = [912.0, 1040.0, 388.0, 1502.0, 977.0, 640.0, 1210.0]
    assert bootstrap_ci(tokens) == pytest.approx(_by_hand(tokens), abs=1e-9)
    assert bootstrap_ci(tokens, seed=1) != bootstrap_ci(tokens)  # seeded: another seed, other draws
    assert bootstrap_ci(tokens) == bootstrap_ci(tokens)  # and the same seed, the same interval
    assert bootstrap_ci([0.7] * 5) == (pytest.approx(0.7), pytest.approx(0.7))
    assert bootstrap_ci([]) is None


def test_mcnemar_exact_matches_the_textbook_binomial_test() -> None:
    # 10 pairs where only a is right, 2 where only b is: binom.test(2, 12, 0.5) in R gives p = 0.03857
    a = [1] * 10 + [0] * 2 + [1] * 5 + [0] * 3
    b = [0] * 10 + [1] * 2 + [1] * 5 + [0] * 3
    assert mcnemar_exact(a, b) == pytest.approx(158 / 4096)
    assert mcnemar_exact(a, a) == 1.0
    # 1 against 0 discordant: p = 2 * 1/2 = 1
    assert mcnemar_exact([1, 0], [0, 0]) == 1.0


def test_paired_difference_picks_its_test_by_the_values() -> None:
    a = [1.0] * 10 + [0.0] * 2 + [1.0] * 5
    b = [0.0] * 10 + [1.0] * 2 + [1.0] * 5
    d = paired_difference(a, b)
    assert d["test"] == "mcnemar-exact" and d["n"] == 17
    assert d["diff"] == pytest.approx(8 / 17)
    assert d["ci95"][0] > 0  # every resample has more a-only than b-only pairs here
    cont = paired_difference([0.5, 0.7, 0.9, 0.6], [0.5, 0.7, 0.9, 0.6])
    assert cont["test"] == "paired-bootstrap" and cont["diff"] == 0.0 and cont["ci95"] == [0.0, 0.0]
    assert cont["p"] == 1.0


def _rows(method: str, values: dict[str, float]) -> list[dict[str, object]]:
    return [{"method": method, "example_id": k, "recall": v} for k, v in values.items()]


def test_compare_refuses_rows_on_different_examples() -> None:
    rows = _rows("a", {"q1": 1.0, "q2": 0.0}) + _rows("b", {"q1": 1.0, "q3": 1.0})
    with pytest.raises(InputError, match=r"cannot compare 'a' with 'b': they ran on different examples"):
        compare(rows, ["a", "b"], "b")
    with pytest.raises(InputError, match="not one of this run's methods"):
        compare(rows, ["a", "b"], "c")
    same = _rows("a", {"q1": 1.0, "q2": 0.0}) + _rows("b", {"q1": 0.0, "q2": 0.0})
    (c,) = compare(same, ["a", "b"], "b")
    assert (c["a"], c["b"], c["metric"], c["diff"], c["n"]) == ("a", "b", "recall", 0.5, 2)


@pytest.mark.slow  # one eval of the example set (keyword scores)
def test_eval_writes_intervals_and_comparisons(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    argv = ["eval", "--dataset", "example", "--methods", "adaptive-k,top-k@5,full", "--compare", "full"]
    rc = main([*argv, "--scorer", "keywords", "--output", str(out), "--no-progress"])
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    for method, entry in summary["methods"].items():
        recalls = [r["recall"] for r in rows if r["method"] == method]
        assert entry["recall_ci95"] == pytest.approx(list(_by_hand(recalls)))
        assert entry["n_tokens_ci95"][0] <= entry["n_tokens"] <= entry["n_tokens_ci95"][1]
    comparisons = {(c["a"], c["metric"]): c for c in summary["comparisons"]}
    assert {a for a, _ in comparisons} == {"adaptive-k", "top-k@5"}
    full = [r["recall"] for r in rows if r["method"] == "full"]
    top5 = [r["recall"] for r in rows if r["method"] == "top-k@5"]
    assert comparisons[("top-k@5", "recall")]["diff"] == pytest.approx(np.mean(top5) - np.mean(full))
    assert comparisons[("top-k@5", "recall")]["b"] == "full"
    md = (out / "summary.md").read_text()
    assert "## Paired differences to `full`" in md
    mean, (lo, hi) = summary["methods"]["full"]["recall"], summary["methods"]["full"]["recall_ci95"]
    assert f"| {100 * mean:.1f} [{100 * lo:.1f}, {100 * hi:.1f}] |" in md
    assert "paired differences to full" in capsys.readouterr().out
    assert (out / "plots" / "comparisons.png").stat().st_size > 0


def test_forest_rows_are_the_table_s_differences_in_points() -> None:
    from ctxsel.eval.report import forest_rows

    comparisons = [
        {"a": "top-k@5", "b": "full", "metric": "recall", "diff": -0.25, "ci95": [-0.4, -0.1], "p": 0.01, "n": 12},
        {
            "a": "top-k@5",
            "b": "full",
            "metric": "n_tokens",
            "diff": -900.0,
            "ci95": [-990.0, -800.0],
            "p": 0.01,
            "n": 12,
        },
        {"a": "adaptive-k", "b": "full", "metric": "recall", "diff": 0.05, "ci95": [-0.1, 0.2], "p": 0.6, "n": 12},
    ]
    assert forest_rows(comparisons, "recall") == [
        ("top-k@5 - full (n=12)", -25.0, -40.0, -10.0, "real"),
        ("adaptive-k - full (n=12)", 5.0, -10.0, 20.0, ""),
    ]
    assert forest_rows(comparisons, "f1") == []


def test_a_difference_is_real_only_where_interval_and_test_agree() -> None:
    """Four discordant pairs all one way: the bootstrap interval excludes 0, but the exact McNemar
    p is 2 * 0.5**4 = 0.125, so the table says borderline, not real."""
    from ctxsel.eval.report import comparisons_table, verdict
    from ctxsel.eval.stats import paired_difference

    a, b = [0.0] * 4 + [1.0] * 4, [1.0] * 4 + [1.0] * 4
    c = {"a": "x", "b": "y", "metric": "subem", **paired_difference(a, b)}
    assert c["p"] == pytest.approx(0.125) and c["ci95"][1] < 0
    assert verdict(c) == "borderline"
    assert "| -50.0 (borderline) | [" in comparisons_table([c])
    assert verdict({**c, "p": 0.01}) == "real"
    assert verdict({**c, "ci95": [-0.6, 0.1]}) == ""
    assert verdict({**c, "ci95": [-0.6, 0.1], "p": 0.04}) == "borderline"
    assert "(real)" not in comparisons_table([{**c, "ci95": [-0.6, 0.1]}])


def test_eval_refuses_a_compare_row_it_does_not_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["eval", "--dataset", "example", "--methods", "top-k@5", "--compare", "full", "--scorer", "keywords"]
    assert main([*argv, "--output", str(tmp_path / "o"), "--no-progress"]) == 2
    assert "--compare 'full' is not one of this run's rows: top-k@5" in capsys.readouterr().err


def test_compare_none_runs_other_rows_of_a_config_that_names_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "run.toml"
    config.write_text('dataset = "example"\nmethods = ["top-k@5", "full"]\ncompare = "full"\nscorer = "keywords"\n')
    argv = ["eval", "--config", str(config), "--methods", "top-k@5", "--no-progress"]
    assert main([*argv, "--output", str(tmp_path / "refused")]) == 2  # the config's compare row is not run
    assert "(add it to --methods, or --compare none for no comparisons)" in capsys.readouterr().err
    out = tmp_path / "o"
    assert main([*argv, "--compare", "none", "--output", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["methods"]) == ["top-k@5"] and not summary.get("comparisons")
    assert "Paired differences" not in (out / "summary.md").read_text()


def test_cohen_kappa_of_the_textbook_table() -> None:
    # 50 items: both yes 20, only a 5, only b 10, both no 15 -> p_o 0.7, p_e 0.5, kappa 0.4
    a = [True] * 20 + [True] * 5 + [False] * 10 + [False] * 15
    b = [True] * 20 + [False] * 5 + [True] * 10 + [False] * 15
    assert cohen_kappa(a, b) == pytest.approx(0.4)
    assert cohen_kappa(a, a) == pytest.approx(1.0)
    assert cohen_kappa([True, True], [True, True]) is None  # chance agreement 1: undefined
    assert cohen_kappa([], []) is None


def test_a_judge_that_credits_answers_with_no_overlap_is_not_trusted() -> None:
    judged = [  # (judge score, set-overlap F1): the judge credits two answers that list no gold item
        (1.0, 1.0),
        (0.75, 0.8),
        (0.5, 0.0),
        (1.0, 0.0),
        (0.0, 0.0),
        (0.0, 0.1),
        (0.25, 0.6),
    ]
    rows = [{"kind": "llm-judge", "score": j, "overlap_f1": f} for j, f in judged]
    rows.append({"kind": "set-overlap-f1 (judge reply invalid: no JSON)", "score": 0.0, "overlap_f1": 0.0})
    agreement = judge_agreement(rows)
    assert agreement is not None and agreement["n"] == 7  # the invalid reply is not the judge's verdict
    assert agreement["confusion"] == {
        "judge_yes_ref_yes": 2,
        "judge_yes_ref_no": 2,
        "judge_no_ref_yes": 1,
        "judge_no_ref_no": 2,
    }
    # p_o = 4/7; p_judge = 4/7, p_ref = 3/7: p_e = 12/49 + 12/49 = 24/49
    assert agreement["kappa"] == pytest.approx((4 / 7 - 24 / 49) / (1 - 24 / 49))
    assert agreement["trusted"] is False and agreement["reference"] == "overlap_f1"
    assert judge_agreement([{"kind": "subem", "score": 1.0}]) is None
