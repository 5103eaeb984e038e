"""The method registry: spec strings, options, plugins."""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ctxsel
from ctxsel.selectors import (
    _REGISTRY,
    available_methods,
    get_selector,
    get_selector_class,
    parse_spec,
    register,
    split_specs,
    with_option,
)
from ctxsel.selectors.adaptive_k import AdaptiveK
from ctxsel.selectors.autocut import Autocut
from ctxsel.selectors.base import Cut, ScoreCutSelector
from ctxsel.selectors.fixed import FullContext, ScoreThreshold, TopK, TopNTokens


@pytest.fixture
def restore_registry() -> Iterator[None]:
    saved = dict(_REGISTRY)
    yield
    _REGISTRY.clear()
    _REGISTRY.update(saved)


def test_core_methods_are_registered() -> None:
    methods = available_methods()
    assert {"adaptive-k", "autocut", "top-k", "top-n-tokens", "full", "threshold"} <= set(methods)
    assert methods["top-k"].main_param == "k"
    assert methods["full"].main_param is None
    assert methods["adaptive-k"].target == "ctxsel.selectors.adaptive_k:AdaptiveK"
    assert all(info.summary for info in methods.values())


def test_available_methods_is_a_copy() -> None:
    available_methods().clear()
    assert "top-k" in available_methods()


def test_top_level_exports() -> None:
    assert ctxsel.available_methods is available_methods
    assert ctxsel.get_selector is get_selector


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("top-k", ("top-k", {})),
        ("top-k@5", ("top-k", {"k": 5})),
        ("  top-k@5  ", ("top-k", {"k": 5})),
        ("top-n-tokens@5k", ("top-n-tokens", {"n_tokens": 5000})),
        ("top-n-tokens@1.5k", ("top-n-tokens", {"n_tokens": 1500})),
        ("top-n-tokens@2M", ("top-n-tokens", {"n_tokens": 2_000_000})),
        ("threshold@0.25", ("threshold", {"threshold": 0.25})),
        ("threshold@-1", ("threshold", {"threshold": -1})),
        ("autocut@2", ("autocut", {"jumps": 2})),
        ("adaptive-k@moving_avg", ("adaptive-k", {"strategy": "moving_avg"})),
        ("adaptive-k@2diff_spike", ("adaptive-k", {"strategy": "2diff_spike"})),
        ("adaptive-k[strategy=moving_avg,window=5]", ("adaptive-k", {"strategy": "moving_avg", "window": 5})),
        ("adaptive-k[ buffer = 3 , head_fraction=0.05 ]", ("adaptive-k", {"buffer": 3, "head_fraction": 0.05})),
        ("top-k[k=3,max_tokens=none,nan_policy=last]", ("top-k", {"k": 3, "max_tokens": None, "nan_policy": "last"})),
        ("top-k[]", ("top-k", {})),
        ("full", ("full", {})),
    ],
)
def test_parse_spec(spec: str, expected: tuple[str, dict]) -> None:
    assert parse_spec(spec) == expected


def test_coerced_types() -> None:
    _, opts = parse_spec("top-k[k=3,flag=True,other=false,x=null,f=2.5]")
    assert opts == {"k": 3, "flag": True, "other": False, "x": None, "f": 2.5}
    assert isinstance(opts["k"], int) and isinstance(opts["f"], float)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "bad method spec"),
        ("top-k@", "bad method spec"),
        ("top-k[k=3", "bad method spec"),
        ("top-k[k=[3]]", "bad method spec"),
        ("top k", "bad method spec"),
        ("top-k@5[k=3]", "bad method spec"),
        ("nope", "unknown method 'nope'; available: adaptive-k, autocut"),
        ("nope@3", "unknown method 'nope'"),
        ("full@3", "method 'full' takes no @value"),
        ("top-k[5]", "bad option '5'"),
    ],
)
def test_bad_specs(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_spec(spec)
    with pytest.raises(ValueError):
        get_selector(spec)


@pytest.mark.parametrize(
    ("spec", "cls", "attrs"),
    [
        ("top-k@7", TopK, {"k": 7}),
        ("top-n-tokens@5k", TopNTokens, {"n_tokens": 5000}),
        ("threshold@0.3", ScoreThreshold, {"threshold": 0.3}),
        ("autocut@2", Autocut, {"jumps": 2}),
        ("adaptive-k", AdaptiveK, {"strategy": "largest_gap", "buffer": None}),
        (
            "adaptive-k[strategy=moving_avg,window=4,buffer=0]",
            AdaptiveK,
            {"strategy": "moving_avg", "window": 4, "buffer": 0},
        ),
        ("full", FullContext, {}),
    ],
)
def test_get_selector_builds_the_class(spec: str, cls: type, attrs: dict) -> None:
    sel = get_selector(spec)
    assert type(sel) is cls
    for key, value in attrs.items():
        assert getattr(sel, key) == value


def test_keyword_options_override_spec() -> None:
    sel = get_selector("top-k@3", k=5, min_k=2)
    assert isinstance(sel, TopK) and (sel.k, sel.min_k) == (5, 2)


def test_unknown_option_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="bad options for method 'top-k'"):
        get_selector("top-k[colour=red]")


@pytest.mark.parametrize("spec", ["top-k@many", "top-k@5@6", "threshold@high", "top-n-tokens@lots"])
def test_wrongly_typed_option_is_a_value_error(spec: str) -> None:
    with pytest.raises(ValueError, match="bad options for method"):
        get_selector(spec)


@pytest.mark.parametrize("spec", ["top-k@-1", "top-n-tokens@-5", "autocut@-2", "adaptive-k[buffer=-1]"])
def test_negative_main_values(spec: str) -> None:
    with pytest.raises(ValueError, match=">= "):
        get_selector(spec)


