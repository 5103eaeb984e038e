"""``ctxsel serve`` as a real process on loopback: auth, body limit,
malformed bodies, the concurrency limit, the deadline, /answer, the logs.

The server scores with keyword overlap (no model) and reads with a scripted
fake OpenAI-compatible server, so slow requests are slow on purpose and by
a known amount. After every refusal the server must still answer /health
and a real /select.
"""

from __future__ import annotations

import json
import math
import select
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
import ctxsel
from tests.support.fake_server import FakeOpenAIServer, completion_reply
from tests.support.server_process import ServerProcess

pytestmark = pytest.mark.slow  # each test runs a real server process (1-20 s)

TOKEN = "test-token-9f8e7d"
LIMIT = 1_000_000  # --max-body-bytes
DEADLINE = 3.0
CHUNKS = [
    "The meteorite in the museum weighs three kilograms.",
    "The museum opens at noon on Sundays.",
    "Bananas are a yellow fruit.",
]
QUESTION = "How heavy is the meteorite?"
SELECT = {"question": QUESTION, "chunks": CHUNKS, "method": "top-k@1"}


@pytest.fixture(scope="module")
def fake() -> Any:
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture(scope="module")
def srv(fake: FakeOpenAIServer) -> Any:
    args = [
        "--scorer",
        "keywords",
        "--max-body-bytes",
        str(LIMIT),
        "--max-concurrency",
        "2",
        "--max-queue",
        "1",
        "--queue-timeout",
        "20",
        "--deadline",
        str(DEADLINE),
        "--reader",
        f"{fake.base_url}/v1",
        "--reader-model",
        "fake",
        "--reader-mode",
        "completions",
        "--llm-cache",
        "off",
    ]
    with ServerProcess(args, token=TOKEN) as server:
        yield server


def assert_still_serving(srv: ServerProcess) -> None:
    status, _, body = srv.request("GET", "/health", auth=False)
    assert status == 200 and body["status"] == "ok"
    assert body["in_flight"] == 0
    status, _, sel = srv.request("POST", "/select", SELECT)
    assert status == 200, sel
    assert sel["ids"] == ["0"]
    assert sel["chunks"][0]["text"] == CHUNKS[0]
    assert sel["explanation"] == "fixed top-1: kept 1 of 3"


class TestHealthAndSelect:
    def test_health_is_public_and_reports_the_settings(self, srv: ServerProcess) -> None:
        status, headers, body = srv.request("GET", "/health", auth=False)
        assert status == 200
        assert body == {
            "status": "ok",
            "version": body["version"],
            "reader": "fake",
            "scorer": "keywords",
            "in_flight": 0,
            "max_concurrency": 2,
            "queued": 0,
            "max_queue": 1,
            "message": None,
        }
        assert len(headers["x-request-id"]) == 32

    def test_select_with_chunks_scored_by_the_server(self, srv: ServerProcess) -> None:
        status, _, sel = srv.request("POST", "/select", {**SELECT, "method": "top-k@2"})
        assert status == 200
        assert sel["method"] == "top-k" and sel["k"] == 2 and sel["n_candidates"] == 3
        assert sel["ids"] == ["0", "1"]  # keyword overlap 1, then ties by position
        assert [c["score"] for c in sel["chunks"]] == [1.0, 0.0]
        assert sel["n_tokens"] == sum(c["n_tokens"] for c in sel["chunks"])

    def test_select_with_precomputed_embeddings_is_cosine(self, srv: ServerProcess) -> None:
        body = {
            "question": "q",
            "chunks": ["a", "b", "c"],
            "method": "top-k@3",
            "with_text": False,
            "embeddings": [[2.0, 0.0], [0.0, 1.0], [3.0, 4.0]],
            "query_embedding": [1.0, 0.0],
        }
        status, _, sel = srv.request("POST", "/select", body)
        assert status == 200
        assert sel["ids"] == ["0", "2", "1"]
        assert [c["score"] for c in sel["chunks"]] == pytest.approx([1.0, 0.6, 0.0], abs=1e-6)
        assert all("text" not in c or c["text"] is None for c in sel["chunks"])

    def test_select_with_scores_and_chunk_objects(self, srv: ServerProcess) -> None:
        body = {
            "question": "q",
            "method": "adaptive-k[buffer=0]",
            "scores": [0.9, 0.85, 0.1, 0.05],
            "chunks": [{"id": f"p{i}", "text": f"passage {i}", "n_tokens": 10} for i in range(4)],
        }
        status, _, sel = srv.request("POST", "/select", body)
        assert status == 200
        assert sel["ids"] == ["p0", "p1"]
        assert sel["n_tokens"] == 20
        assert "largest gap 0.750 between ranks 2 and 3" in sel["explanation"]

    def test_select_a_document_chunked_by_the_server(self, srv: ServerProcess) -> None:
        body = {"question": QUESTION, "document": "\n\n".join(CHUNKS), "method": "top-k@1"}
        status, _, sel = srv.request("POST", "/select", body)
        assert status == 200
        assert sel["ids"] == ["0"] and sel["n_candidates"] == 3


