"""The command line says what the other surfaces say (issue 42, item 7): ``--choice``, the JSON of
``ctxsel select --json`` in POST /select's shape, ``-`` for standard input, and a quiet end when the
output pipe closes. Keyword scorer: no model."""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import ctxsel
from ctxsel.cli.main import EXIT_CLOSED_PIPE, build_parser, main
from tests.support.cli import ctxsel_command
from tests.support.cli import run_cli as run

DOC = (
    "# Museum\n\n"
    "The meteorite in the museum weighs three kilograms.\n\n"
    "The museum opens at noon on Sundays.\n\n"
    "# Fruit\n\n"
    "Bananas are a yellow fruit.\n"
)
QUESTION = "How heavy is the meteorite?"


@pytest.fixture
def doc(tmp_path: Path) -> Path:
    p = tmp_path / "doc.md"
    p.write_text(DOC, encoding="utf-8")
    return p


def stdin_of(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


# -- --choice ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["select", "answer"])
@pytest.mark.parametrize("flag", ["--choice", "--option"])
def test_choice_and_its_alias_option(command: str, flag: str) -> None:
    argv = [command, "--document", "d.md", "--question", "q", flag, "Orla", flag, "Jory"]
    assert build_parser().parse_args(argv).choices == ["Orla", "Jory"]
    assert build_parser().parse_args(argv[:5]).choices is None


def test_help_names_choice_and_the_alias(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["answer", "--help"])
    out = capsys.readouterr().out
    assert "--choice TEXT, --option TEXT" in out and "--option is an alias" in " ".join(out.split())


# -- select --json is POST /select's response ---------------------------------------------------------------------


def _http_select(body: dict[str, Any]) -> dict[str, Any]:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from ctxsel.service import ServiceSettings, create_app

    with TestClient(create_app(ServiceSettings(scorer="keywords"))) as client:
        end = time.monotonic() + 60
        while client.get("/health").json()["status"] == "starting" and time.monotonic() < end:
            time.sleep(0.05)
        res = client.post("/select", json=body)
        assert res.status_code == 200, res.text
        out: dict[str, Any] = res.json()
        return out


@pytest.mark.parametrize("method", ["top-k@2", "adaptive-k"])
def test_select_json_has_the_keys_and_values_of_post_select(
    capsys: pytest.CaptureFixture[str], doc: Path, method: str
) -> None:
    rc, out, err = run(
        capsys, "select", "--document", str(doc), "--question", QUESTION, "--scorer", "keywords", "--method", method
    )
    assert rc == 0 and err == ""
    rc, out, err = run(
        capsys,
        *["select", "--document", str(doc), "--question", QUESTION],
        *["--scorer", "keywords", "--method", method, "--json"],
    )
    assert rc == 0 and err == ""
    cli = json.loads(out)
    http = _http_select({"question": QUESTION, "document": DOC, "method": method})
    assert set(cli) == set(http)
    assert set(cli["chunks"][0]) == set(http["chunks"][0])
    assert cli == http  # the same input, the same selection, the same words
    assert cli["ids"][0] == "0" and cli["n_candidates"] == 3
    assert cli["chunks"][0]["text"] == "# Museum\nThe meteorite in the museum weighs three kilograms."


def test_headings_option_is_the_same_on_both(capsys: pytest.CaptureFixture[str], doc: Path) -> None:
    argv = ["select", "--document", str(doc), "--question", QUESTION, "--scorer", "keywords", "--method", "full"]
    rc, out, _ = run(capsys, *argv, "--headings", "separate", "--json")
    cli = json.loads(out)
    http = _http_select({"question": QUESTION, "document": DOC, "method": "full", "headings": "separate"})
    assert rc == 0 and cli == http
    assert cli["n_candidates"] == 5 and [c["text"] for c in cli["chunks"] if c["id"] == "0"] == ["# Museum"]


def test_jsonable_is_what_both_write() -> None:
    """numpy values from a selector's meta become JSON values; NaN becomes null (strict JSON)."""
    import numpy as np

    from ctxsel.types import jsonable

    got = jsonable({"a": np.float32(1.5), "b": (np.nan, 2), 3: np.arange(2), "c": np.bool_(True)})
    assert got == {"a": 1.5, "b": [None, 2], "3": [0, 1], "c": True}
    assert json.dumps(got, allow_nan=False)


# -- standard input ------------------------------------------------------------------------------------------------


def test_document_from_standard_input(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    stdin_of(monkeypatch, DOC.encode())
    rc, out, err = run(
        capsys, "select", "--document", "-", "--question", QUESTION, "--scorer", "keywords", "--method", "top-k@1"
    )
    assert rc == 0 and err == ""
    assert out.splitlines()[0] == "top-k: kept 1 of 3 chunks, 13 of 31 tokens"


def test_question_from_standard_input(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, doc: Path
) -> None:
    stdin_of(monkeypatch, b"\n  How heavy is the meteorite?  \n")
    rc, out, _ = run(
        capsys,
        *["select", "--document", str(doc), "--question-file", "-", "--scorer", "keywords"],
        *["--method", "top-k@1", "--json"],
    )
    assert rc == 0 and json.loads(out)["ids"] == ["0"]


@pytest.mark.parametrize(
    ("argv", "data", "message"),
    [
        (
            ["--document", "-", "--question", "q"],
            "café".encode("latin-1"),
            "--document - (standard input) is not valid UTF-8",
        ),
        (["--document", "-", "--question", "q"], b"  \n", "--document - has no text to select from"),
        (["--document", "DOC", "--question-file", "-"], b"\xff\xfeq\x00", "--question-file - (standard input) is not"),
        (["--document", "DOC", "--question-file", "-"], b"\n", "--question-file -: the file is empty"),
        (["--document", "-", "--question-file", "-"], b"q", "both read standard input"),
    ],
)
def test_standard_input_errors_are_one_line(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    doc: Path,
    argv: list[str],
    data: bytes,
    message: str,
) -> None:
    stdin_of(monkeypatch, data)
    argv = [str(doc) if a == "DOC" else a for a in argv]
    rc, out, err = run(capsys, "select", *argv, "--scorer", "keywords")
    assert rc == 2 and out == ""
    assert err.startswith("ctxsel select: error: ") and message in err
    assert len(err.strip().splitlines()) == 1


def test_standard_input_above_max_bytes(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    stdin_of(monkeypatch, DOC.encode())
    rc, _, err = run(capsys, "select", "--document", "-", "--question", "q", "--max-bytes", "10")
    assert rc == 2 and "--document - (standard input) is above the 10-byte limit" in err


# -- a closed output pipe --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["select", "--document", "DOC", "--question", QUESTION, "--scorer", "keywords"],
        ["select", "--document", "DOC", "--question", QUESTION, "--scorer", "keywords", "--json"],
        ["env"],
        ["eval", "--dataset", "example", "--methods", "top-k@1", "--scorer", "keywords", "--output", "OUT"],
    ],
    ids=["select", "select-json", "env", "eval"],
)
def test_a_closed_output_pipe_ends_quietly(doc: Path, tmp_path: Path, argv: list[str]) -> None:
    argv = [str(doc) if a == "DOC" else str(tmp_path / "o") if a == "OUT" else a for a in argv]
    proc = subprocess.Popen(
        [*ctxsel_command(), *argv, "--no-progress"] if argv[0] != "env" else [*ctxsel_command(), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first line (as `| head -0` would be)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == EXIT_CLOSED_PIPE == 141, err
    assert err == ""  # no traceback, no "Exception ignored", no error line


def test_head_reads_the_first_line(doc: Path) -> None:
    """``ctxsel select ... | head -1``: the line arrives; the exit is 0 or 141 (as a pipe's timing has it)."""
    proc = subprocess.run(
        f"{' '.join(ctxsel_command())} select --document {doc} --question 'How heavy?' --scorer keywords | head -1; "
        'echo "status ${PIPESTATUS[0]}" >&2',
        shell=True,
        executable="/bin/bash",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.stdout.startswith("adaptive-k: kept 2 of 3 chunks")
    assert proc.stderr.strip() in ("status 0", "status 141")


# -- numbers: the Python API's rule and message ---------------------------------------------------------------------


def _python_refusal(method: str, scores: list[Any]) -> str:
    with pytest.raises(ValueError) as e:
        ctxsel.select(QUESTION, ["a", "b", "c"], method, scores=scores)
    return str(e.value)


@pytest.mark.parametrize(
    ("text", "python_scores"),
    [
        ("[NaN, 0.9, 0.5]", [math.nan, 0.9, 0.5]),
        ("[Infinity, 0.9, 0.5]", [math.inf, 0.9, 0.5]),
        ("[1e999, 0.9, 0.5]", [math.inf, 0.9, 0.5]),
        ("nan\n0.9\n0.5\n", [math.nan, 0.9, 0.5]),
        ('["0.1", 0.9, 0.5]', ["0.1", 0.9, 0.5]),
        ("[0.1, true, 0.5]", [0.1, True, 0.5]),
    ],
)
def test_scores_file_numbers_get_the_python_verdict(
    capsys: pytest.CaptureFixture[str], doc: Path, tmp_path: Path, text: str, python_scores: list[Any]
) -> None:
    scores = tmp_path / "scores.txt"
    scores.write_text(text, encoding="utf-8")
    rc, out, err = run(
        capsys, "select", "--document", str(doc), "--question", QUESTION, "--method", "top-k@1", "--scores", str(scores)
    )
    expected = _python_refusal("top-k@1", python_scores)
    assert rc == 2 and out == ""
    assert err.strip().endswith(expected), err  # "--scores FILE: " comes first for a file's own fault
    assert err.count("\n") == 1 and "Traceback" not in err


def test_scores_file_with_nan_policy_last_ranks_the_nan_after(
    capsys: pytest.CaptureFixture[str], doc: Path, tmp_path: Path
) -> None:
    scores = tmp_path / "scores.json"
    scores.write_text("[NaN, 0.9, 0.5]", encoding="utf-8")
    rc, out, _ = run(
        capsys,
        *["select", "--document", str(doc), "--question", QUESTION, "--scores", str(scores), "--json"],
        *["--method", "top-k[k=2,nan_policy=last]"],
    )
    assert rc == 0 and json.loads(out)["ids"] == ["1", "2"]


@pytest.mark.parametrize(
    "method",
    [
        "adaptive-k[max_tokens=nan]",
        "top-k[max_tokens=inf]",
        "top-k[max_tokens=2.5]",
        "top-k[max_tokens=true]",
        "top-k[min_k=nan]",
        "top-k@1.5",
        "top-k@1e999",
        "top-k[k=1,k=2]",
        "top-k@５",
        "top-k@1_0",
    ],
)
def test_method_spec_numbers_get_the_python_verdict(capsys: pytest.CaptureFixture[str], doc: Path, method: str) -> None:
    rc, out, err = run(
        capsys, "select", "--document", str(doc), "--question", QUESTION, "--scorer", "keywords", "--method", method
    )
    assert rc == 2 and out == ""
    assert err == f"ctxsel select: error: {_python_refusal(method, [0.1, 0.9, 0.5])}\n"


def test_a_whole_float_k_is_accepted_as_in_python(capsys: pytest.CaptureFixture[str], doc: Path) -> None:
    rc, out, _ = run(
        capsys,
        *["select", "--document", str(doc), "--question", QUESTION, "--scorer", "keywords", "--json"],
        *["--method", "top-k@1e9"],
    )
    assert rc == 0 and json.loads(out)["k"] == 3
    assert json.loads(out)["config"]["k"] == 1_000_000_000


# -- bytes that are not UTF-8 (issue 45) ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "data", "message"),
    [
        (
            "--question-file",
            b"a\xffb",
            "--question-file - (standard input) is not valid UTF-8 (byte 0xFF at offset 1: invalid start byte); convert it",
        ),
        (
            "--document",
            "caf\u00e9 au lait".encode("latin-1"),
            "--document - (standard input) is not valid UTF-8 (byte 0xE9 at offset 3: invalid continuation byte)",
        ),
        (
            "--question-file",
            "\u200b\n".encode(),
            "--question-file -: question is empty (or only whitespace); its only other characters are invisible (U+200B ZERO WIDTH SPACE)",
        ),
    ],
)
def test_standard_input_that_is_not_utf8_names_the_byte_and_its_offset(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, doc: Path, flag: str, data: bytes, message: str
) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    other = ["--question", QUESTION] if flag == "--document" else ["--document", str(doc)]
    rc, out, err = run(capsys, "select", flag, "-", *other, "--scorer", "keywords")
    assert rc == 2 and out == "" and err.startswith(f"ctxsel select: error: {message}"), err
    assert err.count("\n") == 1


def test_a_question_argument_that_is_not_utf8_names_the_byte(doc: Path) -> None:
    """argv bytes reach Python as lone surrogates; the message names the byte, not the surrogate."""
    argv = [*ctxsel_command(), "select", "--document", str(doc), "--scorer", "keywords", "--question"]
    res = subprocess.run([*map(os.fsencode, argv), b"ab\xff?"], capture_output=True, timeout=120)
    assert res.returncode == 2 and res.stdout == b""
    assert res.stderr.decode() == (
        "ctxsel select: error: --question is not valid UTF-8 (byte 0xFF at offset 2); set a UTF-8 locale, or write "
        "the question to a UTF-8 file and pass --question-file\n"
    )


# -- flag values: one line, the Python API's rule (issue 45) --------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        (
            "--expand",
            "links[boost=1e308]",
            "--expand: bad options for expansion stage 'links': boost must be >= 0 and < 1000000, got 1e+308",
        ),
        ("--expand", "links[boost=1,boost=2]", "--expand: option 'boost' is given twice"),
        ("--scorer", "nope", "--scorer: unknown scorer 'nope'; choose dense, bm25, keywords, hybrid"),
        ("--max-tokens", "1_0", "--max-tokens: value '1_0': write a number with the ASCII digits 0-9"),
        ("--max-chunk-tokens", "0", "--max-chunk-tokens: must be at least 1, got 0"),
        ("--max-chunk-tokens", "2.5", "--max-chunk-tokens: expected an integer, got '2.5'"),
    ],
)
def test_a_bad_flag_value_is_one_line_without_the_usage(
    capsys: pytest.CaptureFixture[str], doc: Path, flag: str, value: str, message: str
) -> None:
    code: object
    try:  # argparse exits for a flag's own type; --max-tokens is checked by ctxsel.select, after the question
        code = main(["select", "--document", str(doc), "--question", QUESTION, "--scorer", "keywords", flag, value])
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith(f"ctxsel select: error: {message}") and err.count("\n") == 1, err
    assert "usage:" not in err


