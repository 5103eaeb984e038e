"""Bad inputs to the Python API and the command line (issue 17, items 5-8, 12, 13 and more).

Each test is a row of the table in docs/reliability.md ("Inputs to the API and the CLI"): it
asserts the exception type or exit code (2 for usage errors), the message's key words, and that no
traceback reaches the user. CLI tests call ``main`` in process with the keyword scorer (no model);
a subprocess is used where a real traceback must be ruled out.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import ctxsel
from ctxsel.chunking import DEFAULT_MAX_CHUNK_TOKENS, Method, chunk_text, fit_to_max_tokens
from ctxsel.cli.main import build_parser, main
from ctxsel.integrations._core import select_positions
from ctxsel.selectors import get_selector
from ctxsel.tokens import count_tokens
from ctxsel.types import Chunk

DOC = (
    "The meteorite in the museum weighs three kilograms.\n\n"
    "The museum opens at noon on Sundays.\n\n"
    "Bananas are a yellow fruit.\n"
)
QUESTION = "How heavy is the meteorite?"
CHUNKS = ["The meteorite weighs 3 kg.", "Parking is limited.", "Tickets cost 8 euros."]


@pytest.fixture
def doc(tmp_path: Path) -> Path:
    p = tmp_path / "doc.txt"
    p.write_text(DOC, encoding="utf-8")
    return p


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``ctxsel ARGV`` in process: (exit code, stdout, stderr); argparse's exits become codes."""
    try:
        rc = main(list(argv))
    except SystemExit as e:
        rc = int(e.code or 0)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run ``ctxsel ARGV``, expect exit 2 and nothing on stdout; return stderr."""
    rc, out, err = cli(capsys, *argv)
    assert rc == 2, (out, err)
    assert out == ""
    return err


def select_cmd(doc: Path, *more: str) -> list[str]:
    return ["select", "--document", str(doc), "--scorer", "keywords", *more]


def console(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ctxsel.cli.main", *argv], capture_output=True, text=True, timeout=300)


# -- item 5: one string where a sequence of chunks is expected ---------------------------------------------------------


def test_i1_select_with_one_string_as_chunks_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"single str of 11 characters.*\[text\] for one chunk"):
        ctxsel.select(QUESTION, "a string!!!", method="top-k@1", scores=[1.0])
    with pytest.raises(TypeError, match="single bytes"):
        ctxsel.select(QUESTION, b"some bytes", method="top-k@1")  # type: ignore[arg-type]  # on purpose


def test_i2_bytes_chunk_names_the_position_and_the_fix() -> None:
    with pytest.raises(
        TypeError,
        match=r"chunks\[1\] must be a text, a Chunk or an object with .id. and .text., got bytes: decode it first",
    ):
        ctxsel.select(QUESTION, ["ok", b"raw"], method="top-k@1", scores=[1.0, 0.5])  # type: ignore[list-item]  # on purpose


def test_i3_integrations_reject_one_string_of_documents() -> None:
    selector = get_selector("top-k@1")
    with pytest.raises(TypeError, match="chunks must be a sequence of chunk texts or Chunks, got a single str"):
        select_positions(QUESTION, "abc", selector, None, scores=[1.0, 2.0, 3.0])
    lc = pytest.importorskip("ctxsel.integrations.langchain")
    with pytest.raises(TypeError, match="documents must be a list of langchain Document objects, got a single str"):
        lc.select_documents(documents="a whole document as one string", query=QUESTION, method="full")
    hs = pytest.importorskip("ctxsel.integrations.haystack")
    with pytest.raises(TypeError, match=r"documents\[0\] is a str, not a haystack Document"):
        hs.CtxselSelector(method="full").run(documents=["one text"], query=QUESTION)
    li = pytest.importorskip("ctxsel.integrations.llamaindex")
    with pytest.raises(TypeError, match="list of llama_index NodeWithScore objects, got a single str of 3 characters"):
        li.CtxselPostprocessor(method="full").postprocess_nodes("abc", query_str=QUESTION)


# -- item 6: the dense model's window ----------------------------------------------------------------------------------

FILLER = " ".join(["The garden has roses and tulips and the gardener waters them every morning."] * 40)
LONG_RELEVANT = FILLER + " The meteorite in the museum weighs 3.2 kilograms."


@pytest.fixture(scope="module")
def dense() -> object:
    from ctxsel.scoring import get_scorer

    return get_scorer("dense", cache=False)


@pytest.mark.model
def test_i4_truncated_chunk_is_counted_warned_and_max_window_finds_the_sentence(dense: object) -> None:
    from ctxsel.errors import TruncationWarning
    from ctxsel.scoring.dense import DenseScorer

    chunks = ["Tickets cost 8 euros.", LONG_RELEVANT, "Parking is limited near the museum."]
    with pytest.warns(TruncationWarning, match=r"1 chunk\(s\) longer than .*256-token window.*long_chunks=max_window"):
        cut = ctxsel.select(QUESTION, chunks, "top-k@3", scorer=dense)
    assert cut.meta["truncated"] == {"question": False, "chunks": 1, "windowed_chunks": 0, "window_tokens": 256}
    assert cut.ids[0] != "1"  # the relevant sentence lies past the window: the long chunk is not first
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a scorer warns once per kind; the meta still counts every call
        again = ctxsel.select(QUESTION, chunks, "top-k@3", scorer=dense)
    assert again.meta["truncated"]["chunks"] == 1

    windowed = DenseScorer(cache=False, long_chunks="max_window")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing was cut: no warning
        best = ctxsel.select(QUESTION, chunks, "top-k@3", scorer=windowed)
    assert best.ids[0] == "1"
    assert best.meta["truncated"] == {"question": False, "chunks": 0, "windowed_chunks": 1, "window_tokens": 256}
    top, truncated = best.scores[0], cut.scores[cut.ids.index("1")]
    assert top is not None and truncated is not None and top > truncated + 0.2


@pytest.mark.model
def test_i4_a_new_scorer_over_the_cache_counts_long_chunks_without_tokenising(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ctxsel.scoring.dense import DenseScorer
    from ctxsel.scoring.windows import ModelWindow

    chunks = ["Tickets cost 8 euros.", LONG_RELEVANT, "Parking is limited near the museum."]
    first = DenseScorer(cache=tmp_path / "e.sqlite")
    with pytest.warns(UserWarning, match="256-token window"):
        _, notes = first.score_detailed(QUESTION, ctxsel.types.as_chunks(chunks))
    assert notes["truncated"]["chunks"] == 1

    def no_tokenising(self: object, texts: object) -> list[int]:
        raise AssertionError(f"tokenised {texts!r}: the counts are in the cache")

    monkeypatch.setattr(ModelWindow, "n_tokens", no_tokenising)
    again = DenseScorer(cache=tmp_path / "e.sqlite")  # a new process, as far as the scorer knows
    with pytest.warns(UserWarning, match="256-token window"):
        _, notes_again = again.score_detailed(QUESTION, ctxsel.types.as_chunks(chunks))
    assert notes_again == notes


@pytest.mark.model
def test_i5_truncated_question_is_reported(dense: object) -> None:
    from ctxsel.errors import TruncationWarning

    long_question = "Which of these is about the weather? " * 80
    with pytest.warns(TruncationWarning, match="the question"):
        sel = ctxsel.select(long_question, CHUNKS, "top-k@1", scorer=dense)
    assert sel.meta["truncated"]["question"] is True
    short = ctxsel.select(QUESTION, CHUNKS, "top-k@1", scorer=dense)
    assert "truncated" not in short.meta


@pytest.mark.model
def test_i5b_cli_long_chunks_flag(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    p = tmp_path / "long.txt"
    p.write_text(
        "Tickets cost 8 euros.\n\n" + LONG_RELEVANT + "\n\nParking is limited near the museum.\n", encoding="utf-8"
    )
    base = [
        "select",
        "--document",
        str(p),
        "--question",
        QUESTION,
        "--method",
        "top-k@1",
        "--scorer",
        "dense",
        "--json",
    ]
    rc, out, err = cli(capsys, *base)
    assert rc == 0 and json.loads(out)["meta"]["truncated"]["chunks"] == 1  # where POST /select has it
    assert err.startswith("ctxsel select: warning: 1 chunk(s) longer than") and "--long-chunks max_window" in err
    rc, out, err = cli(capsys, *base, "--long-chunks", "max_window")
    obj = json.loads(out)
    assert rc == 0 and err == ""
    assert obj["chunks"][0]["id"] == "1" and obj["meta"]["truncated"]["windowed_chunks"] == 1


def test_i6_windows_fit_the_model_and_cover_the_text() -> None:
    from ctxsel.scoring.dense import bundled_model_path
    from ctxsel.scoring.windows import ModelWindow

    path = bundled_model_path()
    if path is None:
        pytest.skip("the bundled MiniLM is not installed")
    window = ModelWindow.from_folder(str(path))
    assert window is not None and window.max_seq_length == 256 and window.capacity == 254
    pieces = window.windows(LONG_RELEVANT)
    assert len(pieces) > 1
    assert max(window.n_tokens(pieces)) <= window.capacity
    assert pieces[0].startswith("The garden") and pieces[-1].endswith("3.2 kilograms.")
    assert "meteorite" in pieces[-1]


def test_i7_unknown_long_chunks_option_is_named() -> None:
    from ctxsel.scoring import get_scorer

    with pytest.raises(ValueError, match="long_chunks must be one of truncate, max_window, got 'pool'"):
        get_scorer("dense[long_chunks=pool]")


# -- item 7: the longest chunk -----------------------------------------------------------------------------------------


def _giant_line(n_words: int) -> str:
    rng = np.random.default_rng(0)
    words = np.array(
        ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "near", "the", "old", "museum"]
    )
    out = " ".join(words[rng.integers(0, len(words), n_words)])
    return out.replace(" old ", " old. The ")  # some sentence ends


@pytest.mark.parametrize("method", ["paragraphs", "sentences"])
def test_i8_a_giant_paragraph_is_split_at_the_limit(method: Method) -> None:
    line = _giant_line(60_000)
    chunks = chunk_text(line + "\n\nA short paragraph.", method)
    assert max(c.n_tokens for c in chunks) <= DEFAULT_MAX_CHUNK_TOKENS
    assert len(chunks) >= count_tokens(line) // DEFAULT_MAX_CHUNK_TOKENS
    assert " ".join(c.text for c in chunks).split() == (line + " A short paragraph.").split()  # no word lost
    assert chunks[-1].text == "A short paragraph."


def test_i9_a_giant_word_is_cut_at_token_boundaries() -> None:
    word = "x" * 30_000 + "漢字" * 3_000
    pieces = fit_to_max_tokens(word, 500)
    assert "".join(pieces) == word
    assert max(count_tokens(p) for p in pieces) <= 500


def test_i10_max_chunk_tokens_is_checked_and_can_be_turned_off() -> None:
    text = _giant_line(3_000)
    assert len(chunk_text(text, max_chunk_tokens=None)) == 1
    assert max(c.n_tokens for c in chunk_text(text, max_chunk_tokens=100)) <= 100
    with pytest.raises(ValueError, match="max_chunk_tokens must be a positive integer or None, got 0"):
        chunk_text(text, max_chunk_tokens=0)


def test_i11_cli_max_chunk_tokens(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    p = tmp_path / "giant.txt"
    p.write_text(_giant_line(2_000), encoding="utf-8")
    rc, out, _ = cli(
        capsys, *select_cmd(p, "--question", "fox", "--method", "full", "--max-chunk-tokens", "50", "--json")
    )
    assert rc == 0
    obj = json.loads(out)
    assert len(obj["chunks"]) > 10 and max(c["n_tokens"] for c in obj["chunks"]) <= 50
    assert "must be at least 1" in usage_error(capsys, *select_cmd(p, "--question", "q", "--max-chunk-tokens", "0"))


# -- item 8: numbers and questions that were accepted silently ---------------------------------------------------------


@pytest.mark.parametrize("limit", ["-3", "0", "three"])
def test_i12_eval_limit_must_be_positive(capsys: pytest.CaptureFixture[str], tmp_path: Path, limit: str) -> None:
    err = usage_error(
        capsys,
        "eval",
        "--dataset",
        "example",
        "--output",
        str(tmp_path / "o"),
        "--limit",
        limit,
        "--scorer",
        "keywords",
    )
    assert "--limit" in err and ("must be at least 1" in err or "expected an integer" in err)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("question", ["", "   \n\t "])
def test_i13_empty_question_is_rejected_everywhere(
    capsys: pytest.CaptureFixture[str], doc: Path, question: str
) -> None:
    with pytest.raises(ValueError, match=r"question is empty \(or only whitespace\)"):
        ctxsel.select(question, CHUNKS, "top-k@1", scores=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="question is empty"):  # the selector itself: the service's and eval's path
        get_selector("adaptive-k").select(question, CHUNKS, [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="question is empty"):
        select_positions(question, CHUNKS, get_selector("full"), None)
    err = usage_error(capsys, *select_cmd(doc, "--question", question))
    assert "--question: question is empty" in err


def test_i14_min_k_above_n_is_reported_truthfully() -> None:
    sel = ctxsel.select(QUESTION, CHUNKS, "top-k@1", scores=[0.1, 0.9, 0.5], min_k=10)
    assert sel.k == 3
    assert sel.explanation == "fixed top-1: kept 1 of 3; raised to min_k=10 (capped at all 3 chunks)"


# -- item 12: messages a user can act on -------------------------------------------------------------------------------


@pytest.mark.slow
def test_i15_unknown_model_offline_is_one_line_not_a_traceback(doc: Path) -> None:
    res = console(*select_cmd(doc, "--question", QUESTION, "--scorer", "dense", "--model", "bert-base-uncased"))
    assert res.returncode == 2
    assert "Traceback" not in res.stderr + res.stdout
    assert "embedding model 'bert-base-uncased' could not be loaded" in res.stderr
    assert "--model PATH" in res.stderr and "does not download" in res.stderr


def test_i16_lone_surrogate_in_a_chunk_or_question(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"chunk '1' contains a lone surrogate U\+D800 at character 2.*errors='repl"):
        ctxsel.select(QUESTION, ["fine", "ab\ud800cd"], "top-k@1", scores=[1.0, 2.0])
    with pytest.raises(ValueError, match=r"question contains a lone surrogate U\+DC80"):
        ctxsel.select("why\udc80", CHUNKS, "top-k@1", scores=[1.0, 2.0, 3.0])
    p = tmp_path / "c.jsonl"
    p.write_text('{"id": "a", "text": "x\\ud800y"}\n', encoding="utf-8")  # a JSON escape: valid UTF-8 file
    assert "lone surrogate" in usage_error(capsys, *select_cmd(p, "--question", QUESTION))


def test_i17_threshold_that_is_not_a_number(capsys: pytest.CaptureFixture[str], doc: Path) -> None:
    with pytest.raises(ValueError, match="threshold must be a number, got 'abc'"):
        get_selector("threshold@abc")
    err = usage_error(capsys, *select_cmd(doc, "--question", QUESTION, "--method", "threshold@abc"))
    assert "threshold must be a number, got 'abc'" in err and "ufunc" not in err


def test_i18_unknown_option_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"no option 'foo'; its options are: strategy, buffer, .*min_k, max_tokens"):
        get_selector("adaptive-k[foo=1]")
    with pytest.raises(ValueError, match=r"no option 'bufer' \(did you mean 'buffer'\?\)"):
        ctxsel.select(QUESTION, CHUNKS, "adaptive-k", scores=[1.0, 2.0, 3.0], bufer=2)


def test_i19_question_none_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="question must be a string, got NoneType"):
        ctxsel.select(None, CHUNKS, "top-k@1", scores=[1.0, 2.0, 3.0])  # type: ignore[arg-type]


def test_i20_directory_as_document(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    err = usage_error(capsys, *select_cmd(tmp_path, "--question", QUESTION))
    assert "is a directory" in err and "pass one text file" in err and "no such file" not in err


def test_i21_binary_document(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    p = tmp_path / "random.bin"
    p.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    err = usage_error(capsys, *select_cmd(p, "--question", QUESTION))
    assert "looks like a binary file" in err and "extract the text first" in err
    assert "iconv" not in err and "latin1" not in err


def test_i22_llm_method_without_reader(capsys: pytest.CaptureFixture[str], doc: Path) -> None:
    err = usage_error(capsys, *select_cmd(doc, "--question", QUESTION, "--method", "self-route"))
    assert "method 'self-route' needs an LLM client" in err and "--reader" in err
    with pytest.raises(ValueError, match=r"'sage' needs an LLM client.*serve --reader.*llm=CLIENT"):
        get_selector("sage")


# -- item 13: CLI gaps -------------------------------------------------------------------------------------------------


def test_i23_question_file(capsys: pytest.CaptureFixture[str], doc: Path, tmp_path: Path) -> None:
    q = tmp_path / "q.txt"
    # 90,000 characters (under the question limit), 170 KB: too long for one argv string on Linux (128 KiB)
    q.write_text("\n" + "meteorite " * 5_000 + "\u9695" * 40_000 + "\n", encoding="utf-8")
    rc, out, _ = cli(capsys, *select_cmd(doc, "--question-file", str(q), "--method", "top-k@1", "--json"))
    assert rc == 0 and json.loads(out)["chunks"][0]["id"] == "0"
    over = tmp_path / "over.txt"
    over.write_text("meteorite " * 10_001, encoding="utf-8")  # the limit is the same on every surface (issue 68)
    assert "question is too long: 100,009 characters" in usage_error(
        capsys, *select_cmd(doc, "--question-file", str(over))
    )
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n", encoding="utf-8")
    assert "the file is empty" in usage_error(capsys, *select_cmd(doc, "--question-file", str(empty)))
    assert "no such file" in usage_error(capsys, *select_cmd(doc, "--question-file", str(tmp_path / "nope.txt")))
    err = usage_error(capsys, *select_cmd(doc, "--question", "q", "--question-file", str(q)))
    assert "not allowed with argument" in err


def test_i24_scores_file(capsys: pytest.CaptureFixture[str], doc: Path, tmp_path: Path) -> None:
    as_json, as_lines = tmp_path / "s.json", tmp_path / "s.txt"
    as_json.write_text("[0.1, 0.9, 0.5]", encoding="utf-8")
    as_lines.write_text("0.1\n0.9\n\n0.5\n", encoding="utf-8")
    for f in (as_json, as_lines):
        rc, out, _ = cli(
            capsys, *select_cmd(doc, "--question", QUESTION, "--method", "top-k@2", "--scores", str(f), "--json")
        )
        obj = json.loads(out)
        assert rc == 0 and [c["id"] for c in obj["chunks"]] == ["1", "2"] and obj["chunks"][0]["score"] == 0.9
    short = tmp_path / "short.txt"
    short.write_text("0.1\n0.2\n", encoding="utf-8")
    assert "short.txt: got 2 scores for 3 chunks" in usage_error(
        capsys, *select_cmd(doc, "--question", "q", "--scores", str(short))
    )
    bad = tmp_path / "bad.txt"
    bad.write_text("0.1\nhigh\n0.3\n", encoding="utf-8")
    assert "bad.txt:2: 'high' is not a number" in usage_error(
        capsys, *select_cmd(doc, "--question", "q", "--scores", str(bad))
    )
    nan = tmp_path / "nan.json"
    nan.write_text("[0.1, NaN, 0.3]", encoding="utf-8")
    assert "scores: 1 score(s) are NaN or infinite (chunk positions 1)" in usage_error(
        capsys, *select_cmd(doc, "--question", "q", "--scores", str(nan))
    )


def _all_actions(parser: argparse.ArgumentParser, name: str = "ctxsel") -> list[tuple[str, argparse.Action]]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                out += _all_actions(sub, f"{name} {sub_name}")
        else:
            out.append((name, action))
    return out


def test_i25_every_flag_of_every_subcommand_has_help() -> None:
    actions = _all_actions(build_parser())
    assert len(actions) > 150
    missing = [
        f"{cmd} {'/'.join(a.option_strings) or a.dest}"
        for cmd, a in actions
        if not a.help or a.help == argparse.SUPPRESS or not a.help.strip()
    ]
    assert missing == []


def test_i26_help_examples_are_kept_as_lines(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = cli(capsys, "select", "--help")
    assert rc == 0
    assert '\n    ctxsel select --document report.md --question "Who built the telescope?"\n' in out
    rc, out, _ = cli(capsys, "train", "--help")
    assert rc == 0 and "\n    ctxsel mine --dataset hotpotqa-long" not in out  # train's own docstring, not mine's
    rc, out, _ = cli(capsys, "mine", "--help")
    assert "\n    ctxsel mine --dataset hotpotqa-long --limit 20 --reader local" in out


def test_i27_no_progress_silences_every_bar(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    base = ["eval", "--dataset", "example", "--methods", "top-k@1", "--scorer", "keywords"]
    rc, _, err = cli(capsys, *base, "--output", str(tmp_path / "bars"))
    assert rc == 0 and "eval: 100%" in err  # the bar exists: the next assertion can fail
    rc, _, err = cli(capsys, *base, "--output", str(tmp_path / "quiet"), "--no-progress")
    assert rc == 0 and err == ""


def test_i28_env_lists_the_reader_local_models_and_service_extras(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = cli(capsys, "env", "--json")
    info = json.loads(out)
    assert rc == 0
    assert info["reader"]["default"] == "local:qwen-1.5b" and "ready" in info["reader"]
    assert info["extras"]["serve"]["for"].startswith("ctxsel serve")
    assert set(info["extras"]["serve"]) == {"for", "installed", "missing"}
    assert {"qwen-1.5b (default reader)", "qwen-0.5b", "gemma-270m"} <= set(info["local_llms"])
    rc, out, _ = cli(capsys, "env")
    assert "reader (--reader local): local:qwen-1.5b" in out and "serve " in out and "extras" in out


# -- more cases --------------------------------------------------------------------------------------------------------


def test_a1_top_k_zero_keeps_min_k_and_says_so() -> None:
    sel = ctxsel.select(QUESTION, CHUNKS, "top-k@0", scores=[0.1, 0.9, 0.5])
    assert sel.ids == ["1"] and sel.explanation == "fixed top-0: kept 0 of 3; raised to min_k=1"
    with pytest.raises(ValueError, match="k must be >= 0, got -1"):
        get_selector("top-k@-1")


def test_a2_top_k_huge_whole_float_is_accepted() -> None:
    sel = ctxsel.select(QUESTION, CHUNKS, "top-k@1e9", scores=[0.1, 0.9, 0.5])
    assert sel.k == 3 and sel.config["k"] == 1_000_000_000
    with pytest.raises(ValueError, match="k must be an integer, got 1.5"):
        get_selector("top-k@1.5")


def test_a3_unbalanced_brackets_in_a_spec() -> None:
    with pytest.raises(ValueError, match=r"bad method spec 'top-k\[k=1' \(unbalanced brackets\)"):
        get_selector("top-k[k=1")


def test_a4_unknown_method_suggests_the_closest(capsys: pytest.CaptureFixture[str], doc: Path) -> None:
    with pytest.raises(ValueError, match=r"unknown method 'topk' \(did you mean 'top-k'\?\)"):
        get_selector("topk@3")
    assert "did you mean 'adaptive-k'" in usage_error(
        capsys, *select_cmd(doc, "--question", "q", "--method", "adaptiv-k")
    )


def test_a5_unknown_chunking(capsys: pytest.CaptureFixture[str], doc: Path) -> None:
    err = usage_error(capsys, *select_cmd(doc, "--question", "q", "--chunking", "words"))
    assert "--chunking: invalid choice: 'words'" in err


@pytest.mark.parametrize("content", ["", "  \n\n \t\n"])
def test_a6_empty_or_whitespace_document(capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str) -> None:
    p = tmp_path / "empty.txt"
    p.write_text(content, encoding="utf-8")
    assert "has no text to select from" in usage_error(capsys, *select_cmd(p, "--question", "q"))


def test_a7_max_bytes_exceeded(capsys: pytest.CaptureFixture[str], doc: Path) -> None:
    err = usage_error(capsys, *select_cmd(doc, "--question", "q", "--max-bytes", "10"))
    assert "above the 10-byte limit (--max-bytes)" in err


def test_a8_duplicate_chunk_ids() -> None:
    with pytest.raises(ValueError, match="duplicate chunk id 'a'"):
        ctxsel.select(QUESTION, [Chunk("a", "x"), Chunk("a", "y")], "top-k@1", scores=[1.0, 2.0])


def test_a9_scores_of_the_wrong_length_and_nan() -> None:
    with pytest.raises(ValueError, match="got 2 scores for 3 chunks"):
        ctxsel.select(QUESTION, CHUNKS, "top-k@1", scores=[1.0, 2.0])
    with pytest.raises(ValueError, match=r"NaN|non-finite|not finite"):
        ctxsel.select(QUESTION, CHUNKS, "top-k@1", scores=[1.0, math.nan, 2.0])


def test_a10_utf8_with_bom_is_read_without_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    p = tmp_path / "bom.txt"
    p.write_bytes(b"\xef\xbb\xbf" + DOC.encode("utf-8"))
    rc, out, _ = cli(capsys, *select_cmd(p, "--question", QUESTION, "--method", "top-k@1", "--json"))
    assert rc == 0 and json.loads(out)["chunks"][0]["text"].startswith("The meteorite")


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        ("café au lait".encode("latin-1"), ["not valid UTF-8", "iconv -f cp1252"]),
        ("hello".encode("utf-16"), ["not valid UTF-8", "UTF-16", "iconv -f utf-16"]),
    ],
)
def test_a11_other_encodings(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, payload: bytes, words: list[str]
) -> None:
    p = tmp_path / "other.txt"
    p.write_bytes(payload)
    err = usage_error(capsys, *select_cmd(p, "--question", "q"))
    assert all(w in err for w in words), err


@pytest.mark.parametrize("methods", ["", " , ,"])
def test_a12_eval_with_no_methods(capsys: pytest.CaptureFixture[str], tmp_path: Path, methods: str) -> None:
    err = usage_error(
        capsys,
        "eval",
        "--dataset",
        "example",
        "--output",
        str(tmp_path / "o"),
        "--methods",
        methods,
        "--scorer",
        "keywords",
        "--no-progress",
    )
    assert "names no method" in err


def test_a13_unknown_dataset(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    err = usage_error(capsys, "eval", "--dataset", "hotpot", "--output", str(tmp_path / "o"), "--scorer", "keywords")
    assert "dataset 'hotpot' is neither a known name" in err


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--min-k", "-1", "min_k must be >= 0, got -1"),  # the Python API's words (A42)
        ("--max-tokens", "-5", "max_tokens must be >= 0 or None, got -5"),
        ("--max-bytes", "0", "--max-bytes: must be at least 1"),
        ("--threads", "0", "--threads: must be at least 1"),
    ],
)
def test_a14_negative_numbers_are_usage_errors(
    capsys: pytest.CaptureFixture[str], doc: Path, flag: str, value: str, message: str
) -> None:
    err = usage_error(capsys, *select_cmd(doc, "--question", "q", flag, value))
    assert message in err and err.count("\n") == 1


def test_a15_chunks_none_or_a_number() -> None:
    with pytest.raises(TypeError, match="chunks must be a sequence of chunk texts or Chunks, got NoneType"):
        ctxsel.select(QUESTION, None, "top-k@1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="got int"):
        ctxsel.select(QUESTION, 3, "top-k@1")  # type: ignore[arg-type]


def test_a16_missing_document_and_jsonl_without_text(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert "--document: no such file" in usage_error(capsys, *select_cmd(tmp_path / "nope.md", "--question", "q"))
    p = tmp_path / "c.jsonl"
    p.write_text('{"id": "a", "text": 3}\n', encoding="utf-8")
    assert "c.jsonl:1: expected an object with 'text' (a string)" in usage_error(
        capsys, *select_cmd(p, "--question", "q")
    )


def test_a17_bad_input_in_a_subprocess_never_shows_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bin.dat"
    bad.write_bytes(b"\x00\x01\x02" * 100)
    for argv in (
        ["select", "--document", str(bad), "--question", "q", "--scorer", "keywords"],
        ["select", "--document", str(tmp_path), "--question", "q", "--scorer", "keywords"],
        ["eval", "--dataset", "example", "--output", str(tmp_path / "o"), "--limit", "-3"],
    ):
        res = console(*argv)
        assert res.returncode == 2, res.stderr
        assert "Traceback" not in res.stderr and res.stdout == ""


def test_a18_service_rejects_an_empty_question_and_names_reader_for_llm_methods() -> None:
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from fastapi.testclient import TestClient

    from ctxsel.service import ServiceSettings, create_app

    client = TestClient(create_app(ServiceSettings(scorer="keywords")))
    res = client.post("/select", json={"question": "  ", "chunks": CHUNKS, "method": "top-k@1"})
    assert res.status_code == 422 and "question is empty" in res.json()["message"]
    res = client.post("/select", json={"question": QUESTION, "chunks": CHUNKS, "method": "sage"})
    assert res.status_code == 422 and "serve --reader" in res.json()["message"]
    assert "Traceback" not in res.text


def test_a19_scores_that_are_not_numbers() -> None:
    with pytest.raises(TypeError, match="scores must be a sequence of numbers .* got a str"):
        ctxsel.select(QUESTION, CHUNKS, "top-k@1", scores="0.1,0.2,0.3")
    with pytest.raises(TypeError, match=r"scores\[1\] must be a number, got 'high' \(a str\)"):
        ctxsel.select(QUESTION, CHUNKS, "top-k@1", scores=[0.1, "high", 0.3])


def test_a20_method_that_is_not_a_spec_string() -> None:
    with pytest.raises(
        TypeError, match=r"method must be a spec string such as 'top-k@5' \(or a Selector\), got NoneType"
    ):
        ctxsel.select(QUESTION, CHUNKS, None, scores=[1.0, 2.0, 3.0])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"bad method spec 'top-k@': use NAME, NAME@VALUE or NAME\[key=value,...\]"):
        get_selector("top-k@")
    with pytest.raises(ValueError, match="buffer must be an integer, got ''"):
        get_selector("adaptive-k[buffer=]")


@pytest.mark.parametrize(
    ("port", "message"),
    [("99999", "must be at most 65535, got 99999"), ("-1", "must be at least 0, got -1"), ("x", "expected an integer")],
)
def test_a_port_out_of_range_is_a_usage_error(capsys, port: str, message: str) -> None:
    err = usage_error(capsys, "serve", "--port", port)
    assert f"argument --port: {message}" in err  # before: OverflowError from bind(), reported as "this is a bug"


def test_an_eval_output_that_is_a_file_is_named(capsys, tmp_path: Path) -> None:
    f = tmp_path / "results"
    f.write_text("not a folder", encoding="utf-8")
    err = usage_error(capsys, "eval", "--dataset", "example", "--methods", "top-k@1", "--output", str(f))
    assert f"the output {f} is a file, not a folder" in err  # before: "[Errno 17] File exists"
    assert f.read_text(encoding="utf-8") == "not a folder"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["picker", "--labels", "--prompts-per-step", "0"], "--prompts-per-step must be at least 1, got 0"),
        (["picker", "--labels", "--stage-seconds", "-5"], "--stage-seconds must be 0 or more"),
        (["ldar", "--lr", "0"], "need lr > 0"),
    ],
)
def test_training_settings_no_run_can_use_stop_before_a_model_loads(capsys, tmp_path: Path, argv, message) -> None:
    err = usage_error(capsys, "train", *argv, "--dataset", "example", "--output", str(tmp_path / "run"))
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("flag", "value", "message"), [("--k", "0", "--k must be >= 1"), ("--rewrites", "-1", "--rewrites")]
)
def test_mining_settings_no_run_can_use(capsys, tmp_path: Path, flag: str, value: str, message: str) -> None:
    out = tmp_path / "mined.jsonl"
    reader = ["--reader", "http://127.0.0.1:9", "--reader-model", "m"]  # never called: the settings stop it first
    err = usage_error(capsys, "mine", "--dataset", "example", "--output", str(out), *reader, flag, value)
    assert message in err and not out.exists()  # --rewrites -1 mined with no rewrites before


def test_a_scorer_that_is_neither_a_spec_nor_a_scorer_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="scorer must be a scorer spec such as 'dense' or 'bm25', .* got int"):
        ctxsel.select(QUESTION, CHUNKS, "top-k@1", scorer=42)  # was AttributeError: 'int' object has no 'score'


def test_a_reader_without_an_llm_client_is_a_type_error() -> None:
    from ctxsel.reader import Reader

    with pytest.raises(TypeError, match="a Reader needs an LLM client .* got NoneType"):
        Reader(None, "factoid-qa")  # type: ignore[arg-type]  # was accepted, and failed at the first answer


@pytest.mark.parametrize(
    ("options", "message"),
    [({"n_threads": -1}, "n_threads must be >= 1"), ({"n_ctx": -5}, "n_ctx must be >= 1 tokens")],
)
def test_local_client_settings_are_checked_before_the_model_loads(options: dict, message: str) -> None:
    pytest.importorskip("llama_cpp")
    from ctxsel.llm.local import LocalLlamaClient

    with pytest.raises(ValueError, match=message):  # n_ctx=-5 was llama.cpp's "Failed to create llama_context"
        LocalLlamaClient("no-such-model", **options)  # the settings are refused before the model is looked up