class TestAuth:
    @pytest.mark.parametrize(
        "auth, why",
        [
            (False, "missing bearer token"),
            ("Bearer wrong-token", "wrong bearer token"),
            (f"Bearer {TOKEN[:-1]}", "wrong bearer token"),
            (f"Bearer {TOKEN}x", "wrong bearer token"),
            (f"Basic {TOKEN}", "must be 'Bearer <token>'"),
            ("Bearer ", "must be 'Bearer <token>'"),
        ],
    )
    def test_missing_or_wrong_token_is_401(self, srv: ServerProcess, auth: Any, why: str) -> None:
        status, headers, body = srv.request("POST", "/select", SELECT, auth=auth)
        assert status == 401
        assert headers["www-authenticate"].startswith("Bearer")
        assert body["error"] == "unauthorized" and why in body["message"]
        assert body["request_id"] == headers["x-request-id"]
        assert_still_serving(srv)

    def test_the_token_is_checked_before_the_body_is_read(self, srv: ServerProcess) -> None:
        # a declared 1 GB body that never comes: 401 at once, not 413, not a hang
        conn = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        conn.sendall(
            b"POST /select HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n"
        )
        reply = read_response(conn)
        conn.close()
        assert reply.startswith(b"HTTP/1.1 401 ")
        assert b"missing bearer token" in reply
        assert_still_serving(srv)

    def test_the_right_token_passes(self, srv: ServerProcess) -> None:
        assert srv.request("POST", "/select", SELECT)[0] == 200
        assert srv.request("POST", "/select", SELECT, auth=f"bearer {TOKEN}")[0] == 200  # scheme is case-insensitive


def read_response(sock: socket.socket) -> bytes:
    """Bytes of one HTTP response: headers, then Content-Length bytes of body (or until closed)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")),
        None,
    )
    while length is None or len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def stream_chunked(port: int, head: bytes, total: int, piece: int = 64 * 1024) -> tuple[int, bytes]:
    """Send a chunked body of up to ``total`` bytes, stopping as soon as the
    server answers (or hangs up); return (bytes sent, the server's reply)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(head)
    frame = f"{piece:x}\r\n".encode() + b" " * piece + b"\r\n"
    sent = 0
    try:
        while sent < total:
            if select.select([sock], [], [], 0)[0]:
                break  # the server has answered
            sock.sendall(frame)
            sent += piece
        else:
            sock.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError, TimeoutError):
        pass
    reply = b""
    try:
        while chunk := sock.recv(65536):
            reply += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    sock.close()
    return sent, reply


