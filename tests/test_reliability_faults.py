"""Faults in caches, result logs and interrupted runs (issue 17, items 1-4): each test makes the fault
for real (bytes written over a cache file, a process killed with SIGKILL, a file size limit, two
processes on one folder) and checks what the user sees: the exit code or status, the message's key
words, no traceback, and that no result is lost or wrong. docs/reliability.md lists them (C1, C2...).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ctxsel.cli.main import main as cli_main
from ctxsel.errors import OutputFolderBusy
from ctxsel.eval.lock import LOCK_NAME, OutputLock
from ctxsel.eval.results import ResultLog
from ctxsel.eval.runner import evaluate
from ctxsel.scoring.cache import EmbeddingCache
from ctxsel.types import Chunk, Example
from tests.support import fullfs
from tests.support.cli import ctxsel_command
from tests.support.paths import EXAMPLE_MD, REPO
from tests.support.reliability import CHUNKS, EXPECTED_TOP2, QUESTION, example_chunks, fake_dense


def run_cli(
    args: list[str], env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([*ctxsel_command(), *args], capture_output=True, text=True, env=env, timeout=timeout)


# -- corrupting a SQLite file -------------------------------------------------------------------


def _page_size(path: Path) -> int:
    return int.from_bytes(path.read_bytes()[16:18], "big") or 65536


def garbage_header(path: Path) -> None:
    """What the issue did: 4 KiB of random bytes over the start (``dd conv=notrunc``)."""
    with path.open("r+b") as f:
        f.write(random.Random(0).randbytes(4096))


def truncated(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def garbage_middle(path: Path) -> None:
    """A page in the middle overwritten (the header is intact: only a full check or a read finds it)."""
    page = _page_size(path)
    n_pages = path.stat().st_size // page
    assert n_pages >= 8, "the cache is too small to have a middle"
    with path.open("r+b") as f:
        f.seek(page * (n_pages // 2))
        f.write(random.Random(1).randbytes(page))


CORRUPTIONS: dict[str, Callable[[Path], None]] = {
    "garbage header": garbage_header,
    "truncated": truncated,
    "garbage middle": garbage_middle,
}


def _fill_random(path: Path, n: int = 300, dim: int = 384) -> dict[str, np.ndarray]:
    """A cache of ``n`` random vectors, checkpointed into the main file (no -wal left)."""
    rng = np.random.default_rng(0)
    items = {f"filler-{i}": rng.standard_normal(dim).astype(np.float32) for i in range(n)}
    cache = EmbeddingCache(path)
    cache.put_many(items)
    cache.close()  # the last connection checkpoints the WAL into the main file
    assert not Path(f"{path}-wal").exists()
    return items


def _corrupt_copies(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("embeddings.sqlite.corrupt-*") if not p.name.endswith(("-wal", "-shm")))


def _warned_corrupt(messages: list[str]) -> bool:
    return any("embedding cache" in m and "corrupt" in m and "moved it aside" in m for m in messages)


# -- item 1: the embedding cache, without the model (the file handling itself) --------------------


@pytest.mark.parametrize("kind", list(CORRUPTIONS))
def test_corrupt_embedding_cache_is_moved_aside_and_rebuilt(tmp_path: Path, caplog: Any, kind: str) -> None:
    path = tmp_path / "embeddings.sqlite"
    items = _fill_random(path)
    CORRUPTIONS[kind](path)
    with caplog.at_level(logging.WARNING, logger="ctxsel.scoring"):
        cache = EmbeddingCache(path)
    assert _warned_corrupt([r.getMessage() for r in caplog.records])
    assert len(_corrupt_copies(tmp_path)) == 1, "the bad file was not kept for inspection"
    assert cache.usable and len(cache) == 0 and cache.get_many(list(items)[:5]) == {}
    cache.put_many({"a": np.ones(4, np.float32)})
    assert len(EmbeddingCache(path)) == 1  # a fresh open of the rebuilt file is clean


def test_corruption_met_mid_run_is_rebuilt(tmp_path: Path, caplog: Any) -> None:
    path = tmp_path / "embeddings.sqlite"
    items = _fill_random(path, n=20)
    cache = EmbeddingCache(path)
    assert len(cache.get_many(list(items))) == 20
    cache.close()
    path.write_bytes(b"\x00garbage" * 4096)  # the file goes bad under a live cache object
    for p in tmp_path.glob("embeddings.sqlite-*"):
        p.unlink()
    with caplog.at_level(logging.WARNING, logger="ctxsel.scoring"):
        assert cache.get_many(list(items)) == {}  # a miss, not an error
    assert _warned_corrupt([r.getMessage() for r in caplog.records])
    cache.put_many({"b": np.ones(4, np.float32)})
    assert set(cache.get_many(["b"])) == {"b"}


def test_garbled_rows_are_misses(tmp_path: Path) -> None:
    path = tmp_path / "embeddings.sqlite"
    cache = EmbeddingCache(path)
    cache.put_many({"good": np.ones(4, np.float32)})
    con = sqlite3.connect(path)
    with con:
        con.execute("INSERT INTO emb VALUES ('nan', 4, ?)", (np.array([1, np.nan, 0, 0], np.float32).tobytes(),))
        con.execute("INSERT INTO emb VALUES ('short', 4, ?)", (np.ones(3, np.float32).tobytes(),))
    con.close()
    assert set(cache.get_many(["good", "nan", "short"])) == {"good"}


# -- the scorer on a cache that cannot be used: a fake model at the model boundary -----------------


def test_cache_folder_that_is_a_file_is_a_warning_and_scoring_goes_on(tmp_path: Path, caplog: Any) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    with caplog.at_level(logging.WARNING, logger="ctxsel.scoring"):
        sc = fake_dense(blocker / "embeddings.sqlite")
        scores = sc.score(QUESTION, CHUNKS)
    messages = [r.getMessage() for r in caplog.records]
    assert any("cannot be used" in m and "CTXSEL_CACHE_DIR" in m for m in messages), messages
    assert not sc.cache.usable
    reference = fake_dense(False).score(QUESTION, CHUNKS)
    assert np.array_equal(scores, reference)


def test_disk_full_while_caching_is_one_warning_and_the_scores_are_right(tmp_path: Path) -> None:
    """A real write error: the child may not grow any file past 24 KiB (RLIMIT_FSIZE), so SQLite's
    writes fail part way through the pool, as on a full disk."""
    script = "LIMIT = 24 * 1024\n" + textwrap.dedent(f"""
        import json, resource, signal, sys
        from tests.support.reliability import CHUNKS, QUESTION, fake_dense
        scorer = fake_dense({str(tmp_path / "embeddings.sqlite")!r})  # the cache opens while there is room
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG), it does not kill
        resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))
        chunks = CHUNKS + [type(CHUNKS[0])(id=f"x{{i}}", text="long filler text " * 40 + str(i)) for i in range(300)]
        cached = scorer.score(QUESTION, chunks)
        plain = fake_dense(False).score(QUESTION, chunks)
        print(json.dumps([cached.tolist(), plain.tolist()]))
    """)
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        cwd=REPO,  # where `tests.support` is found
    )
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    assert out.stderr.count("write failed") == 1, out.stderr  # once, not once per batch
    assert "scores are unaffected" in out.stderr
    cached, plain = json.loads(out.stdout)
    assert cached == plain


# -- item 1 on the three surfaces, with the real model --------------------------------------------


@pytest.fixture(scope="module")
def healthy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """embeddings.sqlite holding example.md's vectors (from the real model) and filler rows, so it has
    a middle; the ONNX export is shared with the session's cache folder."""
    folder = tmp_path_factory.mktemp("healthy")
    session = Path(os.environ["CTXSEL_CACHE_DIR"])
    (session / "onnx").mkdir(parents=True, exist_ok=True)
    (folder / "onnx").symlink_to(session / "onnx")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CTXSEL_CACHE_DIR", str(folder))
        import ctxsel

        sel = ctxsel.select(QUESTION, example_chunks(), "top-k@2", scorer="dense")
        assert sel.ids == EXPECTED_TOP2
    path = folder / "embeddings.sqlite"
    _fill_random_more(path)
    con = sqlite3.connect(path)  # everything into the main file, which is what the tests copy
    assert con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
    con.close()
    wal = Path(f"{path}-wal")
    assert path.stat().st_size > 100_000 and (not wal.exists() or wal.stat().st_size == 0)
    return path


