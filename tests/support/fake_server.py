"""A scriptable fake OpenAI-compatible HTTP server for offline tests.

    with FakeOpenAIServer() as server:
        server.push(Reply(status=503), chat_reply("Paris"))
        client = OpenAICompatClient(server.base_url, "m")
        ...
        assert server.calls == 2

Each POST pops the next scripted :class:`Reply` (a 500 saying "no scripted
reply" when the queue is empty, so a test that sends too many requests
fails loudly; or, given a ``responder``, what it makes of the request) and
records the request. A reply can be delayed, can never
answer (``silent``: the handler waits for the client to hang up, and
counts it), or can trickle its body a byte at a time (``drip``).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # dict/list -> JSON; str/bytes sent as-is; None -> a default body for the status
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before answering
    silent: bool = False  # read the request, never answer, wait until the client closes
    drip: float | None = None  # send the body one byte every `drip` seconds

    def payload(self) -> bytes:
        body = self.body
        if body is None:
            body = {"error": {"message": f"scripted status {self.status}", "type": "fake", "code": self.status}}
        if isinstance(body, (dict, list)):
            return json.dumps(body).encode()
        if isinstance(body, str):
            return body.encode()
        return bytes(body)


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


def chat_reply(text: str | None = "ok", prompt_tokens: int = 11, completion_tokens: int = 3, **kw: Any) -> Reply:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": kw.pop("model", "fake-model"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
    return Reply(200, body, **kw)


def completion_reply(
    text: str = "ok", prompt_tokens: int = 7, completion_tokens: int = 2, cached_tokens: int | None = None, **kw: Any
) -> Reply:
    """A /v1/completions reply; ``cached_tokens``: the prompt tokens the server says it took from its prefix cache."""
    body: dict[str, Any] = {
        "id": "cmpl-1",
        "object": "text_completion",
        "model": kw.pop("model", "fake-model"),
        "choices": [{"index": 0, "text": text, "finish_reason": "length", "logprobs": None}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
    if cached_tokens is not None:
        body["usage"]["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return Reply(200, body, **kw)


class FakeOpenAIServer:
    def __init__(self, responder: Callable[[Request], Reply] | None = None) -> None:
        self.responder = responder  # answers when the queue is empty
        self.queue: deque[Reply] = deque()
        self.requests: list[Request] = []
        self.closed_by_client = 0  # silent/drip replies whose client hung up
        self.open_connections = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- scripting ----------------------------------------------------------

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self.queue.extend(replies)

    @property
    def calls(self) -> int:
        with self._lock:
            return len(self.requests)

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        assert isinstance(host, str)
        return f"http://{host}:{port}"

    @property
    def port(self) -> int:
        assert self._httpd is not None
        return int(self._httpd.server_address[1])

    def wait_for(self, predicate: Any, timeout: float = 3.0) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if predicate():
                return True
            time.sleep(0.01)
        return bool(predicate())

    # -- lifecycle ----------------------------------------------------------

    def start(self) -> FakeOpenAIServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with server._lock:
                    server.open_connections += 1

            def finish(self) -> None:
                try:
                    super().finish()
                finally:
                    with server._lock:
                        server.open_connections -= 1

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with server._lock:
                    server.requests.append(Request(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                    if server.queue:
                        reply = server.queue.popleft()
                    elif server.responder is not None:
                        reply = server.responder(server.requests[-1])
                    else:
                        reply = Reply(500, {"error": "no scripted reply"})
                self.close_connection = True
                if reply.silent:
                    self._wait_for_hangup()
                    return
                if reply.delay and server._stop.wait(reply.delay):
                    return
                data = reply.payload()
                try:
                    self.send_response(reply.status)
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    if "content-type" not in {k.lower() for k in reply.headers}:
                        self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.send_header("Connection", "close")
                    self.end_headers()
                    if reply.drip is None:
                        self.wfile.write(data)
                        return
                    self.wfile.flush()
                    for i in range(len(data)):
                        if server._stop.wait(reply.drip):
                            return
                        self.wfile.write(data[i : i + 1])
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    with server._lock:
                        server.closed_by_client += 1

            def _wait_for_hangup(self) -> None:
                self.connection.settimeout(0.05)
                deadline = time.monotonic() + 30
                while not server._stop.is_set() and time.monotonic() < deadline:
                    try:
                        if self.connection.recv(1024) == b"":
                            break
                    except TimeoutError:
                        continue
                    except OSError:
                        break
                else:
                    return
                with server._lock:
                    server.closed_by_client += 1

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def fake_client(server: FakeOpenAIServer, mode: str = "completions", **kw: Any) -> Any:
    """An OpenAICompatClient of model "fake" on ``server``: no retries, no sleeping."""
    from ctxsel.llm import OpenAICompatClient

    return OpenAICompatClient(server.base_url, "fake", mode=mode, max_retries=0, sleep=lambda s: None, **kw)


def free_port() -> int:
    """A local port with nothing listening on it (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def smallest_instance(schema: dict[str, Any], index: int = 0, text: str = "text") -> Any:
    """The smallest JSON value ``schema`` accepts (the subset ctxsel's reply formats use); its
    strings are ``text`` (numbered after the first item of an array)."""
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return smallest_instance(schema[key][0], index, text)
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties", {})
        return {k: smallest_instance(props[k], 0, text) for k in schema.get("required", list(props))}
    if kind == "array":
        n = max(1, int(schema.get("minItems", 1)))
        return [smallest_instance(schema.get("items", {}), i, text) for i in range(n)]
    if kind == "integer":
        return int(schema.get("minimum", 0)) + index
    if kind == "number":
        return float(schema.get("minimum", 0.0)) + index
    if kind == "boolean":
        return True
    text = f"{text} {index}" if index else text
    return text[: int(schema.get("maxLength", len(text)))].ljust(int(schema.get("minLength", 0)), "x")


def schema_responder(known: Mapping[str, str] | None = None, default: str = "ok") -> Callable[[Request], Reply]:
    """A model for ``FakeOpenAIServer(responder=...)`` that is never short of a reply: a request
    with a JSON schema (``response_format``) gets the schema's smallest instance; a free-form
    prompt that contains one of ``known``'s questions gets its answer; any other, ``default``."""
    known = dict(known or {})

    def answer(req: Request) -> Reply:
        body = req.json
        fmt = body.get("response_format") or {}
        schema = (fmt.get("json_schema") or {}).get("schema")
        prompt = json.dumps(body.get("messages") or body.get("prompt"))
        hits = [a for q, a in known.items() if json.dumps(q)[1:-1] in prompt]
        text = json.dumps(smallest_instance(schema, text=default)) if schema else (hits[0] if hits else default)
        n = int(body.get("n") or 1)
        reply = chat_reply(text) if req.path.endswith("/chat/completions") else completion_reply(text)
        choices = reply.body["choices"]
        reply.body["choices"] = [{**choices[0], "index": i} for i in range(n)]
        return reply

    return answer
