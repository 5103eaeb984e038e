"""Retrieval and answer metrics, on hand-computed cases."""

from __future__ import annotations

import pytest

from ctxsel import metrics as m


class TestRecallPrecision:
    @pytest.mark.parametrize(
        ("selected", "gold", "recall", "precision"),
        [
            (["a", "b", "c"], ["a", "d"], 0.5, 1 / 3),
            (["a", "d"], ["a", "d"], 1.0, 1.0),
            (["x"], ["a", "d"], 0.0, 0.0),
            ([], ["a"], 0.0, 0.0),  # empty selection: precision 0, not undefined
            (["a", "a", "b"], ["a"], 1.0, 0.5),  # sets, not lists
            (["a", "b", "c", "d"], ["d", "d"], 1.0, 0.25),
        ],
    )
    def test_values(self, selected: list[str], gold: list[str], recall: float, precision: float) -> None:
        assert m.context_recall(selected, gold) == pytest.approx(recall)
        assert m.context_precision(selected, gold) == pytest.approx(precision)

    def test_no_gold_is_none(self) -> None:
        assert m.context_recall(["a"], []) is None
        assert m.context_precision(["a"], []) is None

    def test_accepts_iterables(self) -> None:
        assert m.context_recall(iter(["a"]), iter(["a", "b"])) == 0.5


class TestTrueKDiffK:
    RANKING = ["c3", "c1", "c7", "c0", "c5"]

    @pytest.mark.parametrize(
        ("gold", "expected"),
        [
            (["c3"], 1),
            (["c1", "c3"], 2),
            (["c7", "c3"], 3),
            (["c5"], 5),
            (["c0", "c1"], 4),
        ],
    )
    def test_true_k_is_one_based_rank_of_lowest_gold(self, gold: list[str], expected: int) -> None:
        assert m.true_k(self.RANKING, gold) == expected

    def test_true_k_missing_or_empty(self) -> None:
        assert m.true_k(self.RANKING, ["nope"]) is None
        assert m.true_k(self.RANKING, ["c3", "nope"]) is None
        assert m.true_k(self.RANKING, []) is None
        assert m.true_k([], ["c3"]) is None

    @pytest.mark.parametrize(("k", "tk", "expected"), [(5, 3, 2), (1, 3, 2), (3, 3, 0), (0, 4, 4)])
    def test_diff_k(self, k: int, tk: int, expected: int) -> None:
        assert m.diff_k(k, tk) == expected

    def test_diff_k_none(self) -> None:
        assert m.diff_k(3, None) is None

    def test_authors_zero_based_variant(self) -> None:
        # gold at 0-based index 2 (1-based rank 3); a selection of k = 3 is exact under our
        # definition and off by one under the authors' (they compare k with the index)
        tk = m.true_k(self.RANKING, ["c7"])
        assert tk == 3
        assert m.diff_k(3, tk) == 0
        assert m.diff_k(3, tk - 1) == 1
        assert m.diff_k(2, tk - 1) == 0


class TestTokenReduction:
    @pytest.mark.parametrize(
        ("n", "full", "expected"),
        [(250, 1000, 75.0), (1000, 1000, 0.0), (0, 1000, 100.0), (1, 3, 100 * 2 / 3), (10, 0, 0.0), (5, -1, 0.0)],
    )
    def test_values(self, n: int, full: int, expected: float) -> None:
        assert m.token_reduction(n, full) == pytest.approx(expected)


class TestNormalisation:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("The Eiffel Tower", "eiffel tower"),
            ("  an   apple  a day ", "apple day"),
            ("Hello, World!", "hello world"),
            ("U.S.A.", "usa"),
            ("don't", "dont"),
            ("The the THE", ""),
            ("theatre another", "theatre another"),  # articles only as whole words
            ("A-ha", "aha"),
            ("tab\tand\nnewline", "tab and newline"),
            ("", ""),
        ],
    )
    def test_normalize_answer(self, text: str, expected: str) -> None:
        assert m.normalize_answer(text) == expected