@pytest.mark.parametrize(
    ("flag", "value", "python"),
    [
        ("--max-tokens", "2.5", {"max_tokens": 2.5}),
        ("--max-tokens", "nan", {"max_tokens": math.nan}),
        ("--max-tokens", "abc", {"max_tokens": "abc"}),
        ("--max-tokens", "-1", {"max_tokens": -1}),
        ("--min-k", "1.5", {"min_k": 1.5}),
        ("--min-k", "inf", {"min_k": math.inf}),
    ],
)
def test_number_flags_get_the_python_verdict(
    capsys: pytest.CaptureFixture[str], doc: Path, flag: str, value: str, python: dict[str, Any]
) -> None:
    with pytest.raises(ValueError) as e:
        ctxsel.select(QUESTION, ["a", "b", "c"], "top-k@1", scores=[0.1, 0.9, 0.5], **python)
    rc, out, err = run(
        capsys,
        "select",
        "--document",
        str(doc),
        "--question",
        QUESTION,
        "--scorer",
        "keywords",
        "--method",
        "top-k@1",
        flag,
        value,
    )
    assert rc == 2 and out == "" and err == f"ctxsel select: error: {e.value}\n"


def test_whole_float_budgets_on_the_command_line_are_integers(capsys: pytest.CaptureFixture[str], doc: Path) -> None:
    rc, out, _ = run(
        capsys,
        *["select", "--document", str(doc), "--question", QUESTION, "--scorer", "keywords", "--json"],
        *["--method", "top-k@1", "--max-tokens", "1e9", "--min-k", "2.0"],
    )
    config = json.loads(out)["config"]
    assert rc == 0 and config["max_tokens"] == 1_000_000_000 and config["min_k"] == 2
