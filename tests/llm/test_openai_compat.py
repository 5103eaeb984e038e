"""OpenAICompatClient against a local fake server: parsing, retries, backoff, timeouts, no leaks."""

from __future__ import annotations

import email.utils
import gc
import os
import pickle
import time
import warnings

import pytest

from ctxsel.llm import (
    Completion,
    LLMAuthError,
    LLMBadRequest,
    LLMClient,
    LLMConnectionError,
    LLMContextLengthError,
    LLMError,
    LLMInvalidResponse,
    LLMNotFound,
    LLMRateLimited,
    LLMServerError,
    LLMTimeout,
    OpenAICompatClient,
    is_context_length_error,
    parse_retry_after,
)
from ctxsel.types import LLMUsage
from tests.support.fake_server import FakeOpenAIServer, Reply, chat_reply, completion_reply, free_port


class FixedRandom:
    """rng stub: random() always returns ``value`` (0 -> no jitter, 1 -> the full 25 %)."""

    def __init__(self, value: float = 0.0) -> None:
        self.value = value

    def random(self) -> float:
        return self.value


@pytest.fixture
def sleeps():
    return []


def make_client(server: FakeOpenAIServer, sleeps: list, **kw) -> OpenAICompatClient:
    kw.setdefault("timeout", 5.0)
    kw.setdefault("api_key", "")
    kw.setdefault("rng", FixedRandom(0.0))
    return OpenAICompatClient(server.base_url, kw.pop("model", "test-model"), sleep=sleeps.append, **kw)


def _socket_fds() -> int:
    return sum(1 for fd in os.listdir("/proc/self/fd") if _is_socket(fd))


def _is_socket(fd: str) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    except OSError:
        return False


# -- parsing ---------------------------------------------------------------


def test_chat_mode_parses_text_usage_and_sends_parameters(server, sleeps):
    server.push(chat_reply("Paris", prompt_tokens=12, completion_tokens=3, model="served-name"))
    client = make_client(server, sleeps)
    out = client.complete("Capital of France?", max_tokens=8, stop=["\n"], seed=7, top_p=0.9)

    assert isinstance(out, Completion)
    assert out.text == "Paris"
    assert out.usage == LLMUsage(calls=1, tokens_in=12, tokens_out=3)
    assert out.finish_reason == "stop"
    assert out.model == "served-name"
    assert out.attempts == 1 and out.cached is False
    assert out.raw["id"] == "chatcmpl-1"

    (req,) = server.requests
    assert req.path == "/v1/chat/completions"
    assert req.json == {
        "model": "test-model",
        "messages": [{"role": "user", "content": "Capital of France?"}],
        "max_tokens": 8,
        "temperature": 0.0,
        "stop": ["\n"],
        "seed": 7,
        "top_p": 0.9,
    }
    assert req.headers["content-type"] == "application/json"
    assert "authorization" not in req.headers
    assert sleeps == []


def test_chat_mode_sends_messages_as_given(server, sleeps):
    server.push(chat_reply("B"))
    messages = [{"role": "system", "content": "Answer with a letter."}, {"role": "user", "content": "A or B?"}]
    out = make_client(server, sleeps).complete(messages)
    assert out.text == "B"
    body = server.requests[0].json
    assert body["messages"] == messages
    assert "stop" not in body and "seed" not in body and body["max_tokens"] == 256


def test_completions_mode_parses_text_and_usage(server, sleeps):
    server.push(completion_reply(" 42", prompt_tokens=7, completion_tokens=2))
    client = make_client(server, sleeps, mode="completions")
    out = client.complete("The answer is", max_tokens=4)
    assert out.text == " 42"
    assert out.usage == LLMUsage(1, 7, 2)
    assert out.finish_reason == "length"
    (req,) = server.requests
    assert req.path == "/v1/completions"
    assert req.json["prompt"] == "The answer is" and "messages" not in req.json
    assert req.json["max_tokens"] == 4


def test_completions_mode_rejects_messages_without_calling(server, sleeps):
    client = make_client(server, sleeps, mode="completions")
    with pytest.raises(ValueError, match="mode='chat'"):
        client.complete([{"role": "user", "content": "hi"}])
    assert server.calls == 0


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/", "/v1/chat/completions"])
def test_base_url_with_or_without_v1(server, sleeps, suffix):
    server.push(chat_reply("ok"))
    client = OpenAICompatClient(server.base_url + suffix, "m", api_key="", sleep=sleeps.append)
    assert client.complete("hi").text == "ok"
    assert server.requests[0].path == "/v1/chat/completions"
    assert client.url == server.base_url + "/v1/chat/completions"