def _fill_random_more(path: Path) -> None:
    cache = EmbeddingCache(path)
    rng = np.random.default_rng(0)
    cache.put_many({f"filler-{i}": rng.standard_normal(384).astype(np.float32) for i in range(200)})
    cache.close()


@pytest.fixture
def corrupt_cache_dir(
    request: pytest.FixtureRequest, healthy_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """A cache folder (CTXSEL_CACHE_DIR) whose embeddings.sqlite is damaged as ``request.param`` says."""
    folder = tmp_path / "cache"
    folder.mkdir()
    (folder / "onnx").symlink_to(healthy_cache.parent / "onnx")
    shutil.copy(healthy_cache, folder / "embeddings.sqlite")
    CORRUPTIONS[request.param](folder / "embeddings.sqlite")
    monkeypatch.setenv("CTXSEL_CACHE_DIR", str(folder))
    yield folder


@pytest.mark.model
@pytest.mark.parametrize("corrupt_cache_dir", list(CORRUPTIONS), indirect=True)
def test_python_select_on_a_corrupt_cache(corrupt_cache_dir: Path, caplog: Any) -> None:
    import ctxsel

    with caplog.at_level(logging.WARNING, logger="ctxsel.scoring"):
        sel = ctxsel.select(QUESTION, example_chunks(), "top-k@2", scorer="dense")
    assert sel.ids == EXPECTED_TOP2
    assert _warned_corrupt([r.getMessage() for r in caplog.records])
    assert len(_corrupt_copies(corrupt_cache_dir)) == 1
    assert len(EmbeddingCache(corrupt_cache_dir / "embeddings.sqlite")) == len(example_chunks()) + 1  # rebuilt


#: ``ctxsel select`` on the example with the dense scorer, the one these cache faults are about
DENSE_SELECT = [
    *("select", "--document", str(EXAMPLE_MD), "--question", QUESTION),
    *("--method", "top-k@2", "--scorer", "dense", "--json"),
]


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.parametrize("corrupt_cache_dir", list(CORRUPTIONS), indirect=True)
def test_cli_select_on_a_corrupt_cache(corrupt_cache_dir: Path) -> None:
    out = run_cli(DENSE_SELECT)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr and "DatabaseError" not in out.stderr
    assert _warned_corrupt([out.stderr]), out.stderr
    assert [c["id"] for c in json.loads(out.stdout)["chunks"]] == EXPECTED_TOP2
    assert len(_corrupt_copies(corrupt_cache_dir)) == 1


def _server() -> Any:
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from tests.support.server_process import ServerProcess

    return ServerProcess(["--scorer", "dense", "--threads", "1"], token=None, start_timeout=240)


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.parametrize("corrupt_cache_dir", list(CORRUPTIONS), indirect=True)
def test_http_select_on_a_corrupt_cache(corrupt_cache_dir: Path) -> None:
    body = {"question": QUESTION, "chunks": [c.text for c in example_chunks()], "method": "top-k@2"}
    with _server() as srv:
        for _ in range(2):  # the second request is served from the rebuilt cache
            status, _, sel = srv.request("POST", "/select", body, timeout=240)
            assert status == 200, sel
            assert sel["ids"] == EXPECTED_TOP2
        status, _, health = srv.request("GET", "/health", auth=False)
        assert status == 200
        lines = srv.log_lines()
    warnings = [x for x in lines if x.get("level") == "warning" and x.get("logger") == "ctxsel.scoring"]
    assert _warned_corrupt([w["event"] for w in warnings]), lines
    assert not any("Traceback" in json.dumps(x) for x in lines)
    assert len(_corrupt_copies(corrupt_cache_dir)) == 1


# -- item 4: kill -9 during a cold embedding loses at most one batch -------------------------------

BATCH = 8
N_TEXTS = 400

EMBED_SCRIPT = f"""
import sys
from ctxsel.scoring.dense import DenseScorer
from ctxsel.types import Chunk
sc = DenseScorer(cache=sys.argv[1], batch_size={BATCH}, num_threads=1)
encode = sc.model.encode
def counted(texts, *a, **k):
    vecs = encode(texts, *a, **k)
    print(len(texts), flush=True)  # this many texts embedded (not yet stored)
    return vecs
sc.model.encode = counted
texts = [f"paragraph {{i}}: the museum's meteorite, item {{i * 7919 % 1000}}" for i in range({N_TEXTS})]
chunks = [Chunk(id=str(i), text=t) for i, t in enumerate(texts)]
scores = sc.score("How heavy is the meteorite?", chunks)
print("done", float(scores.sum()), flush=True)
"""


def _rows(path: Path) -> int:
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            return int(con.execute("SELECT COUNT(*) FROM emb").fetchone()[0])
        finally:
            con.close()
    except sqlite3.Error:
        return 0


@pytest.mark.model
@pytest.mark.slow
def test_kill_during_a_cold_embedding_loses_at_most_one_batch(tmp_path: Path) -> None:
    cache = tmp_path / "embeddings.sqlite"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    victim = subprocess.Popen(
        [sys.executable, "-c", EMBED_SCRIPT, str(cache)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 240
    while _rows(cache) < 1 + 5 * BATCH:  # the question, then five batches stored
        assert victim.poll() is None, "the embedding finished or failed before it could be killed"
        assert time.monotonic() < deadline, "no rows in the cache after 240 s"
        time.sleep(0.005)
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(timeout=30) == -signal.SIGKILL
    assert victim.stdout is not None
    embedded = sum(int(x) for x in victim.stdout.read().split() if x.isdigit())
    survived = _rows(cache)
    assert survived < 1 + N_TEXTS, "the embedding finished before the kill"
    assert embedded - survived <= BATCH, f"{embedded} texts embedded, {survived} stored: more than a batch lost"

    rerun = subprocess.run(
        [sys.executable, "-c", EMBED_SCRIPT, str(cache)], capture_output=True, text=True, env=env, timeout=300
    )
    assert rerun.returncode == 0, rerun.stderr
    lines = rerun.stdout.split()
    assert sum(int(x) for x in lines if x.isdigit()) == 1 + N_TEXTS - survived  # only the rest is embedded
    assert _rows(cache) == 1 + N_TEXTS


# -- item 2: one eval per output folder --------------------------------------------------------------

N_EXAMPLES = 40


def _dataset(path: Path, n: int = N_EXAMPLES, chunks: int = 400) -> Path:
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
        "comet",
        "lake",
    ]
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            texts = [" ".join(rng.choice(vocab) for _ in range(6)) for _ in range(chunks)]
            f.write(
                json.dumps(
                    {
                        "id": f"ex{i:02d}",
                        "question": " ".join(rng.sample(vocab, 3)),
                        "chunks": texts,
                        "gold_ids": [str(rng.randrange(chunks))],
                        "answers": ["x"],
                    }
                )
                + "\n"
            )
    return path


def _eval_args(data: Path, out: Path, *extra: str) -> list[str]:
    return [
        "eval",
        "--dataset",
        str(data),
        "--output",
        str(out),
        "--scorer",
        "keywords",
        "--methods",
        "top-k@1,adaptive-k",
        "--no-progress",
        *extra,
    ]


def _keys(results: Path) -> list[tuple[str, str]]:
    return [(r["example_id"], r["method"]) for r in map(json.loads, results.read_text(encoding="utf-8").splitlines())]


@pytest.mark.slow
def test_two_evals_into_one_folder_the_second_fails_at_once(tmp_path: Path) -> None:
    data, out = _dataset(tmp_path / "data.jsonl"), tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(
        [*ctxsel_command(), *_eval_args(data, out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert first.stderr is not None
    deadline = time.monotonic() + 120
    while not (out / "results.jsonl").is_file() or not (out / "results.jsonl").read_text(encoding="utf-8"):
        assert first.poll() is None, first.stderr.read()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    second = run_cli(_eval_args(data, out))
    still_running = first.poll() is None
    assert second.returncode == 2, second.stderr
    assert f"pid {first.pid}" in second.stderr and "in use by another run" in second.stderr
    assert "--output" in second.stderr and "Traceback" not in second.stderr
    assert still_running, "the second run waited for the first instead of failing at once"
    assert first.wait(timeout=300) == 0
    keys = _keys(out / "results.jsonl")
    assert len(keys) == len(set(keys)) == 2 * N_EXAMPLES  # nothing duplicated, nothing missing
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))["methods"]
    assert {m: e["n"] for m, e in summary.items()} == {"top-k@1": N_EXAMPLES, "adaptive-k": N_EXAMPLES}


def _hold_lock(folder: Path) -> subprocess.Popen[str]:
    """Another process holding ``folder``'s lock (as a running eval does) until it is killed."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom ctxsel.eval.lock import OutputLock\n"
            "lock = OutputLock(sys.argv[1])\nlock.acquire()\n"
            "print('held', flush=True)\ntime.sleep(600)",
            str(folder),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def _examples(n: int = 3) -> list[Example]:
    return [
        Example(
            id=f"e{i}",
            question="meteorite museum",
            chunks=[
                Chunk(id=f"c{j}", text="meteorite museum" if j == i else f"banana {j}", position=j, n_tokens=5)
                for j in range(4)
            ],
            gold_ids=[f"c{i}"],
        )
        for i in range(n)
    ]


@pytest.fixture
def no_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ctxsel.eval.report.plot_tradeoff", lambda *a, **k: None)
    monkeypatch.setattr("ctxsel.eval.runner.plot_similarity_curve", lambda *a, **k: None)


def _evaluate(out: Path, **kw: Any) -> dict[str, Any]:
    return evaluate(
        _examples(), ["top-k@1", "full"], output_dir=out, scorer="keywords", dataset_name="mini", progress=False, **kw
    )


def test_a_lock_left_by_a_killed_run_is_taken_over(tmp_path: Path, no_plots: None) -> None:
    holder = _hold_lock(tmp_path)
    with pytest.raises(OutputFolderBusy, match=f"pid {holder.pid}"):
        _evaluate(tmp_path)
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    assert f"pid {holder.pid}" in (tmp_path / LOCK_NAME).read_text()  # the dead run's pid is still written there
    assert _evaluate(tmp_path)["top-k@1"]["n"] == 3
    assert len(_keys(tmp_path / "results.jsonl")) == 6


def test_overwrite_while_another_run_holds_the_folder_deletes_nothing(
    tmp_path: Path, capsys: Any, no_plots: None
) -> None:
    data, out = _dataset(tmp_path / "data.jsonl", n=3, chunks=10), tmp_path / "out"
    assert cli_main(_eval_args(data, out)) == 0
    before = (out / "results.jsonl").read_bytes()
    holder = _hold_lock(out)
    try:
        capsys.readouterr()
        assert cli_main(_eval_args(data, out, "--overwrite")) == 2
        err = capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait()
    assert f"pid {holder.pid}" in err and "in use" in err and "Traceback" not in err
    assert (out / "results.jsonl").read_bytes() == before


def test_the_summary_counts_each_pair_once_whatever_the_file_holds(tmp_path: Path, no_plots: None) -> None:
    _evaluate(tmp_path)
    results = tmp_path / "results.jsonl"
    lines = results.read_text(encoding="utf-8").splitlines(keepends=True)
    results.write_text("".join(lines + lines + lines[:3]), encoding="utf-8")  # what two interleaved runs left
    summary = _evaluate(tmp_path)
    assert summary["top-k@1"]["n"] == summary["full"]["n"] == 3
    assert json.loads((tmp_path / "summary.json").read_text())["methods"]["full"]["n"] == 3
    assert len(results.read_text(encoding="utf-8").splitlines()) == 15  # nothing was run again


def test_lock_in_process_names_this_pid(tmp_path: Path) -> None:
    with OutputLock(tmp_path), pytest.raises(OutputFolderBusy, match=f"pid {os.getpid()}"):
        OutputLock(tmp_path).acquire()
    OutputLock(tmp_path).acquire()  # released on exit


# -- item 3: garbage or torn lines in the middle of results.jsonl ----------------------------------


def _row(i: int) -> str:
    return json.dumps({"example_id": f"e{i}", "method": "m", "k": i}) + "\n"


def test_bad_lines_in_the_middle_keep_every_valid_row(tmp_path: Path, caplog: Any) -> None:
    path = tmp_path / "results.jsonl"
    middle = [
        _row(0),
        "\x00\x01garbage\n",
        _row(1),
        '{"example_id": "e9", "meth\n',
        "[1, 2]\n",
        '{"example_id": "e8"}\n',
        _row(2),
        _row(3),
    ]
    path.write_text("".join(middle), encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="ctxsel.eval.results"), ResultLog(path) as log:
        assert [r["k"] for r in log.rows] == [0, 1, 2, 3]
        assert all(log.done(f"e{i}", "m") for i in range(4)) and not log.done("e9", "m")
        log.append(json.loads(_row(4)))
    message = " ".join(r.getMessage() for r in caplog.records)
    assert "skipped 4 line(s)" in message and "line 2, 4-6" in message and "4 valid row(s) are kept" in message
    # the bad lines stay where they were (append-only); the new row follows on its own line
    assert path.read_text(encoding="utf-8") == "".join(middle) + _row(4)


def test_bad_lines_at_the_end_are_cut_with_a_warning(tmp_path: Path, caplog: Any) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(_row(0) + "garbage\n" + _row(1) + "not json\n" + '{"example_id": "e2", "me', encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="ctxsel.eval.results"), ResultLog(path) as log:
        assert [r["k"] for r in log.rows] == [0, 1]
    message = " ".join(r.getMessage() for r in caplog.records)
    assert "line 2, 4-5" in message and "cut the unfinished end" in message
    assert path.read_text(encoding="utf-8") == _row(0) + "garbage\n" + _row(1)


def test_cli_resume_past_a_garbage_line_runs_nothing_again(tmp_path: Path, no_plots: None) -> None:
    data, out = _dataset(tmp_path / "data.jsonl", n=6, chunks=20), tmp_path / "out"
    assert cli_main(_eval_args(data, out)) == 0
    results = out / "results.jsonl"
    lines = results.read_text(encoding="utf-8").splitlines(keepends=True)
    results.write_text("".join(lines[:3]) + "#%$ not a row\n" + "".join(lines[3:]), encoding="utf-8")
    resumed = run_cli(_eval_args(data, out))  # a real process: the warning must reach its stderr
    assert resumed.returncode == 0, resumed.stderr
    err = resumed.stderr
    assert "skipped 1 line(s)" in err and "line 4" in err and "Traceback" not in err
    keys = _keys_skipping_bad(results)
    assert len(keys) == len(set(keys)) == 12  # every row after the garbage was kept: nothing ran again


def _keys_skipping_bad(results: Path) -> list[tuple[str, str]]:
    out = []
    for line in results.read_text(encoding="utf-8").splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        out.append((r["example_id"], r["method"]))
    return out


# -- more cases around the output folder ---------------------------------------------------------------


def _cli_eval(tmp_path: Path, capsys: Any, *extra: str) -> tuple[int, str, Path]:
    data, out = _dataset(tmp_path / "data.jsonl", n=3, chunks=10), tmp_path / "out"
    out.mkdir(exist_ok=True)
    capsys.readouterr()
    rc = cli_main(_eval_args(data, out, *extra))
    return rc, capsys.readouterr().err, out


def test_results_file_that_is_a_folder_is_a_clear_error(tmp_path: Path, capsys: Any, no_plots: None) -> None:
    (tmp_path / "out" / "results.jsonl").mkdir(parents=True)
    rc, err, _ = _cli_eval(tmp_path, capsys)
    assert rc == 2 and "results.jsonl is a folder" in err and "--output" in err and "Traceback" not in err


def test_empty_results_file_is_a_fresh_start(tmp_path: Path, capsys: Any, no_plots: None) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "results.jsonl").write_bytes(b"")
    rc, err, out = _cli_eval(tmp_path, capsys)
    assert rc == 0, err
    assert len(_keys(out / "results.jsonl")) == 6 and "Traceback" not in err


def test_garbage_summary_is_rewritten(tmp_path: Path, capsys: Any, no_plots: None) -> None:
    rc, err, out = _cli_eval(tmp_path, capsys)
    assert rc == 0, err
    (out / "summary.json").write_bytes(b"\xff\xfe garbage {")
    rc, err, out = _cli_eval(tmp_path, capsys)
    assert rc == 0 and "Traceback" not in err
    assert json.loads((out / "summary.json").read_text(encoding="utf-8"))["methods"]["top-k@1"]["n"] == 3


def test_garbage_config_is_a_clear_error(tmp_path: Path, capsys: Any, no_plots: None) -> None:
    rc, err, out = _cli_eval(tmp_path, capsys)
    assert rc == 0, err
    (out / "config.json").write_text("[1, 2", encoding="utf-8")
    rc, err, out = _cli_eval(tmp_path, capsys)
    assert rc == 2 and "config.json is unreadable" in err and "--overwrite" in err and "Traceback" not in err
    rc, err, out = _cli_eval(tmp_path, capsys, "--overwrite")
    assert rc == 0, err


def test_config_mismatch_on_resume_is_a_clear_error(tmp_path: Path, capsys: Any, no_plots: None) -> None:
    rc, err, out = _cli_eval(tmp_path, capsys)
    assert rc == 0, err
    data = tmp_path / "data.jsonl"
    capsys.readouterr()
    args = _eval_args(data, out)
    args[args.index("keywords")] = "bm25"
    rc = cli_main(args)
    err = capsys.readouterr().err
    assert rc == 2 and "holds results for scorer='keywords', not 'bm25'" in err and "--overwrite" in err
    assert "Traceback" not in err


def test_shards_appended_to_one_folder_make_the_whole_run(tmp_path: Path, capsys: Any, no_plots: None) -> None:
    data = _dataset(tmp_path / "data.jsonl", n=5, chunks=10)
    assert cli_main(_eval_args(data, tmp_path / "whole")) == 0
    for part in ("1/2", "2/2"):
        assert cli_main(_eval_args(data, tmp_path / part.replace("/", "of"), "--shard", part)) == 0
    assert [e for e, _ in _keys(tmp_path / "1of2" / "results.jsonl")][::2] == ["ex00", "ex02", "ex04"]
    assert [e for e, _ in _keys(tmp_path / "2of2" / "results.jsonl")][::2] == ["ex01", "ex03"]
    merged = tmp_path / "merged"
    merged.mkdir()
    shutil.copy(tmp_path / "1of2" / "config.json", merged)  # a shard's config passes the resume check
    lines = "".join((tmp_path / f"{i}of2" / "results.jsonl").read_text(encoding="utf-8") for i in (1, 2))
    (merged / "results.jsonl").write_text(lines, encoding="utf-8")
    assert cli_main(_eval_args(data, merged)) == 0  # resumes past every line: nothing runs again
    assert len(_keys(merged / "results.jsonl")) == 10
    assert json.loads((merged / "config.json").read_text(encoding="utf-8"))["n_examples"] == 5
    whole, joined = (json.loads((d / "summary.json").read_text(encoding="utf-8")) for d in (tmp_path / "whole", merged))
    for m in ("top-k@1", "adaptive-k"):
        assert joined["methods"][m]["n"] == 5
        assert joined["methods"][m]["recall"] == whole["methods"][m]["recall"]


@pytest.mark.parametrize("part", ["0/2", "3/2", "two", "1-2"])
def test_shard_must_be_i_of_n(capsys: Any, tmp_path: Path, part: str) -> None:
    with pytest.raises(SystemExit) as e:
        cli_main(_eval_args(tmp_path / "data.jsonl", tmp_path / "o", "--shard", part))
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--shard" in err and "expected I/N" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_a_shard_past_the_examples_is_a_clear_error(tmp_path: Path, capsys: Any, no_plots: None) -> None:
    rc, err, _ = _cli_eval(tmp_path, capsys, "--shard", "4/5")
    assert rc == 2 and "--shard 4/5: part 4 is empty, there are only 3 examples" in err and "Traceback" not in err


@pytest.mark.model
@pytest.mark.slow
def test_http_cache_corrupted_while_the_server_runs(
    healthy_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "cache"
    folder.mkdir()
    (folder / "onnx").symlink_to(healthy_cache.parent / "onnx")
    shutil.copy(healthy_cache, folder / "embeddings.sqlite")
    monkeypatch.setenv("CTXSEL_CACHE_DIR", str(folder))
    chunks = [c.text for c in example_chunks()]
    with _server() as srv:
        status, _, sel = srv.request(
            "POST", "/select", {"question": QUESTION, "chunks": chunks, "method": "top-k@2"}, timeout=240
        )
        assert status == 200 and sel["ids"] == EXPECTED_TOP2
        path = folder / "embeddings.sqlite"
        path.write_bytes(random.Random(2).randbytes(path.stat().st_size))  # the whole file goes bad
        for p in folder.glob("embeddings.sqlite-*"):
            p.unlink()
        for i in range(3):  # texts the server has not seen: they must be read from (and written to) the cache
            new = [f"{t} (copy {i})" for t in chunks]
            status, _, sel = srv.request(
                "POST", "/select", {"question": f"{QUESTION} ({i})", "chunks": new, "method": "top-k@2"}, timeout=240
            )
            assert status == 200, sel
            assert sel["ids"] == EXPECTED_TOP2
        status, _, health = srv.request("GET", "/health", auth=False)
        assert status == 200
        lines = srv.log_lines()
    # a connection the running server opens after the damage (a new worker thread) finds it and rebuilds;
    # one it opened before keeps reading its own consistent pages (the right scores, as asserted above)
    # and does not notice, and then the next process to open the file finds it
    with _server() as srv:
        status, _, sel = srv.request(
            "POST", "/select", {"question": QUESTION, "chunks": chunks, "method": "top-k@2"}, timeout=240
        )
        assert status == 200 and sel["ids"] == EXPECTED_TOP2
        lines += srv.log_lines()
    events = [x.get("event", "") for x in lines if x.get("logger") == "ctxsel.scoring"]
    assert _warned_corrupt(events), lines
    assert len(_corrupt_copies(folder)) == 1
    assert not any("Traceback" in json.dumps(x) for x in lines)


# -- issue 68, item 5: a full or locked disk degrades, it does not fail ----------------------------------------
# Each full-disk test runs on a real tmpfs (where this machine lets the test mount one) and on the same fault
# simulated at the storage boundary (tests/support/fullfs.py); only the tmpfs variant is ever skipped.

WARNED_FULL = "ctxsel cannot write its cache folder"  # paths' one warning


@pytest.fixture
def fresh_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The cache folder checked afresh, and a temporary folder of the test's own."""
    from ctxsel import paths

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv("TMPDIR", str(tmp))
    paths._forget()
    yield tmp
    paths._forget()


@pytest.fixture(params=fullfs.VARIANTS)
def filling_disk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[fullfs.FullFolder]:
    """A folder with 192 KiB left: the caches open, then their writes fill it."""
    yield from fullfs.full_folder(request.param, tmp_path, room=192 * 1024)


def _ctxsel_warnings(records: list[logging.LogRecord]) -> list[str]:
    return [r.getMessage() for r in records if r.name.startswith("ctxsel") and r.levelno >= logging.WARNING]


def test_caches_on_a_disk_that_fills_up_go_on_in_memory_after_one_warning(
    filling_disk: fullfs.FullFolder, fresh_paths: Path, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """The default caches open while there is room; the embedding cache's writes then fill the disk: one
    warning naming the folder and the space left, the scores of an uncached scorer, and the LLM
    replies (and every cache opened later) kept in memory, with no second warning."""
    from ctxsel.llm.base import Completion
    from ctxsel.llm.cache import ResponseCache

    cache_dir = filling_disk.folder / "cache"
    monkeypatch.setenv("CTXSEL_CACHE_DIR", str(cache_dir))
    chunks = [Chunk(id=f"x{i}", text=f"filler text number {i} about the meteorite") for i in range(4000)]
    with filling_disk.in_process(), caplog.at_level(logging.WARNING, logger="ctxsel"):
        llm = ResponseCache()
        assert llm.path == cache_dir / "llm_responses.sqlite"  # opened on disk, while there was room
        scorer = fake_dense(True)
        assert scorer.cache.path == cache_dir / "embeddings.sqlite"
        scores = scorer.score(QUESTION, chunks)
        reply = Completion(text="x" * 50_000, model="m")
        for i in range(8):  # more than the disk has left
            llm.put(f"k{i}", reply)
        later = EmbeddingCache()
    warnings = _ctxsel_warnings(caplog.records)
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"{WARNED_FULL} {cache_dir} (disk full"), warnings[0]
    assert " free there" in warnings[0] and "CTXSEL_CACHE_DIR" in warnings[0]
    assert np.array_equal(scores, fake_dense(False).score(QUESTION, chunks))
    assert all(llm.get(f"k{i}") is not None for i in range(8)) and llm.in_memory  # nothing lost
    assert str(later.path) == ":memory:"


def test_a_full_disk_with_an_explicit_cache_path_is_one_warning_naming_the_space(
    filling_disk: fullfs.FullFolder, fresh_paths: Path, caplog: Any
) -> None:
    path = filling_disk.folder / "mine.sqlite"
    chunks = [Chunk(id=f"x{i}", text=f"filler {i}") for i in range(4000)]
    with filling_disk.in_process(), caplog.at_level(logging.WARNING, logger="ctxsel"):
        scores = fake_dense(path).score(QUESTION, chunks)
    warnings = _ctxsel_warnings(caplog.records)
    assert len(warnings) == 1, warnings
    assert "write failed (disk full" in warnings[0] and "free there" in warnings[0], warnings[0]
    assert "scores are unaffected" in warnings[0]
    assert np.array_equal(scores, fake_dense(False).score(QUESTION, chunks))


def _write_export(size: int) -> Callable[[Path], None]:
    """What an exporter does (the seam both ONNX exporters use): a big file written to a temporary name
    beside it, then renamed."""
    from ctxsel.scoring.onnx_backend import atomic_target

    def make(folder: Path) -> None:
        if (folder / "model.onnx").is_file():
            return
        tmp = atomic_target(folder / "model.onnx")
        try:
            with open(tmp, "wb") as f:
                for _ in range(size // 65536):
                    f.write(bytes(65536))
            os.replace(tmp, folder / "model.onnx")
        finally:
            tmp.unlink(missing_ok=True)

    return make


def test_an_onnx_export_that_does_not_fit_goes_to_the_temporary_folder(
    filling_disk: fullfs.FullFolder, fresh_paths: Path, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    from ctxsel.scoring.onnx_backend import build_export

    cache_dir = filling_disk.folder / "cache"
    monkeypatch.setenv("CTXSEL_CACHE_DIR", str(cache_dir))
    with filling_disk.in_process(), caplog.at_level(logging.WARNING, logger="ctxsel"):
        folder = build_export("tiny-0123", "model.onnx", _write_export(2 * 1024 * 1024))
    assert folder == fresh_paths / f"ctxsel-{os.getuid()}" / "onnx" / "tiny-0123"
    assert (folder / "model.onnx").stat().st_size == 2 * 1024 * 1024
    assert not list((cache_dir / "onnx").rglob("*.tmp"))  # nothing half-written left in the full folder
    warnings = _ctxsel_warnings(caplog.records)
    assert len(warnings) == 1 and warnings[0].startswith(f"{WARNED_FULL} {cache_dir} (disk full"), warnings


def test_an_onnx_export_with_no_room_anywhere_says_disk_full(
    filling_disk: fullfs.FullFolder, fresh_paths: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ctxsel.errors import DiskFull
    from ctxsel.scoring.onnx_backend import build_export

    monkeypatch.setenv("CTXSEL_CACHE_DIR", str(filling_disk.folder / "cache"))
    monkeypatch.setattr(tempfile, "tempdir", str(filling_disk.folder / "tmp"))  # the temporary folder is full too
    (filling_disk.folder / "tmp").mkdir()
    with filling_disk.in_process(), pytest.raises(DiskFull) as info:
        build_export("tiny-0123", "model.onnx", _write_export(2 * 1024 * 1024))
    message = str(info.value)
    assert message.startswith("disk full (No space left on device)") and "free there" in message, message
    assert str(filling_disk.folder / "tmp") in message and str(filling_disk.folder / "cache") in message
    assert "CTXSEL_CACHE_DIR or TMPDIR" in message


@pytest.mark.parametrize("variant", fullfs.VARIANTS)
def test_eval_on_a_full_disk_says_disk_full_and_resumes(variant: str, tmp_path: Path) -> None:
    """`ctxsel eval` whose output folder fills up part way: exit 2, "disk full" in words with the space
    left and what to do, no traceback, no torn row; once there is room, the same command finishes the
    run and every (example, method) is there once."""
    data = _dataset(tmp_path / "data.jsonl", n=100, chunks=20)
    for ff in fullfs.full_folder(variant, tmp_path, room=24 * 1024):
        out = ff.folder / "out"
        args = _eval_args(data, out)
        full = run_cli(args, env=ff.env(), timeout=300)
        assert full.returncode == 2, full.stderr
        assert "Traceback" not in full.stderr
        error = [x for x in full.stderr.splitlines() if "error:" in x]
        assert len(error) == 1 and "error: disk full (No space left on device)" in error[0], full.stderr
        assert f"cannot write {out / 'results.jsonl'}" in error[0] and "free there" in error[0]
        assert "run the same command again" in error[0]
        results = (out / "results.jsonl").read_bytes()
        assert results.endswith(b"\n") and 0 < results.count(b"\n") < 200  # whole rows only, part of the run
        ff.make_room()
        resumed = run_cli(args, timeout=300)
        assert resumed.returncode == 0, resumed.stderr
        assert "skipped" not in resumed.stderr  # no torn line was left to skip
        keys = _keys(out / "results.jsonl")
        assert len(keys) == len(set(keys)) == 200


# -- a lock held by another process --------------------------------------------------------------------------

LOCK_SCRIPT = textwrap.dedent("""
    import json, sys, time
    from tests.support.reliability import CHUNKS, QUESTION, fake_dense
    start = time.monotonic()
    scorer = fake_dense(sys.argv[1])
    cached = scorer.score(QUESTION, CHUNKS)
    first = time.monotonic() - start
    more = [type(CHUNKS[0])(id=f"n{i}", text=f"another passage {i}") for i in range(40)]
    start = time.monotonic()
    scorer.score(QUESTION, more)  # the cache stepped aside: no second wait
    second = time.monotonic() - start
    print(json.dumps([cached.tolist(), fake_dense(False).score(QUESTION, CHUNKS).tolist(), first, second]))
""")

HOLDERS = {
    # a writer in the middle of a long transaction (BEGIN EXCLUSIVE), as another process's write is
    "BEGIN EXCLUSIVE": "import sqlite3, sys, time\n"
    "con = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
    "con.execute('BEGIN EXCLUSIVE')\n"
    "con.execute(\"INSERT OR REPLACE INTO lens (key, n) VALUES ('held', 1)\")\n"
    "print('held', flush=True)\ntime.sleep(600)",
    # the cache's own lock file, as a process checking or rebuilding the file holds it
    "lock file": "import fcntl, sys, time\n"
    "fh = open(sys.argv[1] + '.lock', 'a+b')\n"
    "fcntl.flock(fh.fileno(), fcntl.LOCK_EX)\n"
    "print('held', flush=True)\ntime.sleep(600)",
}


@contextlib.contextmanager
def _holding(kind: str, path: Path) -> Iterator[None]:
    holder = subprocess.Popen([sys.executable, "-c", HOLDERS[kind], str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        yield
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("kind", list(HOLDERS))
def test_a_cache_lock_held_by_another_process_is_waited_for_then_skipped(kind: str, tmp_path: Path) -> None:
    """A real second process holds the embedding cache's lock: the scorer waits at most
    CTXSEL_CACHE_LOCK_TIMEOUT (2 s here), warns while it waits and when it gives up, and returns the
    scores of an uncached scorer; the next call does not wait again."""
    path = tmp_path / "embeddings.sqlite"
    fake_dense(path).score("warm up", CHUNKS[:2])  # a healthy cache file, in WAL mode
    with _holding(kind, path):
        out = subprocess.run(
            [sys.executable, "-c", LOCK_SCRIPT, str(path)],
            capture_output=True,
            text=True,
            timeout=120,  # before the fix the lock-file case waited for ever
            env={**os.environ, "OMP_NUM_THREADS": "1", "CTXSEL_CACHE_LOCK_TIMEOUT": "2"},
            cwd=REPO,
        )
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    cached, plain, first, second = json.loads(out.stdout)
    assert cached == plain
    assert first < 20 and second < 1.5, (first, second)  # bounded by the 2 s limit (generous margins)
    lines = [x for x in out.stderr.splitlines() if x.strip()]
    assert len(lines) == 2, out.stderr
    assert "waiting for another process that holds" in lines[0] and "CTXSEL_CACHE_LOCK_TIMEOUT" in lines[0]
    assert "going on without the cache after 2 s" in lines[0]
    assert f"{path} is locked by another process" in lines[1] and "longer than 2 s" in lines[1], lines[1]
    assert "goes on without" in lines[1]


def test_a_bad_lock_timeout_is_a_warning_and_the_default(monkeypatch: pytest.MonkeyPatch, caplog: Any) -> None:
    from ctxsel.sqlite_store import DEFAULT_LOCK_TIMEOUT, lock_timeout

    for text in ("soon", "-1", "0", "inf"):
        monkeypatch.setenv("CTXSEL_CACHE_LOCK_TIMEOUT", text)
        with caplog.at_level(logging.WARNING, logger="ctxsel"):
            assert lock_timeout() == DEFAULT_LOCK_TIMEOUT
        assert f"CTXSEL_CACHE_LOCK_TIMEOUT={text!r} is not a number of seconds > 0" in caplog.text
    monkeypatch.setenv("CTXSEL_CACHE_LOCK_TIMEOUT", "2.5")
    assert lock_timeout() == 2.5


@pytest.mark.model
@pytest.mark.parametrize("kind", list(HOLDERS))
def test_cli_select_while_another_process_holds_the_cache_lock(kind: str, tmp_path: Path) -> None:
    """`ctxsel select` with the default dense scorer while another process holds the cache's lock (was:
    the lock file held, it waited for ever without a word): the same ids, the two warnings, in bounded time."""
    folder = tmp_path / "cache"
    folder.mkdir()
    session = Path(os.environ["CTXSEL_CACHE_DIR"])
    (session / "onnx").mkdir(parents=True, exist_ok=True)
    (folder / "onnx").symlink_to(session / "onnx")  # the session's ONNX export
    EmbeddingCache(folder / "embeddings.sqlite").put_many({"warm": np.ones(4, dtype=np.float32)})
    with _holding(kind, folder / "embeddings.sqlite"):
        start = time.monotonic()
        out = run_cli(
            DENSE_SELECT, env={"CTXSEL_CACHE_DIR": str(folder), "CTXSEL_CACHE_LOCK_TIMEOUT": "2"}, timeout=300
        )
        took = time.monotonic() - start
    assert out.returncode == 0, out.stderr
    assert [c["id"] for c in json.loads(out.stdout)["chunks"]] == EXPECTED_TOP2
    assert "Traceback" not in out.stderr
    assert "waiting for another process that holds" in out.stderr and "is locked by another process" in out.stderr
    assert len([x for x in out.stderr.splitlines() if x.strip()]) == 2, out.stderr
    assert took < 240, took  # a cold export may take most of it; the lock costs the 2 s limit
