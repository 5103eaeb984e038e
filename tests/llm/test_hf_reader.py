"""The transformers reader (``--reader local --device``): batched generation gives the text one prompt at a
time gives, the CLI runs it end to end on CPU, and ``--device cuda`` without a GPU is one clear line.

All on the tiny random model (``ctxsel.train.context_picker.tiny_model``): greedy decoding of a random
model still has one answer per prompt, which is all these tests compare."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from ctxsel.errors import InputError, LLMContextLengthError  # noqa: E402
from ctxsel.llm.base import complete_many, has_complete_many  # noqa: E402
from ctxsel.llm.cache import CachedClient, ResponseCache  # noqa: E402
from ctxsel.llm.hf_reader import TransformersReaderClient, check_device  # noqa: E402
from ctxsel.train.context_picker.tiny_model import make_tiny_model  # noqa: E402
from tests.support.cli import run_cli  # noqa: E402

PROMPTS = [
    "Who wrote Hamlet?",
    "A much longer prompt, so that the batch needs left padding: " + "words " * 30,
    "Q",
    "The capital of France is",
    "Another question of a middling length, about rivers and seas?",
]


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def tiny_client(**kw: Any) -> TransformersReaderClient:
    return TransformersReaderClient(model_and_tokenizer=make_tiny_model(seed=5), device="cpu", chat=False, **kw)


def test_batched_generation_gives_the_text_of_one_prompt_at_a_time() -> None:
    client = tiny_client(batch_size=8)
    batched = client.complete_many(PROMPTS, max_tokens=12)
    alone = [client.complete(p, max_tokens=12) for p in PROMPTS]
    assert [c.text for c in batched] == [c.text for c in alone]
    assert [c.usage.tokens_in for c in batched] == [c.usage.tokens_in for c in alone]
    assert [c.usage.tokens_in for c in alone] == [len(p.encode()) for p in PROMPTS]  # byte-level tokens
    assert all(c.usage.tokens_out == 12 and c.finish_reason == "length" for c in batched)  # no eos in 12 random steps
    assert len({c.text for c in batched}) > 1  # the prompts do change the replies


def test_batches_respect_both_bounds_and_keep_the_order() -> None:
    client = tiny_client(batch_size=2, max_batch_tokens=200)
    ids = [[0] * n for n in (10, 150, 40, 60, 5)]
    batches = client._batches(ids, max_tokens=8)
    # longest first; 150 + 8 tokens twice is past 200, 60 + 8 twice is not; then two prompts at most
    assert batches == [[1], [3, 2], [0, 4]]
    small = client.complete_many(PROMPTS, max_tokens=6)  # many small batches: the same replies, in order
    assert [c.text for c in small] == [c.text for c in tiny_client(batch_size=8).complete_many(PROMPTS, max_tokens=6)]


def test_stop_strings_cut_the_reply_and_count_as_a_stop() -> None:
    client = tiny_client()
    free = client.complete_many(PROMPTS, max_tokens=16)
    stop = next(c.text[3:5] for c in free if len(set(c.text[3:5])) == 2 and len(c.text) >= 8)
    cut = client.complete_many(PROMPTS, max_tokens=16, stop=[stop])
    for f, c in zip(free, cut, strict=True):
        assert c.text == (f.text[: f.text.index(stop)] if stop in f.text else f.text)
    assert any(c.finish_reason == "stop" for c in cut)


def test_a_prompt_past_the_window_is_a_context_length_error() -> None:
    client = tiny_client(n_ctx=40)
    with pytest.raises(LLMContextLengthError, match="40-token window"):
        client.complete_many(["short", "x" * 50], max_tokens=4)


def test_sampling_is_refused_and_a_reply_format_is_not_enforced() -> None:
    from ctxsel.llm.constrain import yes_no_format

    client = tiny_client()
    with pytest.raises(InputError, match="greedily"):
        client.complete("q", temperature=0.7)
    assert client.complete("q", max_tokens=3, reply_format=yes_no_format("ok")).constrained is False


def test_the_cache_serves_hits_and_batches_the_misses(tmp_path: Path) -> None:
    inner = tiny_client()
    cached = CachedClient(inner, ResponseCache(tmp_path / "c.sqlite"))
    assert has_complete_many(cached) and not has_complete_many(object())
    first = complete_many(cached, PROMPTS[:3], max_tokens=5)
    again = complete_many(cached, PROMPTS, max_tokens=5)
    assert (cached.hits, cached.misses) == (3, 5)
    assert [c.text for c in again[:3]] == [c.text for c in first] and all(c.cached for c in again[:3])
    assert [c.text for c in again] == [c.text for c in inner.complete_many(PROMPTS, max_tokens=5)]


def test_cuda_without_a_gpu_is_one_clear_line() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(InputError) as e:
        check_device("cuda")
    assert "sees no CUDA GPU" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(InputError, match="unknown device"):
        check_device("tpu")


def test_cli_device_cuda_without_a_gpu_is_an_error_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    rc, _, err = run_cli(
        capsys, "eval", "--dataset", "example", "--methods", "full", "--reader", "local", "--device", "cuda",
        "--scorer", "bm25", "--output", str(tmp_path / "out"), "--llm-cache", "off",
    )  # fmt: skip
    assert rc != 0 and "sees no CUDA GPU" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_cli_device_refuses_a_gguf_file_and_an_http_reader(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for reader, needle in (
        ("local:model.gguf", "not the GGUF file"),
        ("http://127.0.0.1:9/v1", "is for --reader local"),
    ):
        rc, _, err = run_cli(
            capsys, "eval", "--dataset", "example", "--methods", "full", "--reader", reader, "--reader-model", "m",
            "--device", "cpu", "--scorer", "bm25", "--output", str(tmp_path / "out"), "--llm-cache", "off",
        )  # fmt: skip
        assert rc != 0 and needle in err and "Traceback" not in err


def test_cli_device_cpu_end_to_end_on_the_example_dataset(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    model, tok = make_tiny_model(seed=2)
    folder = tmp_path / "tiny"
    model.save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    out = tmp_path / "out"
    rc, stdout, err = run_cli(
        capsys, "eval", "--dataset", "example", "--methods", "top-k@2,full,closed-book", "--scorer", "bm25",
        "--reader", f"local:{folder}", "--device", "cpu", "--n-ctx", "4096", "--reader-batch", "4",
        "--output", str(out), "--llm-cache", "off", "--ci", "none",
    )  # fmt: skip
    assert rc == 0, err
    config = json.loads((out / "config.json").read_text())
    assert config["reader"]["model"] == "transformers:tiny:float32" and config["reader"]["window"] == 4096
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert rows and all("error" not in r for r in rows)
    assert all(isinstance(r["answer"], str) and r["llm_calls"] == 1 and r["tokens_in"] > 0 for r in rows)
    assert {r["method"] for r in rows} == {"top-k@2", "full", "closed-book"}
    # the same answers one question at a time: the batched eval read what a lone call reads
    client = TransformersReaderClient(folder, device="cpu", n_ctx=4096)
    from ctxsel.datasets import load_dataset
    from ctxsel.eval.runner import evaluate
    from ctxsel.reader import Reader

    alone = tmp_path / "alone"
    evaluate(
        load_dataset("example"), ["top-k@2", "full", "closed-book"], output_dir=alone, scorer="bm25",
        reader=Reader(client), progress=False, read_batch=1, ci="none",
    )  # fmt: skip
    lone = {(r["example_id"], r["method"]): r["answer"] for r in map(json.loads, (alone / "results.jsonl").open())}
    assert {(r["example_id"], r["method"]): r["answer"] for r in rows} == lone