def test_base_url_with_other_path_is_kept(server, sleeps):
    server.push(chat_reply("ok"))
    client = OpenAICompatClient(server.base_url + "/api/openai/", "m", api_key="", sleep=sleeps.append)
    client.complete("hi")
    assert server.requests[0].path == "/api/openai/chat/completions"


@pytest.mark.parametrize("bad", ["localhost:8000", "ftp://x/v1", "", "http://"])
def test_bad_base_url_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="base_url"):
        OpenAICompatClient(bad, "m")


def test_api_key_argument_env_and_none(server, sleeps, monkeypatch):
    server.push(chat_reply(), chat_reply(), chat_reply())
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    make_client(server, sleeps, api_key="sk-arg", extra_headers={"X-Extra": "1"}).complete("a")
    make_client(server, sleeps, api_key=None).complete("b")
    make_client(server, sleeps, api_key="").complete("c")
    h = [r.headers for r in server.requests]
    assert h[0]["authorization"] == "Bearer sk-arg" and h[0]["x-extra"] == "1"
    assert h[1]["authorization"] == "Bearer sk-env"
    assert "authorization" not in h[2]
    assert "sk-arg" not in repr(make_client(server, sleeps, api_key="sk-arg"))


def test_missing_usage_is_zero_tokens(server, sleeps):
    body = {"choices": [{"message": {"role": "assistant", "content": ""}, "finish_reason": "stop"}]}
    server.push(Reply(200, body))
    out = make_client(server, sleeps).complete("x")
    assert out.text == "" and out.usage == LLMUsage(1, 0, 0) and out.finish_reason == "stop"
    assert out.model == "test-model"


@pytest.mark.parametrize(
    ("choice", "finish"),
    [
        ({"message": {"role": "assistant", "content": None}, "finish_reason": "tool_calls"}, "'tool_calls'"),
        (
            {"message": {"role": "assistant", "content": None, "reasoning_content": "..."}, "finish_reason": "length"},
            "'length'",
        ),
        ({"text": None, "finish_reason": None}, "None"),
    ],
)
def test_a_reply_with_null_content_is_an_error_not_an_empty_answer(server, sleeps, choice, finish):
    """Issue 45: content null was read as "" and answered as an empty answer with exit 0."""
    server.push(Reply(200, {"choices": [choice]}))
    with pytest.raises(LLMInvalidResponse) as ei:
        make_client(server, sleeps).complete("x")
    assert str(ei.value).startswith(f"the LLM server's reply has no text (content: null, finish_reason {finish})")
    assert "raise the answer's max_tokens" in str(ei.value) and len(server.requests) == 1  # not retried


def test_content_parts_are_joined(server, sleeps):
    parts = [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}]
    server.push(Reply(200, {"choices": [{"message": {"content": parts}, "finish_reason": "stop"}]}))
    assert make_client(server, sleeps).complete("x").text == "Hello"


@pytest.mark.parametrize(
    "body",
    ["<html>Bad gateway page</html>", {"object": "list", "data": []}, {"choices": []}, [1, 2]],
)
def test_invalid_success_reply_is_a_typed_error_not_retried(server, sleeps, body):
    server.push(Reply(200, body))
    with pytest.raises(LLMInvalidResponse) as ei:
        make_client(server, sleeps, max_retries=3).complete("x")
    assert server.calls == 1 and sleeps == []
    assert "OpenAI-compatible" in str(ei.value)


def test_client_satisfies_the_protocol(server, sleeps):
    assert isinstance(make_client(server, sleeps), LLMClient)


# -- retries -----------------------------------------------------------------

RETRYABLE = {408: LLMTimeout, 409: LLMServerError, 429: LLMRateLimited, 500: LLMServerError,
             502: LLMServerError, 503: LLMServerError, 504: LLMServerError}  # fmt: skip


@pytest.mark.parametrize("n", [0, 2])
@pytest.mark.parametrize("status", sorted(RETRYABLE))
def test_retryable_status_gives_n_plus_one_calls_then_typed_error(server, sleeps, status, n):
    server.push(*[Reply(status) for _ in range(n + 1)], chat_reply("never reached"))
    client = make_client(server, sleeps, max_retries=n)
    with pytest.raises(RETRYABLE[status]) as ei:
        client.complete("x")
    err = ei.value
    assert server.calls == n + 1
    assert err.status_code == status and err.attempts == n + 1
    assert f"HTTP {status}" in str(err) and f"after {n + 1} attempt" in str(err)
    assert f"scripted status {status}" in err.body
    assert sleeps == [0.5 * 2**i for i in range(n)]  # no jitter with FixedRandom(0)


