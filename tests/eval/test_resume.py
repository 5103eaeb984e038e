"""Resumable evaluation: the result log, summaries, and a real killed-and-resumed
``ctxsel eval`` run compared with an uninterrupted one."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ctxsel.eval.report import markdown_table, summarize
from ctxsel.eval.results import ResultLog, write_atomic
from ctxsel.eval.runner import _check_config, evaluate
from ctxsel.types import Chunk, Example


class TestResultLog:
    def test_append_and_reopen(self, tmp_path: Path) -> None:
        path = tmp_path / "sub" / "results.jsonl"
        with ResultLog(path) as log:
            log.append({"example_id": "e1", "method": "m", "k": 1})
            log.append({"example_id": "e1", "method": "n", "k": 2, "text": "naïve"})
            assert log.done("e1", "m") and not log.done("e2", "m")
        assert path.read_text(encoding="utf-8").count("\n") == 2
        with ResultLog(path) as log:
            assert [r["k"] for r in log.rows] == [1, 2]
            assert log.rows[1]["text"] == "naïve"
            assert log.done("e1", "n")

    def test_torn_last_line_is_cut(self, tmp_path: Path) -> None:
        path = tmp_path / "results.jsonl"
        good = json.dumps({"example_id": "e1", "method": "m"}) + "\n"
        path.write_text(good + '{"example_id": "e2", "meth', encoding="utf-8")
        with ResultLog(path) as log:
            assert len(log.rows) == 1
            assert not log.done("e2", "m")
            assert path.read_text(encoding="utf-8") == good
            log.append({"example_id": "e2", "method": "m"})
        lines = path.read_text(encoding="utf-8").splitlines()
        assert [json.loads(x)["example_id"] for x in lines] == ["e1", "e2"]

    def test_complete_but_invalid_last_line_is_cut(self, tmp_path: Path) -> None:
        path = tmp_path / "results.jsonl"
        good = json.dumps({"example_id": "e1", "method": "m"}) + "\n"
        path.write_text(good + "{not json}\n", encoding="utf-8")
        with ResultLog(path) as log:
            assert len(log.rows) == 1
        assert path.read_text(encoding="utf-8") == good

    def test_empty_file(self, tmp_path: Path) -> None:
        path = tmp_path / "results.jsonl"
        path.write_bytes(b"")
        with ResultLog(path) as log:
            assert log.rows == []


def test_write_atomic(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    write_atomic(p, "one")
    write_atomic(p, "two")
    assert p.read_text(encoding="utf-8") == "two"
    assert sorted(os.listdir(tmp_path)) == ["x.json"]  # no temporary left behind


class TestSummaries:
    ROWS: ClassVar[list[dict[str, Any]]] = [
        {
            "example_id": "a",
            "method": "m1",
            "recall": 1.0,
            "precision": 0.5,
            "k": 2,
            "diff_k": 0,
            "diff_k_authors": 1,
            "n_tokens": 100,
            "reduction": 90.0,
            "select_ms": 1.0,
        },
        {
            "example_id": "b",
            "method": "m1",
            "recall": 0.0,
            "precision": 0.0,
            "k": 4,
            "diff_k": None,
            "diff_k_authors": None,
            "n_tokens": 300,
            "reduction": 70.0,
            "select_ms": 3.0,
            "extra_metrics": {"subem": 1.0},
        },
        {
            "example_id": "a",
            "method": "m2",
            "recall": None,
            "precision": None,
            "k": 1,
            "diff_k": None,
            "diff_k_authors": None,
            "n_tokens": 10,
            "reduction": 99.0,
            "select_ms": 0.5,
        },
    ]

    def test_summarize_means_skip_none(self) -> None:
        s = summarize(self.ROWS, ["m1", "m2", "absent"])
        assert set(s) == {"m1", "m2"}
        assert s["m1"]["n"] == 2
        assert s["m1"]["recall"] == 0.5
        assert s["m1"]["precision"] == 0.25
        assert s["m1"]["k"] == 3.0
        assert s["m1"]["diff_k"] == 0.0  # only the example with a value
        assert s["m1"]["n_tokens"] == 200.0
        assert s["m1"]["reduction"] == 80.0
        assert s["m1"]["subem"] == 1.0
        assert s["m2"]["recall"] is None

    def test_markdown_table(self) -> None:
        table = markdown_table(summarize(self.ROWS, ["m1", "m2"]))
        lines = table.splitlines()
        assert lines[0] == "| method | recall % | precision % | k | diff-k | tokens | reduction % |"
        assert (
            lines[2]
            == "| m1 | 50.0 [0.0, 100.0] | 25.0 [0.0, 50.0] | 3.0 [2.0, 4.0] | 0.0 [0.0, 0.0] | 200 [100, 300] | 80.0 [70.0, 90.0] |"
        )
        assert lines[3] == "| m2 | - | - | 1.0 [1.0, 1.0] | - | 10 [10, 10] | 99.0 [99.0, 99.0] |"


def test_config_change_refuses_to_resume(tmp_path: Path) -> None:
    old = {"dataset": "d", "scorer": "keywords", "method_configs": {"top-k@1": {"k": 1}}}
    (tmp_path / "config.json").write_text(json.dumps(old), encoding="utf-8")
    _check_config(tmp_path / "config.json", dict(old), resuming=True)  # same: fine
    with pytest.raises(ValueError, match="holds results for scorer='keywords', not 'bm25'"):
        _check_config(tmp_path / "config.json", dict(old, scorer="bm25"), resuming=True)
    with pytest.raises(ValueError, match="method 'top-k@1' changed its config"):
        _check_config(tmp_path / "config.json", dict(old, method_configs={"top-k@1": {"k": 2}}), resuming=True)
    _check_config(tmp_path / "config.json", dict(old, scorer="bm25"), resuming=False)


def test_evaluate_refuses_other_scorer_before_running(tmp_path: Path) -> None:
    (tmp_path / "results.jsonl").write_text("", encoding="utf-8")
    (tmp_path / "config.json").write_text(json.dumps({"dataset": "d", "scorer": "bm25"}), encoding="utf-8")
    ex = Example(id="e", question="q", chunks=[Chunk(id="a", text="x", n_tokens=1)])
    with pytest.raises(ValueError, match="holds results for scorer='bm25', not 'keywords'"):
        evaluate([ex], ["top-k@1"], output_dir=tmp_path, scorer="keywords", dataset_name="d", progress=False)


# --- the real thing: kill `ctxsel eval` with SIGKILL and resume it -------------------

METHODS = "adaptive-k,adaptive-k@2diff_spike,autocut@1,top-k@5"
N_METHODS = 4
N_EXAMPLES = 40


def _make_dataset(path: Path) -> None:
    rng = random.Random(1)
    vocab = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "river",
        "mountain",
        "castle",
        "dragon",
        "meteorite",
        "museum",
        "telescope",
        "harbour",
        "comet",
        "forest",
        "lake",
        "city",
        "king",
        "queen",
    ]
    with path.open("w", encoding="utf-8") as f:
        for i in range(N_EXAMPLES):
            # many chunks per example so that each takes a measurable time to score and select
            chunks = [" ".join(rng.choice(vocab) for _ in range(6)) for _ in range(600)]
            q = " ".join(rng.choice(vocab) for _ in range(3))
            gold = sorted({str(rng.randrange(600)) for _ in range(2)})
            f.write(
                json.dumps({"id": f"ex{i:02d}", "question": q, "chunks": chunks, "gold_ids": gold, "answers": ["x"]})
                + "\n"
            )


def _command(data: Path, out: Path) -> list[str]:
    script = Path(sys.executable).with_name("ctxsel")
    head = [str(script)] if script.is_file() else [sys.executable, "-m", "ctxsel.cli.main"]
    return [
        *head,
        "eval",
        "--dataset",
        str(data),
        "--output",
        str(out),
        "--scorer",
        "keywords",
        "--methods",
        METHODS,
        "--no-progress",
    ]


def _complete_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _rows_without_timing(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for r in rows:
        r.pop("select_ms")
    return rows


@pytest.mark.slow
def test_killed_eval_resumes_without_loss_or_duplicates(tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    _make_dataset(data)
    killed_out, clean_out = tmp_path / "killed", tmp_path / "clean"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    total = N_EXAMPLES * N_METHODS

    # the uninterrupted reference runs alongside (2 cores)
    with (tmp_path / "clean.log").open("wb") as clean_log:
        clean = subprocess.Popen(_command(data, clean_out), stdout=clean_log, stderr=subprocess.STDOUT, env=env)
        try:
            results = killed_out / "results.jsonl"
            victim = subprocess.Popen(
                _command(data, killed_out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
            )
            deadline = time.monotonic() + 120
            while _complete_lines(results) < 3 * N_METHODS + 1 and victim.poll() is None:
                assert time.monotonic() < deadline, "eval wrote no results in 120 s"
                time.sleep(0.002)
            victim.send_signal(signal.SIGKILL)
            assert victim.wait(timeout=30) == -signal.SIGKILL, "eval finished before it could be killed"

            before = results.read_bytes()
            n_before = before.count(b"\n")
            assert 0 < n_before < total
            # simulate a kill in the middle of a write: a torn half line at the end
            with results.open("ab") as f:
                f.write(b'{"example_id": "ex39", "method": "top-k@5", "k": 5, "n_tok')

            resumed = subprocess.run(_command(data, killed_out), capture_output=True, env=env, timeout=300)
            assert resumed.returncode == 0, resumed.stderr.decode(errors="replace")
        finally:
            rc = clean.wait(timeout=300)
    assert rc == 0, (tmp_path / "clean.log").read_text(errors="replace")

    final = results.read_bytes()
    # nothing written before the kill was rewritten or lost; the torn line is gone
    assert final.startswith(before)
    assert b"n_tok{" not in final and final.endswith(b"\n")
    rows = [json.loads(line) for line in final.decode("utf-8").splitlines()]
    keys = [(r["example_id"], r["method"]) for r in rows]
    assert len(keys) == total
    assert len(set(keys)) == total  # exactly one line per (example, method)
    expected_keys = {(f"ex{i:02d}", m) for i in range(N_EXAMPLES) for m in METHODS.split(",")}
    assert set(keys) == expected_keys

    # same rows (apart from timing) and the same summary as the uninterrupted run
    assert _rows_without_timing(results) == _rows_without_timing(clean_out / "results.jsonl")
    resumed_summary = json.loads((killed_out / "summary.json").read_text(encoding="utf-8"))
    clean_summary = json.loads((clean_out / "summary.json").read_text(encoding="utf-8"))
    assert resumed_summary["config"] == clean_summary["config"]
    assert set(resumed_summary["methods"]) == set(METHODS.split(","))
    for method, entry in clean_summary["methods"].items():
        other = resumed_summary["methods"][method]
        assert set(other) == set(entry)
        assert entry["n"] == other["n"] == N_EXAMPLES
        for key, value in entry.items():
            if key in ("select_ms", "select_ms_ci95"):  # timings
                continue
            if value is None:
                assert other[key] is None, (method, key)
            else:
                assert other[key] == pytest.approx(value, rel=1e-12, abs=1e-12), (method, key)
    assert (killed_out / "summary.md").is_file() and (killed_out / "plots").is_dir()


def _examples(n: int) -> list[Example]:
    out = []
    for i in range(n):
        chunks = [
            Chunk(id=f"c{j}", text=f"meteorite museum {'x' * j}" if j == i else f"banana {j}", position=j, n_tokens=5)
            for j in range(4)
        ]
        out.append(Example(id=f"e{i}", question="meteorite museum", chunks=chunks, gold_ids=[f"c{i}"]))
    return out


@pytest.fixture
def no_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plots are slow and not what these tests check."""
    monkeypatch.setattr("ctxsel.eval.report.plot_tradeoff", lambda *a, **k: None)
    monkeypatch.setattr("ctxsel.eval.runner.plot_similarity_curve", lambda *a, **k: None)