@pytest.mark.parametrize(
    "spec", ["autocut@1.5", "top-k@2.5", "adaptive-k[buffer=1.5]", "adaptive-k[strategy=moving_avg,window=2.5]"]
)
def test_integer_parameters_reject_fractions_at_construction(spec: str) -> None:
    with pytest.raises(ValueError):
        get_selector(spec)


def test_instance_with_options_is_an_error() -> None:
    with pytest.raises(ValueError, match="options cannot be combined"):
        get_selector(TopK(k=1), k=2)


@pytest.mark.parametrize(
    ("specs", "expected"),
    [
        ("top-k@1,top-k@5", ["top-k@1", "top-k@5"]),
        ("adaptive-k[strategy=moving_avg,window=5],top-k@3", ["adaptive-k[strategy=moving_avg,window=5]", "top-k@3"]),
        (" full , autocut@1 ,", ["full", "autocut@1"]),
        ("", []),
        (",,", []),
    ],
)
def test_split_specs(specs: str, expected: list[str]) -> None:
    assert split_specs(specs) == expected


class _KeepTwo(ScoreCutSelector):
    def __init__(self, n: int = 2, **kw: Any) -> None:
        super().__init__(**kw)
        self.n = n

    def _cut(self, sorted_scores: np.ndarray, sorted_tokens: np.ndarray) -> Cut:
        return Cut(self.n, f"kept {self.n}")


def test_plugins_register_by_import_path(restore_registry: None) -> None:
    register("keep-two", f"{__name__}:_KeepTwo", "n", "test plugin")
    assert "keep-two" in available_methods()
    sel = ctxsel.select("q", ["a", "b", "c"], "keep-two@1", scores=[0.1, 0.9, 0.5])
    assert sel.ids == ["1"]
    assert sel.method == "keep-two"
    # the shared rules apply to plugins too
    assert ctxsel.select("q", ["a", "b", "c"], "keep-two@9", scores=[0.1, 0.9, 0.5]).ids == ["1", "2", "0"]


def test_registry_restored_after_plugin_test() -> None:
    assert "keep-two" not in available_methods()


# -- a method's name is written once: its registration ------------------------------------------


def test_no_built_in_method_writes_its_own_name() -> None:
    src = Path(ctxsel.__file__).parent / "selectors"
    named = [str(p) for p in src.rglob("*.py") if re.search(r"^    name = [\"']", p.read_text(encoding="utf-8"), re.M)]
    assert named == []


@pytest.mark.parametrize("name", sorted(n for n in available_methods() if n != "ldar"))
def test_each_built_in_class_is_named_by_its_registration(name: str) -> None:
    assert get_selector_class(name).name == name


def test_a_built_in_constructed_directly_has_its_registered_name() -> None:
    assert TopK(k=2).select("q", ["a", "b", "c"], [0.1, 0.3, 0.2]).method == "top-k"
    assert FullContext().name == "full" and AdaptiveK().name == "adaptive-k"


def test_a_plugin_class_takes_the_name_it_is_registered_under(restore_registry: None) -> None:
    class Unnamed(ScoreCutSelector):
        def _cut(self, sorted_scores: np.ndarray, sorted_tokens: np.ndarray) -> Cut:
            return Cut(1, "one")

    register("just-one", Unnamed)
    assert Unnamed.name == "just-one"
    assert ctxsel.select("q", ["a", "b"], "just-one", scores=[0.2, 0.9]).method == "just-one"

    class Child(Unnamed):  # not registered: it is its parent's method, as an inherited attribute would say
        pass

    assert Child().select("q", ["a"], [0.5]).method == "just-one"


def test_a_class_that_names_itself_otherwise_is_refused(restore_registry: None) -> None:
    class SelfNamed(ScoreCutSelector):
        name = "mine"

        def _cut(self, sorted_scores: np.ndarray, sorted_tokens: np.ndarray) -> Cut:
            return Cut(1, "one")

    register("mine", SelfNamed)  # the same name: nothing to disagree about
    with pytest.raises(ValueError, match="named 'mine' and cannot be registered as 'yours' too"):
        register("yours", SelfNamed)
    assert "yours" not in available_methods() and SelfNamed.name == "mine"


def test_a_class_registered_by_path_is_named_when_its_module_is_imported(
    restore_registry: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "later_plugin.py").write_text(
        "from ctxsel.selectors.base import Cut, ScoreCutSelector\n\n\n"
        "class Later(ScoreCutSelector):\n"
        "    def _cut(self, sorted_scores, sorted_tokens):\n"
        "        return Cut(1, 'later')\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    register("later", "later_plugin:Later", None, "imported after its registration")
    module = importlib.import_module("later_plugin")  # imported by hand, not through the registry
    assert module.Later.name == "later"
    assert module.Later().select("q", ["a", "b"], [0.1, 0.2]).method == "later"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("self-route", "self-route[fallback_max_tokens=30000]"),
        ("self-route@3k", "self-route[n_tokens=3k,fallback_max_tokens=30000]"),
        ("self-route[constrained=false]", "self-route[constrained=false,fallback_max_tokens=30000]"),
        ("self-route[fallback_max_tokens=5]", "self-route[fallback_max_tokens=5]"),  # the spec wins
        ("self-route[]", "self-route[fallback_max_tokens=30000]"),
    ],
)
def test_with_option_sets_an_option_the_spec_leaves_unset(spec: str, expected: str) -> None:
    got = with_option(spec, "fallback_max_tokens", 30000)
    assert got == expected
    assert parse_spec(got)[1]["fallback_max_tokens"] == (5 if "=5]" in spec else 30000)
