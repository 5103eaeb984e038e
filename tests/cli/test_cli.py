"""The ``ctxsel`` command line (keyword scorer: no model)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ctxsel._version import __version__
from ctxsel.cli.main import main
from tests.support.cli import ctxsel_command, run_cli

DOC = (
    "The meteorite in the museum weighs three kilograms.\n\n"
    "The museum opens at noon on Sundays.\n\n"
    "Bananas are a yellow fruit.\n"
)
QUESTION = "How heavy is the meteorite?"


@pytest.fixture
def doc(tmp_path: Path) -> Path:
    p = tmp_path / "doc.txt"
    p.write_text(DOC, encoding="utf-8")
    return p


class TestSelectJSON:
    def test_one_object_with_the_documented_keys(self, capsys, doc: Path) -> None:
        rc, out, err = run_cli(
            capsys,
            "select",
            "--document",
            str(doc),
            "--question",
            QUESTION,
            "--scorer",
            "keywords",
            "--method",
            "top-k@2",
            "--json",
        )
        assert rc == 0
        assert err == ""
        assert len(out.strip().splitlines()) == 1
        obj = json.loads(out)
        assert {"method", "k", "n_tokens", "explanation", "chunks"} <= set(obj)
        assert obj["method"] == "top-k"
        assert obj["k"] == 2
        chunks = obj["chunks"]
        assert [c["id"] for c in chunks] == ["0", "1"]
        assert [c["rank"] for c in chunks] == [1, 2]
        # keyword scores: {meteorite, heavy} vs chunk words -> 1, 0
        assert [c["score"] for c in chunks] == [1.0, 0.0]
        assert chunks[0]["text"] == "The meteorite in the museum weighs three kilograms."
        assert all({"id", "text", "score", "rank"} <= set(c) for c in chunks)
        assert obj["n_tokens"] == sum(c["n_tokens"] for c in chunks)
        assert obj["explanation"] == "fixed top-2: kept 2 of 3"

    def test_default_method_is_adaptive_k(self, capsys, doc: Path) -> None:
        rc, out, _ = run_cli(
            capsys, "select", "--document", str(doc), "--question", QUESTION, "--scorer", "keywords", "--json"
        )
        assert rc == 0
        obj = json.loads(out)
        assert obj["method"] == "adaptive-k"
        assert obj["k"] == 2  # N = 3: the first gap plus the buffer of a small pool, 1

    def test_options(self, capsys, doc: Path) -> None:
        rc, out, _ = run_cli(
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
            "--min-k",
            "2",
            "--json",
        )
        assert rc == 0 and json.loads(out)["k"] == 2
        rc, out, _ = run_cli(
            capsys,
            "select",
            "--document",
            str(doc),
            "--question",
            QUESTION,
            "--scorer",
            "keywords",
            "--method",
            "full",
            "--max-tokens",
            "1",
            "--json",
        )
        obj = json.loads(out)
        assert rc == 0 and obj["k"] == 0 and obj["chunks"] == []
        assert "by max_tokens=1" in obj["explanation"]

    def test_sentence_chunking(self, capsys, tmp_path: Path) -> None:
        p = tmp_path / "s.txt"
        p.write_text("The meteorite is heavy. Bananas are yellow. The museum is old.", encoding="utf-8")
        rc, out, _ = run_cli(
            capsys,
            "select",
            "--document",
            str(p),
            "--question",
            QUESTION,
            "--scorer",
            "keywords",
            "--chunking",
            "sentences",
            "--method",
            "top-k@1",
            "--json",
        )
        assert rc == 0
        assert [c["text"] for c in json.loads(out)["chunks"]] == ["The meteorite is heavy."]

    def test_jsonl_chunks_document(self, capsys, tmp_path: Path) -> None:
        p = tmp_path / "chunks.jsonl"
        p.write_text('{"id": "x", "text": "bananas"}\n\n{"id": "y", "text": "the meteorite"}\n', encoding="utf-8")
        rc, out, _ = run_cli(
            capsys,
            "select",
            "--document",
            str(p),
            "--question",
            QUESTION,
            "--scorer",
            "keywords",
            "--method",
            "top-k@1",
            "--json",
        )
        assert rc == 0
        assert [c["id"] for c in json.loads(out)["chunks"]] == ["y"]

    def test_human_output(self, capsys, doc: Path) -> None:
        rc, out, _ = run_cli(
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
        )
        assert rc == 0
        assert out.startswith("top-k: kept 1 of 3 chunks")
        assert "why: fixed top-1: kept 1 of 3" in out
        assert "[0] score=1.000" in out


def assert_one_line_error(rc: int, out: str, err: str, fragment: str) -> None:
    assert rc == 2
    assert out == ""
    lines = err.strip("\n").splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("ctxsel select: error: ")
    assert fragment in lines[0]


class TestSelectErrors:
    def test_a_scorer_option_it_does_not_take(self, capsys, doc: Path) -> None:
        assert_one_line_error(
            *run_cli(capsys, "select", "--document", str(doc), "--question", "q", "--scorer", "bm25[zz=1]"),
            "bad options for scorer 'bm25': no option 'zz'; its options are: k1, b, stopwords",
        )

    def test_empty_document(self, capsys, tmp_path: Path) -> None:
        p = tmp_path / "empty.txt"
        p.write_text("\n  \n\n", encoding="utf-8")
        assert_one_line_error(
            *run_cli(capsys, "select", "--document", str(p), "--question", "q", "--scorer", "keywords"),
            "has no text to select from",
        )

    def test_non_utf8(self, capsys, tmp_path: Path) -> None:
        p = tmp_path / "latin1.txt"
        p.write_bytes("café au lait".encode("latin-1"))
        assert_one_line_error(
            *run_cli(capsys, "select", "--document", str(p), "--question", "q", "--scorer", "keywords"),
            "is not valid UTF-8",
        )

    def test_above_max_bytes(self, capsys, doc: Path) -> None:
        assert_one_line_error(
            *run_cli(
                capsys, "select", "--document", str(doc), "--question", "q", "--scorer", "keywords", "--max-bytes", "10"
            ),
            "limit",
        )

    def test_missing_file(self, capsys, tmp_path: Path) -> None:
        assert_one_line_error(
            *run_cli(
                capsys, "select", "--document", str(tmp_path / "nope.txt"), "--question", "q", "--scorer", "keywords"
            ),
            "no such file",
        )

    def test_bad_method(self, capsys, doc: Path) -> None:
        assert_one_line_error(
            *run_cli(
                capsys,
                "select",
                "--document",
                str(doc),
                "--question",
                "q",
                "--scorer",
                "keywords",
                "--method",
                "top-k@",
            ),
            "bad method spec",
        )
        assert_one_line_error(
            *run_cli(
                capsys, "select", "--document", str(doc), "--question", "q", "--scorer", "keywords", "--method", "nope"
            ),
            "unknown method 'nope'",
        )

    def test_bad_jsonl_document(self, capsys, tmp_path: Path) -> None:
        p = tmp_path / "c.jsonl"
        p.write_text('{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n', encoding="utf-8")
        assert_one_line_error(
            *run_cli(capsys, "select", "--document", str(p), "--question", "q", "--scorer", "keywords"),
            "duplicate chunk id 'a'",
        )
        p.write_text('{"id": "a"}\n', encoding="utf-8")
        assert_one_line_error(
            *run_cli(capsys, "select", "--document", str(p), "--question", "q", "--scorer", "keywords"),
            "expected an object with 'text'",
        )

    def test_debug_shows_traceback(self, capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("CTXSEL_DEBUG", "1")
        p = tmp_path / "empty.txt"
        p.write_text("", encoding="utf-8")
        with pytest.raises(ValueError, match="no text"):
            main(["select", "--document", str(p), "--question", "q", "--scorer", "keywords"])

    def test_usage_errors_exit_2(self, capsys) -> None:
        with pytest.raises(SystemExit) as e:
            main(["select", "--question", "q"])
        assert e.value.code == 2
        with pytest.raises(SystemExit) as e:
            main(["select", "--document", "x", "--question", "q", "--scorer", "magic"])
        assert e.value.code == 2


class TestEval:
    def test_bad_dataset(self, capsys, tmp_path: Path) -> None:
        rc, out, err = run_cli(
            capsys,
            "eval",
            "--dataset",
            str(tmp_path / "nope.jsonl"),
            "--output",
            str(tmp_path / "o"),
            "--scorer",
            "keywords",
        )
        assert rc == 2 and out == ""
        assert err.startswith("ctxsel eval: error: ") and len(err.strip().splitlines()) == 1

    def test_bad_method_spec_fails_fast(self, capsys, tmp_path: Path) -> None:
        rc, _, err = run_cli(
            capsys,
            "eval",
            "--dataset",
            "example",
            "--output",
            str(tmp_path / "o"),
            "--scorer",
            "keywords",
            "--methods",
            "top-k@1,bogus",
            "--no-progress",
        )
        assert rc == 2
        assert "unknown method 'bogus'" in err
        assert not (tmp_path / "o" / "results.jsonl").exists()


class TestSubprocess:
    def test_env_json(self, cache_dir: Path) -> None:
        res = subprocess.run([*ctxsel_command(), "env", "--json"], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        info = json.loads(res.stdout)
        assert info["ctxsel"] == __version__
        assert {"python", "platform", "cpus", "packages", "models", "cache_dir"} <= set(info)
        assert info["packages"]["numpy"]
        assert info["cache_dir"] == str(cache_dir)

    def test_env_human(self) -> None:
        res = subprocess.run([*ctxsel_command(), "env"], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0
        assert res.stdout.startswith(f"ctxsel {__version__} on Python")

    def test_select_json_console_script(self, doc: Path) -> None:
        res = subprocess.run(
            [
                *ctxsel_command(),
                "select",
                "--document",
                str(doc),
                "--question",
                QUESTION,
                "--scorer",
                "keywords",
                "--method",
                "top-k@1",
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["chunks"][0]["id"] == "0"

    def test_error_console_script(self, tmp_path: Path) -> None:
        p = tmp_path / "bad.txt"
        p.write_bytes(b"\xff\xfe\x00bad")
        res = subprocess.run(
            [*ctxsel_command(), "select", "--document", str(p), "--question", "q", "--scorer", "keywords"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 2
        assert res.stdout == ""
        assert len(res.stderr.strip().splitlines()) == 1
        assert "not valid UTF-8" in res.stderr

    def test_version(self) -> None:
        res = subprocess.run([*ctxsel_command(), "--version"], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0 and res.stdout.strip() == f"ctxsel {__version__}"
