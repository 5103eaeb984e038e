"""LDAR's score maps: quantile matching, the map's values inside and past its knots, the bundled file."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ctxsel.errors import ModelError
from ctxsel.selectors.ldar.score_maps import MAPS_FORMAT, ScoreMap, bundled_maps, fit_map, parse_maps


def test_a_map_interpolates_inside_its_knots_and_extends_its_end_slopes() -> None:
    m = ScoreMap("bm25", (0.0, 10.0, 20.0), (0.0, 0.5, 0.7))
    np.testing.assert_allclose(m(np.array([0.0, 5.0, 10.0, 15.0, 20.0])), [0.0, 0.25, 0.5, 0.6, 0.7])
    np.testing.assert_allclose(m(np.array([-10.0, 30.0])), [-0.5, 0.9])  # slopes 0.05 and 0.02 carry on


def test_quantile_matching_carries_one_distribution_onto_the_other() -> None:
    rng = np.random.default_rng(0)
    source = rng.normal(5.0, 2.0, 20_000)
    target = rng.uniform(0.0, 1.0, 20_000)
    m = fit_map("x", source, target, np.linspace(0.0, 1.0, 101))
    mapped = m(source)
    assert np.all(np.diff(mapped[np.argsort(source)]) >= 0)  # monotone: the ranking is kept
    np.testing.assert_allclose(np.quantile(mapped, [0.1, 0.5, 0.9]), [0.1, 0.5, 0.9], atol=0.01)
    tied = fit_map("ties", np.r_[np.zeros(900), np.arange(100.0)], np.arange(1000.0), np.linspace(0, 1, 11))
    assert np.all(np.diff(tied.x) > 0)  # the knots on the tied zeros merge into one
    with pytest.raises(ValueError, match="all equal"):
        fit_map("flat", np.ones(50), np.arange(50.0), np.linspace(0, 1, 11))


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"format": "x"}, "format is not"),
        ({"format": MAPS_FORMAT, "version": 9}, "version 9"),
        ({"format": MAPS_FORMAT, "version": 1, "maps": {}}, 'no "target"'),
        ({"format": MAPS_FORMAT, "version": 1, "target": "t", "maps": {"a": {"x": [0, 1]}}}, "map 'a'"),
        (
            {
                "format": MAPS_FORMAT,
                "version": 1,
                "target": "t",
                "maps": {"a": {"scorer": "a", "x": [1, 0], "y": [0, 1]}},
            },
            "knots must increase",
        ),
    ],
)
def test_a_malformed_file_is_one_clear_error(data: Any, said: str) -> None:
    with pytest.raises(ModelError, match=said):
        parse_maps(data, "score_maps.json")


def test_the_bundled_maps_are_the_ones_that_carried_the_policy() -> None:
    from experiments.ldar_score_maps import BUNDLED

    maps = bundled_maps()
    assert maps.target == "dense:all-MiniLM-L6-v2"
    assert sorted(m.scorer for m in maps.maps.values()) == sorted(BUNDLED) == ["accurate", "cascade"]
    for m in maps.maps.values():
        assert m(np.array([m.x[-1]]))[0] == pytest.approx(m.y[-1]) and m.y[-1] <= 1.0