def test_evaluate_in_process(tmp_path: Path, no_plots: None) -> None:
    summary = evaluate(
        _examples(3), ["top-k@1", "full"], output_dir=tmp_path, scorer="keywords", dataset_name="mini", progress=False
    )
    assert summary["top-k@1"]["n"] == 3
    assert summary["top-k@1"]["recall"] == 1.0  # the gold chunk is the only one sharing words
    assert summary["top-k@1"]["precision"] == 1.0
    assert summary["top-k@1"]["k"] == 1.0
    assert summary["top-k@1"]["diff_k"] == 0.0  # true_k = 1
    assert summary["top-k@1"]["diff_k_authors"] == 1.0
    assert summary["top-k@1"]["reduction"] == 75.0  # 5 of 20 tokens
    assert summary["full"]["precision"] == 0.25
    rows = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(r["example_id"], r["method"]) for r in rows] == [
        ("e0", "top-k@1"),
        ("e0", "full"),
        ("e1", "top-k@1"),
        ("e1", "full"),
        ("e2", "top-k@1"),
        ("e2", "full"),
    ]
    on_disk = json.loads((tmp_path / "summary.json").read_text(encoding="utf-8"))
    assert on_disk["methods"] == summary
    assert on_disk["config"]["scorer"] == "keywords"
    # a second run finds everything done and reports the same
    assert (
        evaluate(
            _examples(3),
            ["top-k@1", "full"],
            output_dir=tmp_path,
            scorer="keywords",
            dataset_name="mini",
            progress=False,
        )
        == summary
    )
    assert (tmp_path / "results.jsonl").read_text(encoding="utf-8").count("\n") == 6


def test_summary_covers_only_this_runs_examples(tmp_path: Path, no_plots: None) -> None:
    evaluate(_examples(3), ["top-k@1"], output_dir=tmp_path, scorer="keywords", dataset_name="mini", progress=False)
    summary = evaluate(
        _examples(1), ["top-k@1"], output_dir=tmp_path, scorer="keywords", dataset_name="mini", progress=False
    )
    assert summary["top-k@1"]["n"] == 1
