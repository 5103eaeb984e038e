"""top-p, knee and stddev: each rule against a hand-worked or documented example, and on every surface."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ctxsel
from ctxsel.cli.main import main
from ctxsel.errors import InputError
from ctxsel.selectors.knee import knee_index
from ctxsel.selectors.top_p import top_p_k

# -- top-p: Haystack's TopPSampler -----------------------------------------------------------------


def test_top_p_keeps_the_one_document_of_haystacks_documented_example() -> None:
    # TopPSampler's docs: scores -10.6 (Berlin), -8.9 (Belgrade), -4.6 (Sarajevo), top_p=0.95 -> Sarajevo only.
    # The softmax gives Sarajevo 0.984 > 0.95, so no prefix is within p and the best one is kept.
    sel = ctxsel.select("q", ["Berlin", "Belgrade", "Sarajevo"], "top-p@0.95", scores=[-10.6, -8.9, -4.6])
    assert sel.ids == ["2"]


def test_top_p_counts_the_prefix_whose_mass_is_within_p() -> None:
    # softmax of log(0.5), log(0.3), log(0.2): probabilities 0.5, 0.3, 0.2, running sums 0.5, 0.8, 1.0
    s = np.log([0.5, 0.3, 0.2])
    assert [top_p_k(s, p) for p in (0.4, 0.5, 0.79, 0.8, 0.8 + 5e-7, 0.99, 1.0)] == [1, 1, 1, 2, 2, 2, 3]
    assert top_p_k(np.zeros(10), 0.55) == 5  # equal scores share the mass evenly: floor(p * n)
    assert top_p_k(np.array([0.3]), 0.1) == 1


def test_top_p_matches_haystacks_own_sampler() -> None:
    haystack = pytest.importorskip("haystack")
    from haystack.components.samplers import TopPSampler

    rng = np.random.default_rng(7)
    for trial in range(40):
        n = int(rng.integers(1, 30))
        scores = rng.normal(0, 2 if trial % 2 else 0.1, n).round(4)
        p = float(rng.choice([0.1, 0.5, 0.9, 0.95, 0.999]))
        docs = [haystack.Document(id=str(i), content=f"t{i}", score=float(s)) for i, s in enumerate(scores)]
        theirs = [d.id for d in TopPSampler(top_p=p).run(documents=docs)["documents"]]
        ours = ctxsel.select("q", [f"t{i}" for i in range(n)], f"top-p@{p}", scores=scores.tolist()).ids
        assert ours == theirs, (scores.tolist(), p)


def test_top_p_at_temperature_one_keeps_about_p_n_of_cosine_scores_and_a_low_temperature_reads_the_gap() -> None:
    scores = np.r_[[0.62, 0.60], np.linspace(0.35, 0.30, 18)]  # two relevant chunks, then a flat tail
    assert top_p_k(scores, 0.9) == 17  # near uniform: about p * n
    # at 0.05 the running sums are 0.581, 0.970, 0.973, 0.975, ...: the two hold 97% of the mass
    assert [top_p_k(scores, p, temperature=0.05) for p in (0.5, 0.96, 0.971, 0.974)] == [1, 1, 2, 3]
    sel = ctxsel.select("q", [str(i) for i in range(20)], "top-p[p=0.971,temperature=0.05]", scores=scores.tolist())
    assert sel.ids == ["0", "1"] and "temperature 0.05" in sel.explanation


# -- knee: Kneedle as kneed implements it ------------------------------------------------------------


def test_knee_of_the_kneedle_papers_figure_2_curve() -> None:
    # kneed's data_generator.figure2(): x = linspace(0, 1, 10), y = -1 / (x + 0.1) + 5, a concave increasing
    # curve whose knee kneed puts at x = 0.222 (index 2). Its negation is convex decreasing, which kneed
    # flips back to the same concave curve: the knee is at rank 2 there too.
    x = np.linspace(0.0, 1.0, 10)
    scores = -(-1 / (x + 0.1) + 5)
    assert knee_index(scores) == 2
    assert ctxsel.select("q", [str(i) for i in range(10)], "knee", scores=scores.tolist()).k == 2


def test_knee_worked_by_hand() -> None:
    # flipped and normalised: 0, .078, .938, .969, .984, 1; minus the diagonal: 0, -.12, .54, .37, .18, 0.
    # maxima at ranks 0 and 2; at rank 0 the next value -.12 < 0 - 1/5 fails, so rank 2's threshold
    # .54 - .2 is the first passed (rank 3's .37 is not below it; rank 4's .18 is): the knee is rank 2.
    assert knee_index(np.array([0.9, 0.85, 0.3, 0.28, 0.27, 0.26])) == 2
    assert knee_index(np.array([0.9, 0.85, 0.3, 0.28, 0.27, 0.26]), sensitivity=3.0) is None
    assert knee_index(np.array([0.9, 0.1])) is None  # fewer than three points
    assert knee_index(np.full(6, 0.4)) is None  # a flat curve
    sel = ctxsel.select("q", ["a", "b", "c"], "knee", scores=[0.5, 0.5, 0.5])
    assert sel.k == 3 and "no knee" in sel.explanation


# -- stddev ---------------------------------------------------------------------------------------


def test_stddev_worked_by_hand() -> None:
    # mean 0.25, population std 0.433: threshold 0.683 keeps one; z=0 keeps those at or above the mean
    texts = ["a", "b", "c", "d"]
    assert ctxsel.select("q", texts, "stddev", scores=[1.0, 0.0, 0.0, 0.0]).ids == ["0"]
    assert ctxsel.select("q", texts, "stddev@0", scores=[0.2, 0.4, 0.1, 0.3]).ids == ["1", "3"]
    assert ctxsel.select("q", texts, "stddev@3", scores=[0.2, 0.4, 0.1, 0.3]).ids == ["1"]  # min_k floor
    assert ctxsel.select("q", texts, "stddev[z=3,min_k=0]", scores=[0.2, 0.4, 0.1, 0.3]).ids == []
    assert ctxsel.select("q", texts * 3, "stddev@2", scores=[0.1] * 12).k == 12  # equal scores: all at the mean


def test_stddev_fast_path_agrees_with_the_sorted_path() -> None:
    rng = np.random.default_rng(3)
    scores = rng.normal(size=5000).astype(np.float32)
    scores[::97] = np.nan
    sel = ctxsel.get_selector("stddev[z=1.5,nan_policy=last]")
    fast = sel.decide(scores, np.ones(5000, dtype=np.int64))
    finite = scores[np.isfinite(scores)].astype(np.float64)
    assert fast.k == int(np.count_nonzero(finite >= finite.mean() + 1.5 * finite.std()))


# -- every surface ---------------------------------------------------------------------------------

CASES = [("top-p[p=0.95,temperature=0.05]", ["0"]), ("knee", ["0", "1"]), ("stddev", ["0", "1"])]
TEXTS = ["alpha one", "beta two", "gamma three", "delta four", "eps five", "zeta six"]
SCORES = [0.9, 0.85, 0.3, 0.28, 0.27, 0.26]


@pytest.mark.parametrize(("spec", "ids"), CASES)
def test_each_cut_on_the_api_cli_and_http(
    spec: str, ids: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], service_client: Any
) -> None:
    from ctxsel.service import ServiceSettings

    assert ctxsel.select("q", TEXTS, spec, scores=SCORES).ids == ids
    doc, scores = tmp_path / "doc.txt", tmp_path / "scores.json"
    doc.write_text("\n\n".join(TEXTS), encoding="utf-8")
    scores.write_text(json.dumps(SCORES), encoding="utf-8")
    rc = main(
        ["select", "--document", str(doc), "--question", "q", "--scores", str(scores), "--method", spec, "--json"]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and [c["id"] for c in out["chunks"]] == ids
    client = service_client(ServiceSettings(scorer="keywords"))
    got = client.post("/select", json={"question": "q", "chunks": TEXTS, "method": spec, "scores": SCORES})
    assert got.status_code == 200 and got.json()["ids"] == ids


def test_bad_options_are_refused_with_the_bound() -> None:
    with pytest.raises(InputError, match="p"):
        ctxsel.get_selector("top-p@1.5")
    with pytest.raises(InputError, match="temperature"):
        ctxsel.get_selector("top-p[temperature=0]")
    with pytest.raises(InputError, match="sensitivity"):
        ctxsel.get_selector("knee@-1")