@pytest.mark.parametrize("status", sorted(RETRYABLE))
def test_success_on_the_last_attempt_returns_the_text(server, sleeps, status):
    server.push(Reply(status), Reply(status), chat_reply("finally", prompt_tokens=5, completion_tokens=1))
    out = make_client(server, sleeps, max_retries=2).complete("x")
    assert out.text == "finally"
    assert out.attempts == 3 and server.calls == 3
    assert out.usage == LLMUsage(1, 5, 1)  # retries are not calls


CONTEXT_BODIES = {
    "openai": {
        "error": {
            "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in "
            "9001 tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    },
    "vllm": {
        "object": "error",
        "message": "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
        "(4744 in the messages, 256 in the completion).",
        "type": "BadRequestError",
        "code": 400,
    },
    "llama.cpp": {
        "error": {
            "code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 5000,
            "n_ctx": 4096,
        }
    },
}

NON_RETRYABLE = [
    (400, None, LLMBadRequest),
    (401, None, LLMAuthError),
    (403, None, LLMAuthError),
    (404, None, LLMNotFound),
    (422, {"detail": [{"loc": ["body", "max_tokens"], "msg": "value is not a valid integer"}]}, LLMBadRequest),
    (400, CONTEXT_BODIES["openai"], LLMContextLengthError),
    (400, CONTEXT_BODIES["vllm"], LLMContextLengthError),
    (400, CONTEXT_BODIES["llama.cpp"], LLMContextLengthError),
]


@pytest.mark.parametrize("status,body,cls", NON_RETRYABLE)
def test_non_retryable_status_gives_one_call_and_typed_error(server, sleeps, status, body, cls):
    # x-should-retry: true does not override: the same request cannot succeed
    server.push(Reply(status, body, headers={"x-should-retry": "true"}), chat_reply("never reached"))
    with pytest.raises(cls) as ei:
        make_client(server, sleeps, max_retries=3).complete("x")
    err = ei.value
    assert type(err) is cls
    assert server.calls == 1 and sleeps == []
    assert err.status_code == status and err.attempts == 1
    assert err.url.endswith("/v1/chat/completions") and err.model == "test-model"


def test_error_messages_say_what_happened_and_how_to_fix_it(server, sleeps):
    server.push(Reply(400, CONTEXT_BODIES["openai"]), Reply(401), Reply(404))
    client = make_client(server, sleeps)
    with pytest.raises(LLMContextLengthError) as ei:
        client.complete("x")
    msg = str(ei.value)
    assert "context window" in msg and "maximum context length is 8192" in msg and "lower max_tokens" in msg
    assert isinstance(ei.value, LLMBadRequest) and isinstance(ei.value, LLMError)
    with pytest.raises(LLMAuthError, match="OPENAI_API_KEY"):
        client.complete("x")
    with pytest.raises(LLMNotFound, match="model name"):
        client.complete("x")


def test_errors_pickle_with_their_attributes(server, sleeps):
    server.push(Reply(429), Reply(429))
    with pytest.raises(LLMRateLimited) as ei:
        make_client(server, sleeps, max_retries=1).complete("x")
    back = pickle.loads(pickle.dumps(ei.value))
    assert type(back) is LLMRateLimited and str(back) == str(ei.value)
    assert (back.status_code, back.attempts, back.body) == (429, 2, ei.value.body)


def test_x_should_retry_header_overrides_status(server, sleeps):
    server.push(Reply(503, headers={"x-should-retry": "false"}))  # a retry would get the default 500
    with pytest.raises(LLMServerError):
        make_client(server, sleeps, max_retries=3).complete("x")
    assert server.calls == 1

    server.push(Reply(418, headers={"x-should-retry": "true"}), chat_reply("teapot recovered"))
    assert make_client(server, sleeps, max_retries=3).complete("x").text == "teapot recovered"
    assert server.calls == 3

    server.push(Reply(418))  # an unlisted 4xx without the header: not retried
    with pytest.raises(LLMBadRequest):
        make_client(server, sleeps, max_retries=3).complete("x")
    assert server.calls == 4


# -- backoff and Retry-After -------------------------------------------------------


def test_backoff_is_exponential_capped_and_jittered(server, sleeps):
    server.push(*[Reply(500) for _ in range(7)])
    with pytest.raises(LLMServerError):
        make_client(server, sleeps, max_retries=6).complete("x")
    assert sleeps == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]

    sleeps.clear()
    server.push(*[Reply(500) for _ in range(4)])
    with pytest.raises(LLMServerError):
        make_client(server, sleeps, max_retries=3, rng=FixedRandom(1.0), backoff_max=1.5).complete("x")
    assert sleeps == [0.375, 0.75, 1.125]  # min(0.5 * 2**n, 1.5) * 0.75


def test_jitter_stays_within_25_percent():
    import random

    client = OpenAICompatClient("http://localhost:1", "m", rng=random.Random(0))
    for n in range(8):
        base = min(0.5 * 2**n, 8.0)
        for _ in range(50):
            assert 0.75 * base <= client.retry_delay(n) <= base


@pytest.mark.parametrize(
    "headers",
    [
        {"Retry-After": "soon"},
        {"Retry-After": "-5"},
        {"Retry-After": "99999"},
        {"Retry-After": "0"},
        {"Retry-After": "nan"},
        {"Retry-After": "inf"},
        {"retry-after-ms": "garbage", "Retry-After": "later"},
        {"Retry-After": email.utils.formatdate(time.time() - 3600, usegmt=True)},  # a date in the past
        {"Retry-After": email.utils.formatdate(time.time() + 3600, usegmt=True)},  # an hour away: too long
    ],
)
def test_garbage_or_insane_retry_after_falls_back_to_capped_backoff(server, sleeps, headers):
    server.push(Reply(429, headers=headers), Reply(429, headers=headers), chat_reply("ok"))
    out = make_client(server, sleeps, max_retries=2).complete("x")
    assert out.text == "ok"
    assert sleeps == [0.5, 1.0]


@pytest.mark.parametrize(
    "headers,expected",
    [
        ({"Retry-After": "2"}, 2.0),
        ({"Retry-After": "0.25"}, 0.25),
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after-ms": "1500", "Retry-After": "9"}, 1.5),  # the precise header wins
        ({"Retry-After": "60"}, 60.0),  # the limit itself is honoured
    ],
)
def test_valid_retry_after_is_honoured(server, sleeps, headers, expected):
    server.push(Reply(503, headers=headers), chat_reply("ok"))
    assert make_client(server, sleeps, max_retries=1).complete("x").text == "ok"
    assert sleeps == [expected]


def test_retry_after_http_date_is_honoured(server, sleeps):
    when = email.utils.formatdate(time.time() + 5, usegmt=True)
    server.push(Reply(429, headers={"Retry-After": when}), chat_reply("ok"))
    make_client(server, sleeps, max_retries=1).complete("x")
    (s,) = sleeps
    assert 3.0 < s <= 5.0


def test_max_retry_after_is_configurable(server, sleeps):
    server.push(Reply(429, headers={"Retry-After": "30"}), chat_reply("ok"))
    make_client(server, sleeps, max_retries=1, max_retry_after=10).complete("x")
    assert sleeps == [0.5]


def test_parse_retry_after_directly():
    assert parse_retry_after({}) is None
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({"retry-after": "nan"}) is None
    assert parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=1445412470.0) == 10.0


