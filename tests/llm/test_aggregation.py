"""Structured aggregation answers: the reply format per answer kind, parsed strictly."""

from __future__ import annotations

import pytest

from ctxsel.errors import InputError, ReplyFormatError
from ctxsel.llm.aggregation import aggregation_format, answer_kind, format_number, guess_kind


def test_each_kind_has_its_own_schema() -> None:
    scalar, items, pairs = (aggregation_format(k).schema["properties"]["answer"] for k in ("scalar", "list", "pairs"))
    assert scalar == {"type": "number"}
    assert items["type"] == "array" and items["items"]["type"] == "string"
    assert pairs["items"]["required"] == ["key", "value"] and pairs["items"]["properties"]["value"] == {
        "type": "number"
    }
    for k in ("scalar", "list", "pairs"):
        fmt = aggregation_format(k)
        assert fmt.schema["required"] == ["answer"] and fmt.schema["additionalProperties"] is False
    with pytest.raises(InputError, match="unknown answer kind 'table'"):
        aggregation_format("table")


def test_valid_replies_parse_to_items_in_the_ground_truths_shape() -> None:
    assert aggregation_format("scalar").parse('{"answer": 93}') == ["93"]
    assert aggregation_format("scalar").parse('{"answer": 1449.310}') == ["1449.31"]
    assert aggregation_format("scalar").parse(' {"answer": 12.0} ') == ["12"]
    assert aggregation_format("list").parse('{"answer": ["AUS", " BOS "]}') == ["AUS", "BOS"]
    assert aggregation_format("list").parse('{"answer": []}') == []
    reply = '{"answer": [{"key": "EWR", "value": 9.97}, {"key": "Korea, Rep.", "value": 3}]}'
    assert aggregation_format("pairs").parse(reply) == ["EWR: 9.97", "Korea, Rep.: 3"]


@pytest.mark.parametrize(
    ("kind", "reply"),
    [
        ("scalar", "93"),  # a bare number, not the object
        ("scalar", '{"answer": "93"}'),  # a string, not a number
        ("scalar", '{"answer": 93} and more'),  # text after the JSON
        ("scalar", '{"answer": NaN}'),
        ("list", '{"answer": ["AUS", "BOS"'),  # truncated at max_tokens
        ("list", '{"answer": ["AUS"], "why": "x"}'),  # an extra key
        ("list", '{"answer": [""]}'),  # a blank item
        ("list", "Answer: AUS, BOS"),  # free text
        ("pairs", '{"answer": [{"key": "EWR"}]}'),  # no value
        ("pairs", '{"answer": [{"key": "EWR", "value": "9.97"}]}'),
        ("pairs", '{"answer": ["EWR: 9.97"]}'),
    ],
)
def test_bad_replies_are_refused_not_repaired(kind: str, reply: str) -> None:
    with pytest.raises(ReplyFormatError):
        aggregation_format(kind).parse(reply)


def test_numbers_are_written_as_the_ground_truth_writes_them() -> None:
    assert [format_number(v) for v in (93, 93.0, 8.05, -0.5, 1 / 3)] == ["93", "93", "8.05", "-0.5", "0.333333"]


def test_the_kind_comes_from_the_data_else_from_the_question() -> None:
    assert answer_kind("How many flights?", {"answer": {"kind": "pairs"}}) == "pairs"
    assert answer_kind("How many flights departed from EWR in 2013?", {"benchmark": "x"}) == "scalar"
    assert answer_kind("Which destinations did carrier B6 fly to?", None) == "list"
    assert guess_kind("How many penguins were observed on each island?") == "pairs"
    assert guess_kind("What was the average distance of the flights?") == "scalar"
    assert guess_kind("Which countries had a life expectancy below 55 years?") == "list"
    assert guess_kind("What is the average calorie count per restaurant?") == "pairs"
