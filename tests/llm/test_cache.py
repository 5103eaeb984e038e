"""ResponseCache and CachedClient: keys, hits and misses, sampling, corruption recovery, 8 processes."""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import random
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from ctxsel.llm import CachedClient, Completion, LLMClient, OpenAICompatClient, ResponseCache, cache_key
from ctxsel.types import LLMUsage
from tests.support.fake_server import FakeOpenAIServer, chat_reply


class FakeClient:
    """An LLMClient whose reply spells out its input, and which counts calls."""

    def __init__(self, model_id: str = "fake-1") -> None:
        self.model_id = model_id
        self.calls = 0

    def complete(self, prompt, *, max_tokens=256, temperature=0.0, stop=None, seed=None, **extra) -> Completion:
        self.calls += 1
        text = json.dumps([self.model_id, prompt, max_tokens, temperature, stop, seed, extra, self.calls])
        return Completion(
            text=text,
            usage=LLMUsage(1, 10 + len(str(prompt)), 5),
            finish_reason="stop",
            model=self.model_id,
            raw={"id": f"call-{self.calls}", "nested": {"a": [1, 2]}},
        )


@pytest.fixture
def cache(tmp_path: Path) -> ResponseCache:
    return ResponseCache(tmp_path / "llm.sqlite")


def test_fake_client_is_an_llm_client():
    assert isinstance(FakeClient(), LLMClient)


def test_identical_call_hits(cache):
    inner = FakeClient()
    client = CachedClient(inner, cache, template_version="t1")
    a = client.complete("Q?", max_tokens=16, stop=["\n"], seed=3)
    b = client.complete("Q?", max_tokens=16, stop=["\n"], seed=3)
    assert inner.calls == 1
    assert (client.hits, client.misses, client.bypassed) == (1, 1, 0)
    assert a.cached is False and b.cached is True
    assert b.text == a.text and b.usage == a.usage and b.finish_reason == "stop" and b.model == "fake-1"
    assert b.raw == a.raw
    assert len(cache) == 1


def test_entries_persist_across_instances_and_values_are_json(tmp_path):
    path = tmp_path / "c.sqlite"
    first = FakeClient()
    out = CachedClient(first, ResponseCache(path)).complete([{"role": "user", "content": "hi"}])
    second = FakeClient()
    again = CachedClient(second, ResponseCache(path)).complete([{"role": "user", "content": "hi"}])
    assert second.calls == 0 and again.cached and again.text == out.text and again.usage == out.usage
    with sqlite3.connect(path) as con:
        (value,) = con.execute("SELECT value FROM responses").fetchone()
    stored = json.loads(value)  # plain JSON, no pickles
    assert stored["text"] == out.text and stored["raw"] == {"id": "call-1", "nested": {"a": [1, 2]}}
    assert "cached" not in stored


def test_store_raw_false_drops_raw(tmp_path):
    client = CachedClient(FakeClient(), ResponseCache(tmp_path / "c.sqlite", store_raw=False))
    client.complete("x")
    assert client.complete("x").raw == {}