class TestBodyLimit:
    def test_declared_content_length_over_the_limit_is_413_at_once(self, srv: ServerProcess) -> None:
        conn = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        conn.sendall(
            f"POST /select HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {LIMIT + 1}\r\n\r\n".encode()
        )
        reply = read_response(conn)  # answered before a single body byte was sent
        conn.close()
        assert reply.startswith(b"HTTP/1.1 413 ")
        assert b"connection: close" in reply.lower()
        assert b'"error": "body_too_large"' in reply and b"1,000,000-byte limit" in reply
        assert_still_serving(srv)

    def test_streamed_body_over_the_limit_is_413_without_reading_it(self, srv: ServerProcess) -> None:
        total = 64 * 1024 * 1024  # 64x the limit, ready to go
        before = srv.peak_rss_kib()
        head = (
            f"POST /select HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        ).encode()
        sent, reply = stream_chunked(srv.port, head, total)
        after = srv.peak_rss_kib()
        assert reply.startswith(b"HTTP/1.1 413 "), reply[:200]
        assert b'"error":"body_too_large"' in reply.replace(b" ", b"")
        # the server answered while the client still had most of the body to send ...
        assert sent < 16 * 1024 * 1024, f"the client sent {sent:,} bytes before the 413"
        # ... and never held it: peak memory grew by far less than what was sent
        assert (after - before) * 1024 < 8 * 1024 * 1024, f"peak RSS grew {after - before} KiB"
        assert_still_serving(srv)

    def test_the_limit_is_exact_with_and_without_content_length(self, srv: ServerProcess) -> None:
        import json

        data = json.dumps(SELECT).encode()
        data = data[:-1] + b" " * (LIMIT - len(data)) + b"}"  # exactly LIMIT bytes of valid JSON
        assert len(data) == LIMIT
        status, _, sel = srv.request("POST", "/select", raw=data)  # with Content-Length
        assert status == 200 and sel["ids"] == ["0"]
        head = (
            f"POST /select HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        ).encode()
        reply = post_chunked(srv.port, head, data)  # counted as it streams
        assert reply.startswith(b"HTTP/1.1 200 "), reply[:300]
        reply = post_chunked(srv.port, head, data[:-1] + b" }")  # one byte more
        assert reply.startswith(b"HTTP/1.1 413 "), reply[:300]
        assert b"1,000,000-byte limit" in reply
        assert_still_serving(srv)


def post_chunked(port: int, head: bytes, data: bytes, piece: int = 64 * 1024) -> bytes:
    """POST ``data`` as a chunked body; the reply, even if the server hung up early."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        sock.sendall(head)
        for i in range(0, len(data), piece):
            part = data[i : i + piece]
            sock.sendall(f"{len(part):x}\r\n".encode() + part + b"\r\n")
        sock.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    try:
        return read_response(sock)
    except ConnectionResetError:
        return b""
    finally:
        sock.close()


class TestMalformedBody:
    @pytest.mark.parametrize(
        "raw, expected",
        [
            (b'{"question": "q", "chunks": [', "not valid JSON"),
            (b'{"chunks": ["a"]}', "question: Field required"),
            (b'{"question": "q"}', "exactly one of 'chunks'"),
            (b'{"question": "q", "chunks": ["a"], "document": "b"}', "exactly one of 'chunks'"),
            (b'{"question": "q", "chunks": 5}', "chunks must be a sequence of chunk texts or Chunks, got int"),
            (b'{"question": "q", "chunks": ["a"], "surprise": 1}', "surprise: Extra inputs are not permitted"),
            (b'{"question": "q", "chunks": ["a"], "embeddings": [[1.0]]}', "go together"),
            (b"[]", "must be a JSON object like"),
            # the Query's checks, where the body is read: the scores' count too
            (b'{"question": "q", "chunks": ["a", "b", "c"], "scores": [0.5]}', "got 1 scores for 3 chunks"),
            # checked with the chunks, before the scores, as Python checks it (tests/test_differential.py)
            (
                b'{"question": "q", "chunks": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]}',
                "duplicate chunk id 'a'",
            ),
        ],
    )
    def test_malformed_body_is_422_with_a_message(self, srv: ServerProcess, raw: bytes, expected: str) -> None:
        status, headers, body = srv.request("POST", "/select", raw=raw)
        assert status == 422, body
        assert body["error"] == "invalid_body"
        assert expected in body["message"], body["message"]
        assert body["request_id"] == headers["x-request-id"]
        assert isinstance(body["detail"], list) and body["detail"]
        assert_still_serving(srv)

    @pytest.mark.parametrize(
        "extra, expected",
        [
            ({"method": "no-such-method"}, "unknown method 'no-such-method'"),
            ({"method": "top-k[k=two]"}, "k must be an integer"),
            ({"embeddings": [[1.0, 0.0]] * 3, "query_embedding": [1.0]}, "dimension 2 but query_embedding has 1"),
            ({"method": "ldar[policy=/etc/passwd]"}, "a request cannot name a file"),
            ({"options": {"llm": "x"}}, "'llm' is not an option"),
        ],
    )
    def test_input_the_method_cannot_use_is_422_with_a_message(
        self, srv: ServerProcess, extra: dict[str, Any], expected: str
    ) -> None:
        status, _, body = srv.request("POST", "/select", {**SELECT, **extra})
        assert status == 422, body
        assert body["error"] == "invalid_input"
        assert expected in body["message"], body["message"]
        assert_still_serving(srv)


class TestNumbers:
    """Scores, budgets and spec numbers: the Python API's verdict and its very message, as a 422."""

    @staticmethod
    def python_refusal(method: str = "top-k@1", scores: list[Any] | None = None, **options: Any) -> str:
        with pytest.raises(ValueError) as e:
            ctxsel.select(QUESTION, CHUNKS, method, scores=scores or [0.1, 0.9, 0.5], **options)
        return str(e.value)

    @pytest.mark.parametrize(
        ("literal", "python_value"),
        [("NaN", math.nan), ("Infinity", math.inf), ("-Infinity", -math.inf), ("1e999", math.inf)],
    )
    def test_nonfinite_scores_are_422_naming_the_field(
        self, srv: ServerProcess, literal: str, python_value: float
    ) -> None:
        raw = json.dumps({**SELECT, "scores": ["X", 0.9, 0.5]}).replace('"X"', literal).encode()
        status, _, body = srv.request("POST", "/select", raw=raw)
        assert status == 422, body
        assert body["error"] == "invalid_input"
        assert body["message"].startswith("scores: 1 score(s) are NaN or infinite (chunk positions 0)")
        assert body["message"] == self.python_refusal(scores=[python_value, 0.9, 0.5])
        assert_still_serving(srv)

    def test_nonfinite_scores_with_nan_policy_last_are_ranked_after(self, srv: ServerProcess) -> None:
        raw = json.dumps({**SELECT, "method": "top-k[k=2,nan_policy=last]", "scores": ["X", 0.9, 0.5]})
        status, _, body = srv.request("POST", "/select", raw=raw.replace('"X"', "NaN").encode())
        assert status == 200, body
        assert body["ids"] == ["1", "2"]

    @pytest.mark.parametrize("scores", [["0.1", 0.9, 0.5], [0.1, True, 0.5], [0.1, None, 0.5]])
    def test_scores_that_are_not_numbers_are_422_with_the_python_message(
        self, srv: ServerProcess, scores: list[Any]
    ) -> None:
        status, _, body = srv.request("POST", "/select", {**SELECT, "scores": scores})
        assert status == 422, body
        assert body["error"] == "invalid_body"
        assert body["message"] == self.python_refusal(scores=scores)
        assert body["message"].startswith("scores[")

    @pytest.mark.parametrize(
        ("literal", "python_value"),
        [("NaN", math.nan), ("Infinity", math.inf), ("2.5", 2.5), ("true", True), ('"10"', "10"), ("-1", -1)],
    )
    def test_bad_budgets_are_422_with_the_python_message(
        self, srv: ServerProcess, literal: str, python_value: Any
    ) -> None:
        raw = json.dumps({**SELECT, "scores": [0.1, 0.9, 0.5], "options": {"max_tokens": "X"}})
        status, _, body = srv.request("POST", "/select", raw=raw.replace('"X"', literal).encode())
        assert status == 422, body
        assert body["message"] == self.python_refusal(max_tokens=python_value)
        assert body["message"].startswith("bad options for method 'top-k': max_tokens must be")

    @pytest.mark.parametrize(
        "method",
        [
            "adaptive-k[max_tokens=nan]",
            "top-k[min_k=nan]",
            "top-k@1e999",
            "top-k@1.5",
            "top-k[k=1,k=2]",
            "top-k@５",
            "top-k@1_0",
        ],
    )
    def test_bad_numbers_in_a_spec_are_422_with_the_python_message(self, srv: ServerProcess, method: str) -> None:
        status, _, body = srv.request("POST", "/select", {**SELECT, "method": method, "scores": [0.1, 0.9, 0.5]})
        assert status == 422, body
        assert body["message"] == self.python_refusal(method)

    def test_whole_float_numbers_are_integers_as_in_python(self, srv: ServerProcess) -> None:
        body_in = {**SELECT, "method": "top-k@1e9", "scores": [0.1, 0.9, 0.5], "options": {"max_tokens": 1000.0}}
        status, _, body = srv.request("POST", "/select", body_in)
        assert status == 200, body
        assert body["ids"] == ["1", "2", "0"]
        assert body["config"]["k"] == 1_000_000_000 and body["config"]["max_tokens"] == 1000


class TestConcurrencyAndDeadline:
    def test_past_the_limit_a_request_queues_and_past_the_queue_it_is_503_at_once(
        self, srv: ServerProcess, fake: FakeOpenAIServer
    ) -> None:
        fake.push(completion_reply(" Three kilograms\n", delay=1.5), completion_reply(" Three kilograms\n", delay=1.5))
        calls = fake.calls
        body = {**SELECT, "method": "top-k@1"}
        with ThreadPoolExecutor(3) as pool:
            slow = [pool.submit(srv.request, "POST", "/answer", body) for _ in range(2)]
            assert fake.wait_for(lambda: fake.calls == calls + 2, timeout=10), "the two /answer calls never arrived"
            # both slots are now held by answers waiting on the LLM; the next request waits in the queue
            queued = pool.submit(srv.request, "POST", "/select", SELECT)
            end = time.monotonic() + 10
            while srv.request("GET", "/health", auth=False)[2]["queued"] != 1 and time.monotonic() < end:
                time.sleep(0.02)
            health = srv.request("GET", "/health", auth=False)[2]
            assert health["in_flight"] == 2 and health["queued"] == 1 and health["max_queue"] == 1
            t0 = time.monotonic()
            status, headers, refused = srv.request("POST", "/select", SELECT)
            waited = time.monotonic() - t0
            assert status == 503
            assert headers["retry-after"] == "1"
            assert refused["error"] == "overloaded" and "--max-queue" in refused["message"]
            assert waited < 1.0, f"the 503 took {waited:.2f} s: past the queue it should not wait"
            results = [f.result(timeout=30) for f in slow]
            status, _, sel = queued.result(timeout=30)
        assert status == 200 and sel["ids"] == ["0"]  # served once a slot came free
        for status, _, ans in results:
            assert status == 200, ans
            assert ans["answer"] == "Three kilograms"
            assert ans["selection"]["ids"] == ["0"]
        assert_still_serving(srv)

    def test_work_past_the_deadline_is_504_and_frees_its_slot_soon_after(
        self, srv: ServerProcess, fake: FakeOpenAIServer
    ) -> None:
        fake.push(completion_reply(" late\n", delay=DEADLINE + 6))
        t0 = time.monotonic()
        status, _, body = srv.request("POST", "/answer", SELECT)
        took = time.monotonic() - t0
        assert status == 504, body
        assert body["error"] == "deadline_exceeded" and "3-second deadline" in body["message"]
        assert "ctxsel serve --deadline SECONDS" in body["message"]  # who can raise it, and how
        assert DEADLINE - 0.1 <= took < DEADLINE + 3.0  # wide: a loaded 2-core machine delays the event loop
        # the abandoned LLM call still runs (it cannot be interrupted), but its slot is freed within 2 s
        # of the deadline (service.run's grace), long before the call ends
        end = time.monotonic() + 10
        while srv.request("GET", "/health", auth=False)[2]["in_flight"] and time.monotonic() < end:
            time.sleep(0.05)
        assert time.monotonic() - (t0 + DEADLINE) <= 2.0
        assert_still_serving(srv)


class TestAnswer:
    def test_answer_reads_the_selection_with_the_reader(self, srv: ServerProcess, fake: FakeOpenAIServer) -> None:
        fake.push(
            completion_reply(" Three kilograms\nMore text", prompt_tokens=40, completion_tokens=4, cached_tokens=32)
        )
        status, _, ans = srv.request("POST", "/answer", {**SELECT, "method": "top-k@1"})
        assert status == 200, ans
        assert ans["answer"] == "Three kilograms"
        assert ans["usage"] == {"calls": 1, "tokens_in": 40, "tokens_out": 4, "tokens_reused": 32}
        prompt = fake.requests[-1].json["prompt"]
        assert CHUNKS[0] in prompt and QUESTION in prompt and CHUNKS[2] not in prompt

    def test_a_failing_reader_is_502_with_its_message(self, srv: ServerProcess, fake: FakeOpenAIServer) -> None:
        from tests.support.fake_server import Reply

        fake.push(Reply(404, {"error": {"message": "model 'fake' not found"}}))
        status, _, body = srv.request("POST", "/answer", SELECT)
        assert status == 502
        assert body["error"] == "llm_error" and "model 'fake' not found" in body["message"]
        assert_still_serving(srv)


class TestLogs:
    def test_one_json_line_per_request_with_the_request_id(self, srv: ServerProcess) -> None:
        seen = {}
        for rid, (method, path, body, auth) in {
            "rid-ok": ("POST", "/select", SELECT, True),
            "rid-401": ("POST", "/select", SELECT, False),
            "rid-422": ("POST", "/select", {"chunks": []}, True),
            "rid-404": ("GET", "/nowhere", None, True),
        }.items():
            status, headers, _ = srv.request(method, path, body, auth=auth, headers={"X-Request-ID": rid})
            assert headers["x-request-id"] == rid
            seen[rid] = status
        assert seen == {"rid-ok": 200, "rid-401": 401, "rid-422": 422, "rid-404": 404}
        for rid, status in seen.items():
            line = srv.request_log(rid)
            assert line["status"] == status
            assert line["level"] == "info" and line["logger"] == "ctxsel.service"
            assert line["method"] in ("GET", "POST") and line["path"] in ("/select", "/nowhere")
            assert isinstance(line["duration_ms"], float) and line["duration_ms"] >= 0
        assert srv.request_log("rid-ok")["bytes_in"] == len(__import__("json").dumps(SELECT))

    def test_a_bad_request_id_is_replaced(self, srv: ServerProcess) -> None:
        _, headers, _ = srv.request("GET", "/health", auth=False, headers={"X-Request-ID": "bad id with spaces"})
        assert headers["x-request-id"] != "bad id with spaces" and len(headers["x-request-id"]) == 32
        assert headers["x-request-id-replaced"] == "has characters other than letters, digits and ._-"
        line = srv.request_log(headers["x-request-id"])
        assert line["request_id_replaced"] == headers["x-request-id-replaced"]

    def test_an_8_kb_request_id_is_replaced(self, srv: ServerProcess) -> None:
        _, headers, _ = srv.request("GET", "/health", auth=False, headers={"X-Request-ID": "a" * 8192})
        assert len(headers["x-request-id"]) == 32 and headers["x-request-id-replaced"] == "longer than 128 characters"


class TestRawHttp:
    """What a client that does not use an HTTP library sends: raw bytes on a socket."""

    @staticmethod
    def exchange(srv: ServerProcess, raw: bytes) -> tuple[int, dict[str, str], bytes]:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
            s.sendall(raw)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        return int(lines[0].split()[1]), headers, body

    @staticmethod
    def http_1_0_select(with_length: bool) -> bytes:
        """POST /select of SELECT as HTTP/1.0 bytes, with or without its Content-Length."""
        payload = json.dumps(SELECT).encode()
        length = f"Content-Length: {len(payload)}\r\n" if with_length else ""
        return (
            b"POST /select HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {TOKEN}\r\n{length}\r\n".encode()
            + payload
        )

    def test_an_http_1_0_body_without_content_length_is_411(self, srv: ServerProcess) -> None:
        status, headers, body = self.exchange(srv, self.http_1_0_select(with_length=False))
        assert status == 411, body
        answer = json.loads(body)
        assert answer["error"] == "length_required" and "Content-Length" in answer["message"]
        assert answer["request_id"] == headers["x-request-id"]
        assert_still_serving(srv)

    def test_an_http_1_0_body_with_its_length_is_served(self, srv: ServerProcess) -> None:
        status, _, body = self.exchange(srv, self.http_1_0_select(with_length=True))
        assert status == 200, body
        assert json.loads(body)["ids"][0] == "0"

    def test_head_health_is_200_with_no_body(self, srv: ServerProcess) -> None:
        status, headers, body = self.exchange(srv, b"HEAD /health HTTP/1.0\r\nHost: x\r\n\r\n")
        assert status == 200 and body == b"" and headers["content-type"] == "application/json"


def test_a_server_without_a_token_needs_none() -> None:
    with ServerProcess(["--scorer", "keywords"]) as srv:
        status, _, sel = srv.request("POST", "/select", SELECT, auth=False)
        assert status == 200 and sel["ids"] == ["0", "1", "2"][: sel["k"]]
        status, _, body = srv.request("POST", "/answer", SELECT, auth=False)
        assert status == 501 and body["error"] == "no_reader"


def test_the_c_http_stack_is_the_default_and_the_pure_python_one_answers_the_same() -> None:
    """The serve extra installs httptools and uvloop and uvicorn runs on them; --http h11
    --loop asyncio switch back, with the same answer."""
    body = {**SELECT, "scores": [0.9, 0.2, 0.1], "chunks": [{"id": f"c{i}", "text": t} for i, t in enumerate(CHUNKS)]}
    answers = []
    for args, expected in (([], ("httptools", "uvloop")), (["--http", "h11", "--loop", "asyncio"], ("h11", "asyncio"))):
        with ServerProcess(["--scorer", "keywords", *args]) as srv:
            listening = next(line for line in srv.log_lines() if line.get("event") == "listening")
            assert (listening["http"], listening["loop"]) == expected
            status, _, sel = srv.request("POST", "/select", body, auth=False)
            assert status == 200
            answers.append((sel["ids"], sel["n_tokens"], [c["rank"] for c in sel["chunks"]]))
    assert answers[0] == answers[1] and answers[0][0] == ["c0"]


def test_a_body_that_is_not_utf8_is_422(srv: ServerProcess) -> None:
    status, _, body = srv.request("POST", "/select", raw=b'{"question": "\xff\xfe"}')
    assert status == 422 and body["error"] == "invalid_body"
    assert "not valid JSON: invalid unicode code point" in body["message"]
    assert_still_serving(srv)


def test_a_port_in_use_is_a_one_line_error() -> None:
    import subprocess

    from tests.support.cli import ctxsel_command

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run(
            [*ctxsel_command(), "serve", "--port", str(port), "--scorer", "keywords"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr and "--port" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"token": ""}, "token is empty"),
        ({"max_body_bytes": 0}, "max_body_bytes must be a positive integer"),
        ({"deadline_s": float("inf")}, "deadline_s must be a positive number"),
        ({"max_concurrency": 0}, "max_concurrency must be an integer >= 1"),
        ({"scorer": "magic"}, "unknown scorer 'magic'; choose dense"),
    ],
)
def test_bad_settings_are_refused(kw: dict[str, Any], message: str) -> None:
    from ctxsel.service import ServiceSettings

    with pytest.raises(ValueError, match=message):
        ServiceSettings(**kw)