def test_context_length_detection_is_specific():
    assert is_context_length_error(400, b'{"error": {"code": "context_length_exceeded"}}')
    assert is_context_length_error(400, "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096")
    assert not is_context_length_error(400, "'$.stop' is too long. Expected a maximum length of 4")
    assert not is_context_length_error(400, "temperature must be <= 2")
    assert not is_context_length_error(500, "maximum context length is 4096 tokens")


# -- timeouts, connection errors, leaks --------------------------------------------------


def test_silent_server_times_out_within_the_limit_and_closes_connections(server, sleeps):
    timeout, retries = 0.5, 1
    server.push(Reply(silent=True), Reply(silent=True))
    client = make_client(server, sleeps, timeout=timeout, max_retries=retries)
    baseline = _socket_fds()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        t0 = time.monotonic()
        with pytest.raises(LLMTimeout) as ei:
            client.complete("x")
        elapsed = time.monotonic() - t0
        gc.collect()
    assert elapsed < timeout * (retries + 1) + 1.0
    assert elapsed >= timeout * (retries + 1) * 0.9
    assert ei.value.attempts == 2 and ei.value.status_code is None
    assert "within 0.5 s" in str(ei.value) and "timeout=" in str(ei.value)
    assert server.calls == 2 and len(sleeps) == 1
    # the server saw the client hang up on both connections, and no socket is left open
    assert server.wait_for(lambda: server.closed_by_client == 2)
    assert server.wait_for(lambda: server.open_connections == 0)
    assert server.wait_for(lambda: _socket_fds() <= baseline)


