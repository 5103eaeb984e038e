"""Operating the service, in process: /metrics scraped and parsed by prometheus_client's own parser,
request ids and their rules, HEAD /health, 411 for a body without a length, the bounded queue
in front of the concurrency limit, and --host names that do not resolve."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("prometheus_client")
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from ctxsel.errors import InputError
from ctxsel.llm.base import Completion
from ctxsel.service import ServiceSettings, create_app
from ctxsel.service.limiter import ConcurrencyLimiter
from ctxsel.service.middleware import BodySizeLimitMiddleware, check_request_id
from ctxsel.types import LLMUsage

CHUNKS = ["The meteorite weighs three kilograms.", "The museum opens at noon.", "Bananas are yellow."]
SELECT = {"question": "How heavy is the meteorite?", "chunks": CHUNKS, "method": "top-k@1", "scores": [0.9, 0.1, 0.2]}


class OneAnswerLLM:
    """A reader that always answers the same, with a known token usage."""

    model_id = "fake-reader"

    def complete(self, prompt: Any, **kw: Any) -> Completion:
        return Completion(text=" Three kilograms\n", usage=LLMUsage(calls=1, tokens_in=40, tokens_out=4))


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape, keyed by (name, sorted labels)."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.fixture
def client() -> Any:
    app = create_app(ServiceSettings(scorer="keywords", token="tok", reader=OneAnswerLLM(), reader_name="fake"))
    with TestClient(app) as c:
        for _ in range(200):
            if c.get("/health").status_code == 200:
                break
            threading.Event().wait(0.02)
        c.headers["Authorization"] = "Bearer tok"
        yield c


class TestMetrics:
    def test_a_scrape_counts_the_requests_it_followed(self, client: TestClient) -> None:
        before = samples(client.get("/metrics").text)
        assert client.post("/select", json=SELECT).status_code == 200
        assert client.post("/select", json=SELECT).status_code == 200
        assert client.post("/select", json={"chunks": []}).status_code == 422
        assert client.post("/select", json=SELECT, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.get("/no/such/path/42").status_code == 404
        ans = client.post("/answer", json=SELECT)
        assert ans.status_code == 200 and ans.json()["answer"] == "Three kilograms"
        scrape = client.get("/metrics")
        assert scrape.status_code == 200 and scrape.headers["content-type"].startswith("text/plain; version=0.0.4")
        after = samples(scrape.text)

        def grew(name: str, **labels: str) -> float:
            key = (name, tuple(sorted(labels.items())))
            return after.get(key, 0.0) - before.get(key, 0.0)

        req = "ctxsel_http_requests_total"
        assert grew(req, route="/select", method="POST", status="200") == 2
        assert grew(req, route="/select", method="POST", status="422") == 1
        assert grew(req, route="/select", method="POST", status="401") == 1
        assert grew(req, route="other", method="GET", status="404") == 1  # no label per unknown path
        assert grew(req, route="/answer", method="POST", status="200") == 1
        assert grew(req, route="/metrics", method="GET", status="200") == 1  # the first scrape
        assert not any(name == req and dict(lab).get("route") == "/no/such/path/42" for name, lab in after)
        assert grew("ctxsel_http_request_duration_seconds_count", route="/select") == 4
        assert grew("ctxsel_http_request_duration_seconds_bucket", route="/select", le="+Inf") == 4
        assert grew("ctxsel_http_request_duration_seconds_sum", route="/select") > 0
        assert after[("ctxsel_requests_in_flight", ())] == 0
        assert after[("ctxsel_requests_queued", ())] == 0
        assert grew("ctxsel_queue_wait_seconds_count") == 4  # the 422 took a slot too; the 401 did not
        assert grew("ctxsel_queue_rejections_total", reason="queue_full") == 0
        assert grew("ctxsel_llm_calls_total", cached="false") == 1
        assert grew("ctxsel_llm_tokens_total", direction="in") == 40
        assert grew("ctxsel_llm_tokens_total", direction="out") == 4

    def test_metrics_need_the_token_when_the_server_has_one(self, client: TestClient) -> None:
        refused = client.get("/metrics", headers={"Authorization": ""})
        assert refused.status_code == 401 and refused.json()["error"] == "unauthorized"

    def test_queue_refusals_are_counted_by_reason(self) -> None:
        app = create_app(ServiceSettings(scorer="keywords", max_concurrency=1, max_queue=0))
        limiter = app.state.service.limiter
        with TestClient(app) as c:
            held = limiter.try_acquire()  # the only slot, taken
            assert held is not None
            refused = c.post("/select", json=SELECT)
            held.release()
            assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
            assert "--max-queue" in refused.json()["message"]
            got = samples(c.get("/metrics").text)
        assert got[("ctxsel_queue_rejections_total", (("reason", "queue_full"),))] == 1

    @pytest.mark.slow  # loads MiniLM
    def test_dense_scorer_texts_from_memory_and_looked_up(self, tmp_path: Any) -> None:
        from ctxsel.scoring import get_scorer

        pytest.importorskip("torch")
        scorer = get_scorer("dense", cache=str(tmp_path / "e.sqlite"), num_threads=1)
        app = create_app(ServiceSettings(scorer="dense"), scorer=scorer)
        body = {"question": "meteorite?", "chunks": CHUNKS, "method": "top-k@1"}
        with TestClient(app) as c:
            for _ in range(600):
                if c.get("/health").status_code == 200:
                    break
                threading.Event().wait(0.05)
            before = samples(c.get("/metrics").text)
            assert c.post("/select", json=body).status_code == 200
            assert c.post("/select", json=body).status_code == 200
            after = samples(c.get("/metrics").text)
        memory = ("ctxsel_embedding_texts_total", (("source", "memory"),))
        lookup = ("ctxsel_embedding_texts_total", (("source", "lookup"),))
        assert after[lookup] - before.get(lookup, 0) == 3  # new texts: the first request
        assert after[memory] - before.get(memory, 0) == 3  # the same texts again: in memory


class TestRequestIds:
    @pytest.mark.parametrize("given", ["abc", "0f" * 16, "trace-1.2_3", "x" * 128])
    def test_a_sane_id_is_kept(self, client: TestClient, given: str) -> None:
        r = client.get("/health", headers={"X-Request-ID": given})
        assert r.headers["x-request-id"] == given and "x-request-id-replaced" not in r.headers

    @pytest.mark.parametrize(
        ("given", "why"),
        [
            ("x" * 8192, "longer than 128 characters"),
            ("x" * 129, "longer than 128 characters"),
            ('"quoted"', "has characters other than letters, digits and ._-"),
            ("two words", "has characters other than letters, digits and ._-"),
            ("", "empty"),
        ],
    )
    def test_any_other_id_is_replaced_and_the_reason_given(self, client: TestClient, given: str, why: str) -> None:
        r = client.get("/health", headers={"X-Request-ID": given})
        assert r.status_code == 200
        rid = r.headers["x-request-id"]
        assert rid != given and len(rid) == 32 and int(rid, 16) >= 0
        assert r.headers["x-request-id-replaced"] == why

    def test_the_rule_refuses_non_ascii_and_control_characters(self) -> None:
        for given in ("idé", "a\tb", "a;b", "a/b"):
            rid, why = check_request_id(given)
            assert rid != given and why == "has characters other than letters, digits and ._-"

    def test_an_error_body_carries_the_id(self, client: TestClient) -> None:
        r = client.post("/select", json={"chunks": []}, headers={"X-Request-ID": "err-1"})
        assert r.status_code == 422 and r.json()["request_id"] == "err-1" == r.headers["x-request-id"]

    def test_log_lines_written_during_a_request_carry_its_id(self, client: TestClient) -> None:
        import logging

        from ctxsel.service.middleware import JsonLogFormatter, current_request_id

        record = logging.LogRecord("ctxsel.scoring", logging.WARNING, __file__, 1, "a cache warning", None, None)
        token = current_request_id.set("req-77")
        try:
            line = JsonLogFormatter().format(record)
        finally:
            current_request_id.reset(token)
        assert '"request_id": "req-77"' in line
        assert "request_id" not in JsonLogFormatter().format(record)


class TestHttpDetails:
    def test_head_health_is_served_without_a_body(self, client: TestClient) -> None:
        r = client.head("/health")
        assert r.status_code == 200 and r.content == b"" and r.headers["x-request-id"]

    def test_health_reports_the_queue(self, client: TestClient) -> None:
        body = client.get("/health").json()
        assert body["queued"] == 0 and body["max_queue"] == 16

    @pytest.mark.parametrize("version", ["1.0", "1.1"])
    def test_a_post_without_content_length_is_411(self, version: str) -> None:
        sent: list[dict[str, Any]] = []

        async def app(scope: Any, receive: Any, send: Any) -> None:
            raise AssertionError("the app must not run")

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b'{"question": "q"}', "more_body": False}

        async def send(message: Any) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": "/select", "http_version": version, "headers": []}
        asyncio.run(BodySizeLimitMiddleware(app, max_bytes=1000)(scope, receive, send))
        assert sent[0]["status"] == 411
        assert b'"error": "length_required"' in sent[1]["body"] and b"Content-Length" in sent[1]["body"]

    def test_a_chunked_post_is_read(self, client: TestClient) -> None:
        import json

        r = client.post(
            "/select", content=iter([json.dumps(SELECT).encode()]), headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 200, r.text

    def test_an_unresolvable_host_says_so(self) -> None:
        from ctxsel.service.runner import bind_socket

        with pytest.raises(InputError, match=r"^cannot resolve host 'no\.such\.host\.invalid': .*--host") as e:
            bind_socket("no.such.host.invalid", 0)
        assert "\n" not in str(e.value) and "--port" not in str(e.value)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


class TestQueue:
    def test_requests_past_the_limit_wait_in_order_and_get_the_freed_slot(self) -> None:
        async def main() -> list[int]:
            lim = ConcurrencyLimiter(1, max_queue=3, queue_timeout_s=5)
            first = lim.try_acquire()
            assert first is not None
            order: list[int] = []

            async def waiter(i: int) -> None:
                slot, why = await lim.acquire()
                assert slot is not None and why == ""
                order.append(i)
                await asyncio.sleep(0)
                slot.release()

            tasks = [asyncio.create_task(waiter(i)) for i in range(3)]
            await asyncio.sleep(0.01)
            assert lim.waiting == 3 and lim.in_flight == 1
            assert lim.try_acquire() is None  # nobody jumps the queue
            threading.Thread(target=first.release).start()  # freed from a worker thread
            await asyncio.gather(*tasks)
            assert lim.in_flight == 0 and lim.waiting == 0
            return order

        assert run(main()) == [0, 1, 2]

    def test_a_full_queue_refuses_at_once(self) -> None:
        async def main() -> tuple[Any, str]:
            lim = ConcurrencyLimiter(1, max_queue=1, queue_timeout_s=5)
            held = lim.try_acquire()
            queued = asyncio.create_task(lim.acquire())
            await asyncio.sleep(0.01)
            refused = await lim.acquire()
            assert held is not None
            held.release()
            slot, _ = await queued
            assert slot is not None
            slot.release()
            assert lim.in_flight == 0
            return refused

        assert run(main()) == (None, "queue_full")

    def test_a_wait_past_the_timeout_is_refused_and_leaves_the_queue(self) -> None:
        async def main() -> tuple[Any, str, int]:
            lim = ConcurrencyLimiter(1, max_queue=4, queue_timeout_s=0.05)
            held = lim.try_acquire()
            got = await lim.acquire()
            assert held is not None
            waiting = lim.waiting
            held.release()
            assert lim.in_flight == 0
            return (*got, waiting)

        assert run(main()) == (None, "queue_timeout", 0)

    def test_a_waiter_that_goes_away_passes_the_slot_on(self) -> None:
        async def main() -> int:
            lim = ConcurrencyLimiter(1, max_queue=4, queue_timeout_s=5)
            held = lim.try_acquire()
            gone = asyncio.create_task(lim.acquire())
            stays = asyncio.create_task(lim.acquire())
            await asyncio.sleep(0.01)
            assert held is not None and lim.waiting == 2
            gone.cancel()  # its client went away while it waited
            await asyncio.sleep(0.01)
            assert lim.waiting == 1
            held.release()
            slot, _ = await stays
            assert slot is not None
            slot.release()
            return lim.in_flight

        assert run(main()) == 0

    @pytest.mark.parametrize(
        ("kw", "message"),
        [
            ({"max_queue": -1}, "max_queue must be an integer >= 0"),
            ({"max_queue": True}, "max_queue must be an integer >= 0"),
            ({"queue_timeout_s": 0}, "queue_timeout_s must be a positive number"),
            ({"queue_timeout_s": float("nan")}, "queue_timeout_s must be a positive number"),
        ],
    )
    def test_bad_queue_settings_are_one_line_errors(self, kw: dict[str, Any], message: str) -> None:
        with pytest.raises(InputError, match=message):
            ServiceSettings(scorer="keywords", **kw)