class TestAnswerMetrics:
    @pytest.mark.parametrize(
        ("pred", "answers", "expected"),
        [
            ("The answer is Paris, France.", ["paris"], 1.0),
            ("It was built by the Kestrel Optical Works in 1923.", ["Kestrel Optical Works"], 1.0),
            ("It was built by Kestrel.", ["Kestrel Optical Works"], 0.0),
            ("paris", ["London", "Paris"], 1.0),
            ("Paris", [], 0.0),
            ("anything", ["the"], 0.0),  # an answer that normalises to "" never matches
            ("", ["x"], 0.0),
        ],
    )
    def test_substring_exact_match(self, pred: str, answers: list[str], expected: float) -> None:
        assert m.substring_exact_match(pred, answers) == expected

    @pytest.mark.parametrize(
        ("pred", "answers", "expected"),
        [
            ("The Paris!", ["paris"], 1.0),
            ("Paris, France", ["paris"], 0.0),
            ("an Apple", ["apple", "pear"], 1.0),
            ("x", [], 0.0),
        ],
    )
    def test_exact_match(self, pred: str, answers: list[str], expected: float) -> None:
        assert m.exact_match(pred, answers) == expected

    def test_f1_hand_computed(self) -> None:
        # pred tokens [eiffel, tower, paris]; gold [eiffel, tower]: common 2, P = 2/3, R = 1
        assert m.token_f1("The Eiffel Tower, Paris", ["Eiffel Tower"]) == pytest.approx(2 * (2 / 3) * 1 / (2 / 3 + 1))
        # best over answers
        assert m.token_f1("Eiffel Tower", ["Louvre", "the Eiffel Tower"]) == pytest.approx(1.0)
        # repeated tokens count with multiplicity: pred [a1, a1, b], gold [a1]: common 1, P 1/3, R 1 -> 0.5
        assert m.token_f1("a1 a1 b", ["a1"]) == pytest.approx(0.5)
        assert m.token_f1("nothing shared", ["other words"]) == 0.0
        assert m.token_f1("", ["x"]) == 0.0
        assert m.token_f1("x", []) == 0.0


class TestOfficialHotpotQA:
    """EM and F1 as ``hotpot_evaluate_v1.py`` computes them (one gold answer each)."""

    @pytest.mark.parametrize(
        ("pred", "gold", "em", "f1"),
        [
            ("yes", "yes", 1.0, 1.0),
            ("Yes.", "yes", 1.0, 1.0),  # punctuation and case are normalised away
            ("yes", "no", 0.0, 0.0),
            ("yes it is", "yes", 0.0, 0.0),  # gold is yes/no: all or nothing (SQuAD F1 would give 0.5)
            ("no", "no way out", 0.0, 0.0),  # prediction is yes/no and differs: 0 (SQuAD: 0.5)
            ("noanswer", "noanswer", 1.0, 1.0),
            ("noanswer", "Paris", 0.0, 0.0),
            ("The Eiffel Tower!", "Eiffel Tower", 1.0, 1.0),  # articles and punctuation dropped
            ("an apple", "Apple", 1.0, 1.0),
            ("U.S.A.", "USA", 1.0, 1.0),
            ("theatre", "the atre", 0.0, 0.0),  # "the" is removed only as a whole word
            ("Kestrel Optical Works in 1923", "the Kestrel Optical Works", 0.0, 2 * 0.6 * 1.0 / 1.6),
            ("", "Paris", 0.0, 0.0),
        ],
    )
    def test_official_cases(self, pred: str, gold: str, em: float, f1: float) -> None:
        assert m.exact_match(pred, [gold]) == em
        assert m.token_f1(pred, [gold]) == pytest.approx(f1)
        assert m.f1_precision_recall(pred, gold)[0] == pytest.approx(f1)

    def test_precision_and_recall_as_the_script_returns_them(self) -> None:
        # pred [kestrel, optical, works, in, 1923] vs gold [kestrel, optical, works]: P 3/5, R 1
        f1, p, r = m.f1_precision_recall("Kestrel Optical Works in 1923", "Kestrel Optical Works")
        assert (p, r) == pytest.approx((0.6, 1.0)) and f1 == pytest.approx(0.75)
        assert m.f1_precision_recall("yes", "no") == (0.0, 0.0, 0.0)

    def test_answer_scores_are_the_max_over_gold_answers(self) -> None:
        s = m.answer_scores("Paris, France", ["London", "paris", "Paris France"])
        assert s == {"subem": 1.0, "em": 1.0, "f1": 1.0}
        s = m.answer_scores("It is Paris", ["paris", "yes"])
        assert s["subem"] == 1.0 and s["em"] == 0.0 and s["f1"] == pytest.approx(0.5)  # P 1/3, R 1
        assert m.answer_scores("x", []) == {"subem": 0.0, "em": 0.0, "f1": 0.0}
