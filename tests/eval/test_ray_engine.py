"""``ctxsel eval --engine ray`` on a local Ray cluster gives the local engine's results.

Everything in summary.json and results.jsonl must match field by field except
the timing columns (``select_ms``, ``wall_s``) and the recorded engine name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")

TIMING = {"select_ms", "wall_s", "select_ms_ci95", "wall_s_ci95"}  # and their intervals
METHODS = "adaptive-k,adaptive-k@moving_avg,autocut@1,top-k@1,top-k@5,top-n-tokens@200,full"


def _summary(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text(encoding="utf-8"))


def _rows(out: Path) -> list[dict[str, Any]]:
    lines = (out / "results.jsonl").read_text(encoding="utf-8").splitlines()
    return [{k: v for k, v in json.loads(x).items() if k not in TIMING} for x in lines]


def assert_same_evaluation(a: Path, b: Path) -> None:
    sa, sb = _summary(a), _summary(b)
    assert sa["config"]["engine"] == "local" and sb["config"]["engine"] == "ray"
    ca = {k: v for k, v in sa["config"].items() if k != "engine"}
    cb = {k: v for k, v in sb["config"].items() if k != "engine"}
    assert ca == cb
    assert list(sa["methods"]) == list(sb["methods"])
    for m, entry in sa["methods"].items():
        for field, value in entry.items():
            if field in TIMING:
                continue
            assert sb["methods"][m][field] == value, (m, field, value, sb["methods"][m][field])
    assert _rows(a) == _rows(b)
    assert (b / "summary.md").read_text(encoding="utf-8") == (a / "summary.md").read_text(encoding="utf-8")


def _ctxsel(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "ctxsel.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )


@pytest.mark.model
@pytest.mark.slow
def test_cli_ray_engine_matches_local_on_example(tmp_path: Path) -> None:
    common = ["eval", "--dataset", "example", "--methods", METHODS, "--threads", "1", "--no-progress"]
    local = _ctxsel(*common, "--output", str(tmp_path / "local"))
    assert local.returncode == 0, local.stderr[-3000:]
    ray = _ctxsel(*common, "--output", str(tmp_path / "ray"), "--engine", "ray", "--ray-num-cpus", "2")
    assert ray.returncode == 0, ray.stderr[-3000:]
    assert "ray: started a local cluster" in ray.stderr
    assert_same_evaluation(tmp_path / "local", tmp_path / "ray")
    assert local.stdout.split("\nwrote")[0] == ray.stdout.split("\nwrote")[0]  # the printed table too
    n = len(_rows(tmp_path / "local"))
    assert n == 6 * len(METHODS.split(","))


@pytest.fixture(scope="module")
def ray_session() -> Any:
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False)
    yield ray
    ray.shutdown()


@pytest.mark.slow
def test_ray_engine_in_process_resume_and_reorder(tmp_path: Path, ray_session: Any) -> None:
    """BM25 scorer, a session opened by the caller (reused and left running), and a resumed run:
    rows come back in example order whatever order the actors finish in."""
    from ctxsel.datasets import load_dataset
    from ctxsel.eval.ray_engine import RayOptions
    from ctxsel.eval.runner import evaluate

    examples = load_dataset("example")
    methods = METHODS.split(",")
    runs: list[Any] = []
    evaluate(examples, methods, output_dir=tmp_path / "local", scorer="bm25", progress=False)
    evaluate(
        examples,
        methods,
        output_dir=tmp_path / "ray",
        scorer="bm25",
        progress=False,
        engine="ray",
        ray_options=RayOptions(num_actors=3, cpus_per_actor=0.25),
        on_ray_run=runs.append,
    )
    assert len(runs) == 1 and runs[0].started_cluster is False and runs[0].num_actors == 3
    assert ray_session.is_initialized()
    assert_same_evaluation(tmp_path / "local", tmp_path / "ray")
    # drop the last 3 examples' rows and half of one example's methods, then resume on Ray
    path = tmp_path / "ray" / "results.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    keep = len(lines) - 3 * len(methods) - len(methods) // 2
    path.write_text("".join(lines[:keep]), encoding="utf-8")
    evaluate(examples, methods, output_dir=tmp_path / "ray", scorer="bm25", progress=False, engine="ray")
    assert len(path.read_text(encoding="utf-8").splitlines()) == len(lines)
    # resumed rows are appended in another order, so compare as sets, and the summaries field by field
    a = sorted(json.dumps(r, sort_keys=True) for r in _rows(tmp_path / "local"))
    b = sorted(json.dumps(r, sort_keys=True) for r in _rows(tmp_path / "ray"))
    assert a == b
    sa, sb = _summary(tmp_path / "local"), _summary(tmp_path / "ray")
    for m, entry in sa["methods"].items():
        assert {k: v for k, v in entry.items() if k not in TIMING} == {
            k: v for k, v in sb["methods"][m].items() if k not in TIMING
        }


@pytest.mark.slow
def test_ray_engine_with_a_reader_built_per_worker(tmp_path: Path, ray_session: Any) -> None:
    """A reader against an OpenAI-compatible server (the fake one, on this machine): each actor
    builds its own client with the CLI's factory; answers, scores and LLM counts match the local run."""
    import argparse
    import functools

    from ctxsel.cli.common import make_reader_and_judge
    from ctxsel.datasets import load_dataset
    from ctxsel.eval.ray_engine import RayOptions
    from ctxsel.eval.runner import evaluate
    from tests.support.fake_server import FakeOpenAIServer, completion_reply

    examples = load_dataset("example")
    methods = ["top-k@1", "top-k@3"]
    with FakeOpenAIServer() as server:
        server.push(
            *[
                completion_reply("Kestrel Optical Works", prompt_tokens=50, completion_tokens=4)
                for _ in range(2 * len(examples) * len(methods))
            ]
        )
        args = argparse.Namespace(
            reader=server.base_url,
            reader_model="fake",
            reader_mode="completions",
            reader_api_key_env="CTXSEL_TEST_NO_KEY",
            reader_timeout=60.0,  # only a bound: the fake replies at once, but a loaded CI machine may not
            llm_cache="off",
            judge=None,
        )
        reader, judge = make_reader_and_judge(args, "factoid-qa")
        evaluate(
            examples,
            methods,
            output_dir=tmp_path / "local",
            scorer="keywords",
            progress=False,
            reader=reader,
            judge=judge,
        )
        evaluate(
            examples,
            methods,
            output_dir=tmp_path / "ray",
            scorer="keywords",
            progress=False,
            reader=reader,
            judge=judge,
            engine="ray",
            ray_options=RayOptions(reader_factory=functools.partial(make_reader_and_judge, args, "factoid-qa")),
        )
        assert server.calls == 2 * len(examples) * len(methods)
    rows = _rows(tmp_path / "ray")
    assert rows == _rows(tmp_path / "local")
    assert {r["answer"] for r in rows} == {"Kestrel Optical Works"}
    assert all(r["llm_calls"] == 1 and r["tokens_in"] == 50 for r in rows)
    assert any(r["score"] == 1.0 for r in rows) and any(r["score"] == 0.0 for r in rows)
    assert_same_evaluation(tmp_path / "local", tmp_path / "ray")
