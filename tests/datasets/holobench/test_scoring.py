"""Set overlap of a structured answer's items (``score_items``), computed by hand."""

from __future__ import annotations

import pytest

from ctxsel.datasets.holobench.scoring import score_answer, score_items

PAIRS = ["EWR: 9.97", "JFK: 18.27", "LGA: 5.47"]


def test_pairs_hand_computed() -> None:
    # EWR right (within 1% of an average), JFK's value 2% off, LGA missing, a fourth key not in the gold
    s = score_items(["EWR: 9.9", "JFK: 18.65", "BOS: 1"], PAIRS)
    assert (s.n_gold_found, s.n_predicted_correct, s.n_predicted) == (1, 1, 3)
    assert s.recall == pytest.approx(1 / 3) and s.precision == pytest.approx(1 / 3)
    assert s.f1 == pytest.approx(1 / 3)
    full = score_items(["LGA: 5.47", "JFK: 18.27", "EWR: 9.97"], PAIRS)  # any order
    assert (full.precision, full.recall, full.f1) == (1.0, 1.0, 1.0)


def test_numbers_counts_exact_averages_within_one_percent() -> None:
    assert score_items(["93"], ["93"]).f1 == 1.0
    assert score_items(["94"], ["93"]).f1 == 0.0  # a count must be exact
    assert score_items(["1460"], ["1449.31"]).f1 == 1.0  # 0.74% off an average
    assert score_items(["1470"], ["1449.31"]).f1 == 0.0  # 1.4% off


def test_list_items_are_taken_as_they_are_not_split_at_commas() -> None:
    gold = ["Korea, Rep.", "Chile", "Peru"]
    s = score_items(["Korea, Rep.", "Chile", "Japan", "Chile"], gold)
    # 2 of 3 gold found; 3 of 4 predicted items match (the repeated Chile counts twice)
    assert (s.recall, s.precision) == (pytest.approx(2 / 3), 0.75)
    assert s.f1 == pytest.approx(2 * 0.75 * (2 / 3) / (0.75 + 2 / 3))
    # the free-text scorer on the same answer as one line splits at commas and joins the pieces back
    assert score_answer("Answer: Korea, Rep., Chile, Japan, Chile", gold).recall == pytest.approx(2 / 3)


def test_empty_answers_and_empty_gold() -> None:
    assert score_items([], []).f1 == 1.0  # "no rows", said with an empty list
    assert score_items(["AUS"], []).f1 == 0.0
    assert score_items([], ["AUS"]).f1 == 0.0
    assert score_items(["  "], ["AUS"]).n_predicted == 0


@pytest.mark.parametrize(
    "gold",
    [
        ["Arby's: 728.67", "Burger King: 850.5", "Chick-fil-A: 553.75"],
        ["ExpressJet Airlines Inc.: 37", "United Air Lines Inc.: 36"],
        ["2002: 94488.89", "2003: 91854.55"],
        ["AUS", "BOS", "BQN"],
        ["1449.31"],
        ["93"],
    ],
)
def test_the_gold_itself_scores_full_marks_in_either_shape(gold: list[str]) -> None:
    """Why the reader's rows scored 0.0 was not the scorer: the ground truth, written as the free-text
    template's answer or as structured items, scores 1.0."""
    assert score_answer("- **Reasoning:** I counted.\n- **Answer:** " + ", ".join(gold), gold).f1 == 1.0
    assert score_answer("- **Answer:**\n" + "\n".join(f"- {g}" for g in gold), gold).f1 == 1.0
    assert score_items(gold, gold).f1 == 1.0
