"""The spec grammar's quoting: any path fits in a method, scorer or expansion spec."""

from __future__ import annotations

import pytest

from ctxsel.errors import SpecError
from ctxsel.ranking import parse_expansion
from ctxsel.scoring import parse_scorer_spec
from ctxsel.selectors import parse_spec, split_specs
from ctxsel.specs import quote_value, spec_value

PATHS = ["runs/a,b/policy", "runs/x]y", "runs/k=v", "my runs/policy", "it's", 'say "hi"', "a+b@c[1]", "5k", "true"]


@pytest.mark.parametrize("path", PATHS)
def test_any_path_round_trips_through_every_kind_of_spec(path: str) -> None:
    q = quote_value(path)
    assert parse_spec(f"ldar[policy={q},sample=true]") == ("ldar", {"policy": path, "sample": True})
    assert parse_spec(f"ldar@{q}") == ("ldar", {"policy": path})
    assert parse_scorer_spec(f"dense[model={q}]") == ("dense", {"model": path})
    assert split_specs(f"top-k@5,ldar[policy={q}],full") == ["top-k@5", f"ldar[policy={q}]", "full"]


def test_plain_values_stay_unquoted_and_typed() -> None:
    assert quote_value("runs/ldar/label/policy") == "runs/ldar/label/policy"
    assert quote_value("5k") == "'5k'" and spec_value("'5k'") == "5k" and spec_value("5k") == 5000
    assert parse_spec("adaptive-k[strategy=moving_avg,buffer=3]") == (
        "adaptive-k",
        {"strategy": "moving_avg", "buffer": 3},
    )
    assert parse_spec("ldar[policy='it''s']")[1] == {"policy": "it's"}
    expansion = parse_expansion("hop[m=1,weight=0.7]+links[boost=0.5]")
    assert expansion is not None and expansion.hop is not None and expansion.hop.weight == 0.7


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("ldar[policy='abc]", "unterminated ' quote"),
        ("top-k@5]", "quote a value that holds"),
        ("top-k[", "unbalanced brackets"),
        ("top-k[x]", "expected key=value"),
        ("dense[model='a]", "unterminated"),
    ],
)
def test_bad_quoting_is_a_spec_error_that_says_what_to_do(spec: str, words: str) -> None:
    parse = parse_scorer_spec if spec.startswith("dense") else parse_spec
    with pytest.raises(SpecError, match=words.replace("[", r"\[")):
        parse(spec)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("top-k[k=1,k=2]", "option 'k' is given twice in 'top-k[k=1,k=2]': give each option once"),
        ("adaptive-k[buffer=2, buffer=3]", "option 'buffer' is given twice in"),
        ("top-k@５", "value '５': write a number with the ASCII digits 0-9 and no '_' separators (e.g. 10)"),
        ("top-k@٣", "value '٣': write a number with the ASCII digits 0-9"),
        ("top-k@1_0", "value '1_0': write a number with the ASCII digits 0-9 and no '_' separators"),
        ("top-k[k=1_000]", "value '1_000': write a number with the ASCII digits 0-9"),
        ("top-n-tokens@５k", "value '５k': write a number with the ASCII digits 0-9"),
    ],
)
def test_repeated_keys_and_non_ascii_or_grouped_digits_are_refused(spec: str, message: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec(spec)
    assert str(e.value).startswith(message), str(e.value)
    assert "\n" not in str(e.value)


def test_plain_ascii_numbers_and_quoted_text_still_read() -> None:
    assert parse_spec("top-k@10") == ("top-k", {"k": 10})
    assert parse_spec("top-k@1e9") == ("top-k", {"k": 1e9})
    assert spec_value("'1_0'") == "1_0" and spec_value("'５'") == "５"
    assert parse_scorer_spec("dense[batch_size=8]") == ("dense", {"batch_size": 8})