def test_keep_alive_responses_do_not_wait_for_delayed_acks(srv: ServerProcess) -> None:
    """The listening socket says it is TCP, so asyncio turns Nagle off on each
    connection; with it on, every response on a reused connection waited about
    40 ms for the client's delayed ACK."""
    import http.client

    from ctxsel.service.runner import bind_socket

    with bind_socket("127.0.0.1", 0) as sock:
        assert sock.proto == socket.IPPROTO_TCP
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    times = []
    for _ in range(15):
        t0 = time.perf_counter()
        conn.request("GET", "/health")
        resp = conn.getresponse()
        resp.read()
        times.append(time.perf_counter() - t0)
        assert resp.status == 200
    conn.close()
    assert sorted(times)[len(times) // 2] < 0.035, [round(t * 1e3, 1) for t in times]


def test_without_the_serve_extra_the_error_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    from ctxsel.service import ServiceSettings, create_app, run_server

    real_import = builtins.__import__

    def no_web_framework(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.split(".")[0] in ("fastapi", "starlette", "uvicorn"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    for mod in [
        m
        for m in sys.modules
        if m.startswith("ctxsel.service.") or m.split(".")[0] in ("fastapi", "starlette", "uvicorn")
    ]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setattr(builtins, "__import__", no_web_framework)
    with pytest.raises(ImportError, match=r'pip install "ctxsel\[serve\]"'):
        create_app(ServiceSettings())
    with pytest.raises(ImportError, match=r'pip install "ctxsel\[serve\]"'):
        run_server(ServiceSettings())