BASE: dict[str, Any] = dict(prompt="Q?", max_tokens=16, temperature=0.0, stop=["\n"], seed=3)
CHANGES = {
    "prompt": {"prompt": "Q!"},
    "messages instead of string": {"prompt": [{"role": "user", "content": "Q?"}]},
    "system message": {"prompt": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Q?"}]},
    "max_tokens": {"max_tokens": 17},
    "temperature": {"temperature": 0.7},
    "stop": {"stop": ["\n\n"]},
    "no stop": {"stop": None},
    "seed": {"seed": 4},
    "no seed": {"seed": None},
    "extra parameter": {"top_p": 0.9},
}


@pytest.mark.parametrize("change", list(CHANGES), ids=list(CHANGES))
def test_any_parameter_change_misses(cache, change):
    inner = FakeClient()
    client = CachedClient(inner, cache, template_version="t1", cache_sampling=True)  # isolate temperature
    base = dict(BASE)
    client.complete(base.pop("prompt"), **base)
    changed = {**BASE, **CHANGES[change]}
    out = client.complete(changed.pop("prompt"), **changed)
    assert inner.calls == 2 and out.cached is False
    assert len(cache) == 2


def test_model_change_misses(cache):
    a, b = FakeClient("model-a"), FakeClient("model-b")
    CachedClient(a, cache).complete("Q?")
    out = CachedClient(b, cache).complete("Q?")
    assert b.calls == 1 and not out.cached and json.loads(out.text)[0] == "model-b"


def test_template_version_change_misses(cache):
    inner = FakeClient()
    CachedClient(inner, cache, template_version="v1").complete("Q?")
    CachedClient(inner, cache, template_version="v2").complete("Q?")
    assert inner.calls == 2
    assert CachedClient(inner, cache, template_version="v1").complete("Q?").cached


def test_temperature_above_zero_bypasses_unless_cache_sampling(cache):
    inner = FakeClient()
    client = CachedClient(inner, cache)
    a = client.complete("Q?", temperature=0.8)
    b = client.complete("Q?", temperature=0.8)
    assert inner.calls == 2 and a.text != b.text and not b.cached
    assert client.bypassed == 2 and len(cache) == 0

    sampling = CachedClient(inner, cache, cache_sampling=True)
    c = sampling.complete("Q?", temperature=0.8, seed=1)
    d = sampling.complete("Q?", temperature=0.8, seed=1)
    assert inner.calls == 3 and d.cached and d.text == c.text


def test_cache_key_is_canonical():
    k = cache_key("m", "p", max_tokens=5, stop=["x"], seed=1, template_version="t")
    assert len(k) == 64 and int(k, 16) >= 0
    assert k == cache_key("m", "p", max_tokens=5, stop=["x"], seed=1, template_version="t")
    assert k == cache_key("m", "p", max_tokens=5, stop=("x",), seed=1, template_version="t", temperature=0)
    assert cache_key("m", "p", stop=[]) == cache_key("m", "p", stop=None)
    assert cache_key("m", "p", top_p=0.5, top_k=3) == cache_key("m", "p", top_k=3, top_p=0.5)
    assert cache_key("m", "p") != cache_key("m", "p", identity={"mode": "completions"})
    with pytest.raises(TypeError, match="JSON-serialisable"):
        cache_key("m", "p", logit_bias=object())


def test_cached_http_client_skips_the_server_and_keys_on_mode(tmp_path):
    with FakeOpenAIServer() as server:
        server.push(chat_reply("Paris", 9, 1), chat_reply("Paris, completions", 9, 2))
        cache = ResponseCache(tmp_path / "c.sqlite")
        chat = CachedClient(OpenAICompatClient(server.base_url, "m", api_key=""), cache, "v1")
        assert chat.complete("Capital?").text == "Paris"
        hit = chat.complete("Capital?")
        assert hit.cached and hit.text == "Paris" and hit.usage == LLMUsage(1, 9, 1)
        assert server.calls == 1
        completions = CachedClient(OpenAICompatClient(server.base_url, "m", api_key="", mode="completions"), cache)
        completions.complete("Capital?")
        assert server.calls == 2  # same model and prompt, other mode: a different key


def test_unreadable_entry_is_a_miss_then_overwritten(cache):
    inner = FakeClient()
    client = CachedClient(inner, cache)
    client.complete("Q?")
    with sqlite3.connect(cache.path) as con:
        con.execute("UPDATE responses SET value = 'not json {'")
    out = client.complete("Q?")
    assert inner.calls == 2 and not out.cached
    assert client.complete("Q?").cached


# -- corruption ----------------------------------------------------------------------


def _fill(path: Path, n: int = 200) -> int:
    c = ResponseCache(path)
    for i in range(n):
        c.put(f"k{i}", Completion("x" * 300 + str(i), LLMUsage(1, 2, 3)))
    c.close()  # the last connection checkpoints the WAL into the main file
    assert not Path(str(path) + "-wal").exists()
    return path.stat().st_size


CORRUPTIONS = {
    "truncated to half": lambda p, size: os.truncate(p, size // 2),
    "truncated inside the header": lambda p, size: os.truncate(p, 50),
    "garbage bytes": lambda p, size: p.write_bytes(random.Random(0).randbytes(size)),
    "a text file": lambda p, size: p.write_text("this is not a database\n" * 100),
}


@pytest.mark.parametrize("kind", list(CORRUPTIONS), ids=list(CORRUPTIONS))
def test_corrupt_file_is_moved_aside_and_rebuilt(tmp_path, caplog, kind):
    path = tmp_path / "llm.sqlite"
    size = _fill(path)
    CORRUPTIONS[kind](path, size)
    with caplog.at_level(logging.WARNING, logger="ctxsel.llm"):
        cache = ResponseCache(path)
    assert any("corrupt" in r.getMessage() and "moved it aside" in r.getMessage() for r in caplog.records)
    aside = sorted(tmp_path.glob("llm.sqlite.corrupt-*"))
    assert [p.name for p in aside if not p.name.endswith(("-wal", "-shm"))], "the bad file was not kept"
    assert len(cache) == 0
    inner = FakeClient()
    client = CachedClient(inner, cache)
    assert not client.complete("Q?").cached
    assert client.complete("Q?").cached and inner.calls == 1
    assert len(ResponseCache(path)) == 1  # and a fresh open of the rebuilt file is clean


def test_corruption_met_mid_run_is_rebuilt(tmp_path, caplog):
    path = tmp_path / "llm.sqlite"
    _fill(path)
    cache = ResponseCache(path)
    inner = FakeClient()
    client = CachedClient(inner, cache)
    client.complete("before")
    cache.close()
    path.write_bytes(b"\x00garbage" * 4096)  # the file goes bad under a live cache object
    for p in tmp_path.glob("llm.sqlite-*"):
        p.unlink()
    with caplog.at_level(logging.WARNING, logger="ctxsel.llm"):
        out = client.complete("after")
    assert not out.cached and inner.calls == 2
    assert any("corrupt" in r.getMessage() for r in caplog.records)
    assert client.complete("after").cached


def test_empty_file_is_a_valid_empty_cache(tmp_path, caplog):
    path = tmp_path / "llm.sqlite"
    path.write_bytes(b"")
    with caplog.at_level(logging.WARNING, logger="ctxsel.llm"):
        cache = ResponseCache(path)
    assert len(cache) == 0 and not caplog.records and not list(tmp_path.glob("*.corrupt-*"))


def test_unwritable_location_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OSError, match="CTXSEL_CACHE_DIR"):
        ResponseCache(blocker / "sub" / "llm.sqlite")


# -- concurrency ---------------------------------------------------------------------

N_PROCS, PER_PROC = 8, 50


def _entry(wid: int, j: int) -> tuple[str, Completion]:
    key = cache_key("fake", f"worker {wid} item {j}")
    return key, Completion(f"w{wid}-{j}", LLMUsage(1, wid, j), "stop", "fake", {"w": wid, "j": j})


def _worker(path: str, wid: int, barrier: Any, results: Any) -> None:
    cache = ResponseCache(path)
    rng = random.Random(wid)
    wrong = seen = 0
    barrier.wait()
    for j in range(PER_PROC):
        key, comp = _entry(wid, j)
        cache.put(key, comp, "fake")
        for _ in range(2):  # read others' entries while they are being written
            okey, ocomp = _entry(rng.randrange(N_PROCS), rng.randrange(PER_PROC))
            got = cache.get(okey)
            if got is not None:
                seen += 1
                wrong += (got.text, got.usage, got.raw) != (ocomp.text, ocomp.usage, ocomp.raw)
    barrier.wait()  # everyone has written: every entry must now be readable
    missing = 0
    for w in range(N_PROCS):
        for j in range(PER_PROC):
            key, comp = _entry(w, j)
            got = cache.get(key)
            missing += got is None
            wrong += got is not None and (got.text, got.usage, got.raw) != (comp.text, comp.usage, comp.raw)
    results.put((wid, wrong, missing, seen))


def test_eight_processes_writing_and_reading_lose_nothing(tmp_path):
    path = str(tmp_path / "shared.sqlite")
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(N_PROCS)
    results = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(path, w, barrier, results)) for w in range(N_PROCS)]
    for p in procs:
        p.start()
    reports = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    assert sorted(r[0] for r in reports) == list(range(N_PROCS))
    assert all(r[1] == 0 for r in reports), f"wrong values seen: {reports}"
    assert all(r[2] == 0 for r in reports), f"entries missing: {reports}"

    cache = ResponseCache(path)
    assert len(cache) == N_PROCS * PER_PROC == 400
    for w in range(N_PROCS):
        for j in range(PER_PROC):
            key, comp = _entry(w, j)
            got = cache.get(key)
            assert got is not None and got.cached
            assert (got.text, got.usage, got.raw, got.finish_reason) == (comp.text, comp.usage, comp.raw, "stop")
    assert not list(tmp_path.glob("*.corrupt-*"))


def test_threads_sharing_one_cache_object(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "t.sqlite")
    errors: list[BaseException] = []

    def run(t: int) -> None:
        try:
            for j in range(25):
                key, comp = _entry(t, j)
                cache.put(key, comp)
                got = cache.get(key)
                assert got is not None and got.text == comp.text
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(cache) == 200
