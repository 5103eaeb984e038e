"""ctxsel.inputs: the one rule for numbers (scores, budgets, counts), as the Python API applies it.

The CLI (tests/cli/test_cli_surfaces.py) and HTTP (tests/service/test_http.py::TestNumbers) tests
assert that they give these same messages.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ctxsel
from ctxsel.errors import InputError, InputTypeError, SpecError
from ctxsel.inputs import as_budget, as_count, as_int, as_scores, check_chunk_shapes
from ctxsel.query import Query
from ctxsel.selectors import get_selector
from tests.support.cli import run_cli

QUESTION = "How heavy is the meteorite?"
CHUNKS = [
    "The meteorite in the museum weighs three kilograms.",
    "The museum opens at noon on Sundays.",
    "Bananas are a yellow fruit.",
]
NONFINITE = "scores: 1 score(s) are NaN or infinite (chunk positions 0); fix the scorer, or pass nan_policy='last'"


def python_message(**kw: Any) -> str:
    """What ``ctxsel.select`` says for these arguments (it must refuse them)."""
    kw = {"method": "top-k@1", "scores": [0.1, 0.9, 0.5], **kw}
    with pytest.raises(InputError) as e:
        ctxsel.select(QUESTION, CHUNKS, kw.pop("method"), **kw)
    return str(e.value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(5, 5), (np.int64(7), 7), (5.0, 5), (1e9, 1_000_000_000), (np.float32(3.0), 3)],
)
def test_an_integer_is_an_int_or_a_whole_finite_float(value: object, expected: int) -> None:
    got = as_int("k", value)
    assert got == expected and type(got) is int


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (float("nan"), InputError, "k must be an integer, got nan: pass a finite whole number"),
        (math.inf, InputError, "k must be an integer, got inf: pass a finite whole number"),
        (float("1e999"), InputError, "k must be an integer, got inf: pass a finite whole number"),
        (2.5, InputError, "k must be an integer, got 2.5: pass a whole number"),
        (True, InputTypeError, "k must be an integer, got True"),
        (np.bool_(True), InputTypeError, "k must be an integer, got"),
        ("10", InputTypeError, "k must be an integer, got '10': pass a number, not text"),
        (None, InputTypeError, "k must be an integer, got None"),
    ],
)
def test_an_integer_refuses_everything_else_with_one_message(value: object, error: type, message: str) -> None:
    with pytest.raises(error) as e:
        as_int("k", value)
    assert str(e.value).startswith(message)


def test_budgets_and_counts() -> None:
    assert as_budget("max_tokens", None) is None and as_budget("max_tokens", 100.0) == 100
    assert as_count("min_k", 0) == 0
    with pytest.raises(InputError, match=r"^max_tokens must be >= 0 or None, got -1$"):
        as_budget("max_tokens", -1)
    with pytest.raises(InputError, match=r"^min_k must be >= 0, got -2$"):
        as_count("min_k", -2)


@pytest.mark.parametrize(
    ("scores", "expected"),
    [
        ([0.1, 2, 3.5], [0.1, 2.0, 3.5]),
        ((1, 2), [1.0, 2.0]),
        (np.array([0.5, 0.25], dtype=np.float32), [0.5, 0.25]),
        ([np.float64(1.5), Fraction(1, 2)], [1.5, 0.5]),
        ([float("nan"), math.inf], [math.nan, math.inf]),  # non-finite: the nan_policy decides, later
        ([], []),
    ],
)
def test_scores_that_are_numbers(scores: Any, expected: list[float]) -> None:
    got = as_scores(scores)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, np.array(expected, dtype=np.float64))


@pytest.mark.parametrize(
    ("scores", "message"),
    [
        (["0.1", 0.9, 0.5], "scores[0] must be a number, got '0.1' (a str): pass numbers, one per chunk"),
        ([0.1, True, 0.5], "scores[1] must be a number, got True (a bool)"),
        (np.array([True, False]), "scores[0] must be a number, got True (a bool)"),
        ([0.1, None], "scores[1] must be a number, got None (a NoneType)"),
        ("0.1,0.2", "scores must be a sequence of numbers (one per chunk), got a str"),
        ([1, 10**400], "scores must be numbers that fit a float"),
    ],
)
def test_scores_that_are_not_numbers_are_refused(scores: Any, message: str) -> None:
    with pytest.raises(InputError) as e:
        as_scores(scores)
    assert str(e.value).startswith(message), str(e.value)


# -- the Python API ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [float("nan"), math.inf, float("1e999")])
def test_select_refuses_nonfinite_scores_by_default_and_ranks_them_last_when_asked(bad: float) -> None:
    assert python_message(scores=[bad, 0.9, 0.5]).startswith(NONFINITE)
    sel = ctxsel.select(QUESTION, CHUNKS, "top-k@3", scores=[bad, 0.9, 0.5], nan_policy="last")
    assert sel.ids[:2] == ["1", "2"]  # whether the last one keeps chunk 0 is issue 45's nan_policy row


def test_select_refuses_numeric_strings_as_scores() -> None:
    with pytest.raises(InputTypeError, match=r"^scores\[1\] must be a number, got '0.9' \(a str\)"):
        ctxsel.select(QUESTION, CHUNKS, "top-k@1", scores=[0.1, "0.9", 0.5])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_tokens": float("nan")}, "max_tokens must be an integer, got nan: pass a finite whole number"),
        ({"max_tokens": math.inf}, "max_tokens must be an integer, got inf: pass a finite whole number"),
        ({"max_tokens": 2.5}, "max_tokens must be an integer, got 2.5: pass a whole number"),
        ({"max_tokens": True}, "max_tokens must be an integer, got True"),
        ({"max_tokens": "10"}, "max_tokens must be an integer, got '10': pass a number, not text"),
        ({"max_tokens": -1}, "max_tokens must be >= 0 or None, got -1"),
        ({"min_k": float("nan")}, "min_k must be an integer, got nan: pass a finite whole number"),
        ({"min_k": "2"}, "min_k must be an integer, got '2': pass a number, not text"),
        ({"min_k": 1.5}, "min_k must be an integer, got 1.5: pass a whole number"),
    ],
)
def test_select_refuses_bad_budgets_and_min_k(options: dict[str, Any], message: str) -> None:
    assert python_message(**options) == "bad options for method 'top-k': " + message


def test_a_budget_in_the_spec_is_checked_the_same_way() -> None:
    with pytest.raises(SpecError) as e:
        get_selector("adaptive-k[max_tokens=nan]")
    assert str(e.value) == (
        "bad options for method 'adaptive-k': max_tokens must be an integer, got nan: pass a finite whole number"
    )
    assert python_message(method="adaptive-k[max_tokens=nan]") == str(e.value)


def test_whole_float_budgets_and_k_are_integers() -> None:
    sel = ctxsel.select(QUESTION, CHUNKS, "top-k@1e9", scores=[0.1, 0.9, 0.5], max_tokens=1e9, min_k=2.0)
    assert sel.ids == ["1", "2", "0"]
    assert sel.config["k"] == 1_000_000_000 and sel.config["max_tokens"] == 1_000_000_000
    assert sel.config["min_k"] == 2 and type(sel.config["max_tokens"]) is int
    assert python_message(method="top-k@1.5").endswith("k must be an integer, got 1.5: pass a whole number")
    assert python_message(method="top-k@1e999").endswith("k must be an integer, got inf: pass a finite whole number")


# -- chunks: one check of every shape (issue 45) -------------------------------------------------------------------

BAD_CHUNKS: list[tuple[list[Any], str]] = [
    (
        [{"id": 1.5, "text": "a"}],
        'chunks[0].id must be a string or an integer, got 1.5 (a float): pass ids such as "c1" or 7',
    ),
    ([{"id": True, "text": "a"}], "chunks[0].id must be a string or an integer, got True (a bool)"),
    ([{"id": "", "text": "a"}], "chunks[0].id is empty: give each chunk a non-empty id"),
    ([{"id": "a", "text": 3}], "chunks[0].text must be a string, got int"),
    ([{"id": "a", "txt": "x"}], "chunks[0] has unknown field 'txt': a chunk takes id, text, doc_id, position"),
    ([{"text": "a"}], "chunks[0] has no 'id': give each chunk an id, or pass the texts as plain strings"),
    ([{"id": "a", "text": "b", "position": "x"}], "chunks[0].position must be an integer, got 'x'"),
    (["a", 5], "chunks[1] must be a text, a Chunk or an object with 'id' and 'text', got int"),
]


def test_dict_chunks_are_accepted_by_select_and_pipeline_as_http_takes_them() -> None:
    chunks: list[dict[str, Any]] = [
        {"id": "m", "text": CHUNKS[0], "doc_id": "museum", "meta": {"page": 3}},
        {"id": "f", "text": CHUNKS[2]},
    ]
    sel = ctxsel.select(QUESTION, chunks, "top-k@1", scores=[0.9, 0.1])
    assert sel.ids == ["m"] and sel.chunks[0].doc_id == "museum" and sel.chunks[0].meta == {"page": 3}
    assert ctxsel.Pipeline.from_spec("top-k@2").select(QUESTION, chunks, [0.1, 0.9]).ids == ["f", "m"]


def test_an_integer_chunk_id_is_its_decimal_string_everywhere() -> None:
    sel = ctxsel.select(
        QUESTION, [{"id": 7, "text": CHUNKS[0]}, {"id": np.int64(8), "text": CHUNKS[1]}], "top-k@2", scores=[0.1, 0.9]
    )
    assert sel.ids == ["8", "7"]
    with pytest.raises(InputError, match="duplicate chunk id '7'"):
        ctxsel.select(QUESTION, [{"id": 7, "text": "a"}, {"id": "7", "text": "b"}], "top-k@1", scores=[0.1, 0.2])


@pytest.mark.parametrize(("chunks", "message"), BAD_CHUNKS)
def test_a_bad_chunk_is_one_line_naming_it(chunks: list[Any], message: str) -> None:
    with pytest.raises(InputError) as e:
        ctxsel.select(QUESTION, chunks, "top-k@1", scores=[0.5] * len(chunks))
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def _http(service_client: Any) -> Any:
    from ctxsel.service.settings import ServiceSettings

    return service_client(ServiceSettings(scorer="keywords"))


def test_http_takes_integer_ids_and_refuses_bad_chunks_with_the_python_message(service_client: Any) -> None:
    client = _http(service_client)
    body = {"question": QUESTION, "chunks": [{"id": 7, "text": CHUNKS[0]}, "x"], "scores": [0.9, 0.1]}
    r = client.post("/select", json={**body, "method": "top-k@2"})
    assert r.status_code == 200 and r.json()["ids"] == ["7", "1"]
    for chunks, message in BAD_CHUNKS:
        r = client.post("/select", json={**body, "chunks": chunks, "scores": [0.5] * len(chunks)})
        assert r.status_code == 422, r.text
        with pytest.raises(InputError) as e:
            ctxsel.select(QUESTION, chunks, "top-k@1", scores=[0.5] * len(chunks))
        assert r.json()["message"] == str(e.value) and r.json()["message"].startswith(message)


def test_a_jsonl_document_of_chunks_takes_the_same_ids(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    doc = tmp_path / "chunks.jsonl"
    doc.write_text('{"id": 7, "text": "The meteorite weighs three kilograms."}\n{"id": "b", "text": "Bananas."}\n')
    rc, out, _ = run_cli(
        capsys,
        "select",
        "--document",
        str(doc),
        "--question",
        QUESTION,
        "--scorer",
        "keywords",
        "--json",
        "--method",
        "top-k@1",
    )
    assert rc == 0 and json.loads(out)["ids"] == ["7"]
    doc.write_text('{"id": 1.5, "text": "a"}\n')
    rc, out, err = run_cli(capsys, "select", "--document", str(doc), "--question", QUESTION, "--scorer", "keywords")
    assert (
        rc == 2
        and err
        == f'ctxsel select: error: {doc}:1: chunks[0].id must be a string or an integer, got 1.5 (a float): pass ids such as "c1" or 7\n'
    )


# -- the question ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "named"),
    [
        ("\u200b", "U+200B ZERO WIDTH SPACE"),
        ("\ufeff \u200d\n", "U+FEFF ZERO WIDTH NO-BREAK SPACE"),
        ("\u2066\u2069", "U+2066 LEFT-TO-RIGHT ISOLATE"),
    ],
)
def test_a_question_of_only_invisible_characters_is_empty(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, question: str, named: str
) -> None:
    message = (
        f"question is empty (or only whitespace); its only other characters are invisible ({named}): there is "
        "nothing to rank the chunks against; pass the question's text"
    )
    with pytest.raises(InputError) as e:
        ctxsel.select(question, CHUNKS, "top-k@1", scores=[0.1, 0.9, 0.5])
    assert str(e.value) == message
    doc = tmp_path / "doc.md"
    doc.write_text("\n\n".join(CHUNKS), encoding="utf-8")
    rc, out, err = run_cli(capsys, "select", "--document", str(doc), "--question", question, "--scorer", "keywords")
    assert rc == 2 and out == "" and err == f"ctxsel select: error: --question: {message}\n"
    assert ctxsel.select("\u200bheavy?\u200b", CHUNKS, "top-k@1", scores=[0.1, 0.9, 0.5]).ids == ["1"]


def test_http_refuses_an_invisible_question_with_the_python_message(service_client: Any) -> None:
    r = _http(service_client).post(
        "/select", json={"question": "\u200b\u200c", "chunks": CHUNKS, "scores": [0.1, 0.9, 0.5]}
    )
    assert r.status_code == 422 and r.json()["message"].startswith(
        "question is empty (or only whitespace); its only other characters are invisible (U+200B ZERO WIDTH SPACE)"
    )


def test_chunk_shapes_take_texts_as_they_are_and_the_query_names_a_bad_text_by_id() -> None:
    texts = ["plain", "caf\u00e9"]
    assert check_chunk_shapes(texts) is texts
    objects = [{"id": 7, "text": "x"}, {"id": "b", "text": "y"}]
    assert check_chunk_shapes(objects) == [{"id": "7", "text": "x"}, {"id": "b", "text": "y"}]  # an int id as text
    with pytest.raises(InputError, match=r"chunk 'b' contains a lone surrogate U\+D800 at character 1"):
        Query("q", [{"id": "a", "text": "x"}, {"id": "b", "text": "y\ud800"}])
    with pytest.raises(InputError, match="duplicate chunk id 'a'"):
        Query("q", [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}])