def test_trickling_reply_cannot_outlast_the_per_attempt_deadline(server, sleeps):
    # each byte arrives well within the socket timeout, but the whole reply would take ~50 s
    server.push(Reply(200, {"choices": [{"text": "x" * 500}]}, drip=0.1))
    client = make_client(server, sleeps, timeout=0.6, max_retries=0)
    t0 = time.monotonic()
    with pytest.raises(LLMTimeout):
        client.complete("x")
    assert time.monotonic() - t0 < 0.6 + 1.0
    assert server.wait_for(lambda: server.open_connections == 0)


def test_slow_reply_within_the_deadline_succeeds(server, sleeps):
    server.push(chat_reply("slow but fine", delay=0.3))
    assert make_client(server, sleeps, timeout=3.0).complete("x").text == "slow but fine"


def test_timeout_then_success_is_retried(server, sleeps):
    server.push(Reply(silent=True), chat_reply("second time lucky"))
    out = make_client(server, sleeps, timeout=0.3, max_retries=1).complete("x")
    assert out.text == "second time lucky" and out.attempts == 2


def test_connection_refused_is_retried_then_a_connection_error(sleeps):
    client = OpenAICompatClient(
        f"http://127.0.0.1:{free_port()}", "m", api_key="", max_retries=2, timeout=2, sleep=sleeps.append
    )
    baseline = _socket_fds()
    with pytest.raises(LLMConnectionError) as ei:
        client.complete("x")
    assert ei.value.attempts == 3 and len(sleeps) == 2
    assert "base_url" in str(ei.value) and "127.0.0.1" in str(ei.value)
    assert _socket_fds() <= baseline


def test_many_calls_leak_no_sockets(server, sleeps):
    client = make_client(server, sleeps)
    server.push(chat_reply())
    client.complete("warm-up")  # imports and one-time setup happen before the baseline
    baseline = _socket_fds()
    server.push(*[chat_reply(str(i)) for i in range(20)], *[Reply(500) for _ in range(5)])
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        assert [client.complete("q").text for _ in range(20)] == [str(i) for i in range(20)]
        for _ in range(5):
            with pytest.raises(LLMServerError):
                make_client(server, sleeps, max_retries=0).complete("q")
        gc.collect()
    assert server.wait_for(lambda: server.open_connections == 0)
    assert server.wait_for(lambda: _socket_fds() <= baseline)


def test_invalid_arguments_are_clear():
    with pytest.raises(ValueError, match="mode"):
        OpenAICompatClient("http://x", "m", mode="responses")
    with pytest.raises(ValueError, match="max_retries"):
        OpenAICompatClient("http://x", "m", max_retries=-1)
    with pytest.raises(ValueError, match="timeout"):
        OpenAICompatClient("http://x", "m", timeout=0)
    client = OpenAICompatClient("http://x", "m")
    with pytest.raises(ValueError, match="stream"):
        client.complete("x", stream=True)
    with pytest.raises(ValueError, match="messages"):
        client.complete("x", messages=[])
    with pytest.raises(ValueError, match="role"):
        client.complete([{"text": "no role"}])


def test_answer_with_a_null_content_reply_is_an_error_not_an_empty_answer(server, tmp_path, capsys):
    """Issue 45: ``ctxsel answer`` printed an empty answer and exited 0."""
    from ctxsel.cli.main import main

    doc = tmp_path / "doc.md"
    doc.write_text("The meteorite weighs three kilograms.\n\nBananas are yellow.\n", encoding="utf-8")
    body = {"choices": [{"message": {"role": "assistant", "content": None}, "finish_reason": "length"}]}
    server.responder = lambda request: Reply(200, body)
    argv = ["answer", "--document", str(doc), "--question", "How heavy is the meteorite?", "--scorer", "keywords"]
    rc = main(
        [*argv, "--reader", server.base_url, "--reader-model", "m", "--reader-mode", "chat", "--llm-cache", "off"]
    )
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.startswith(
        "ctxsel answer: error: the LLM server's reply has no text (content: null, finish_reason 'length')"
    ), err
    assert "Traceback" not in err
