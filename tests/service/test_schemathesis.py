"""Schemathesis against the service's own OpenAPI schema (/openapi.json).

Generated requests, valid and invalid, go to a real ``ctxsel serve``
process; every response must be documented in the schema (status code,
content type, body shape) and none may be a 500. The number of examples is
bounded so the suite stays fast.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("fastapi")
schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.specs.openapi.checks import positive_data_acceptance  # noqa: E402

from tests.support.fake_server import FakeOpenAIServer, completion_reply  # noqa: E402
from tests.support.server_process import ServerProcess  # noqa: E402

pytestmark = pytest.mark.slow  # about 8 s: a server process and 40 examples per operation

TOKEN = "schema-token"
MAX_EXAMPLES = 40


@pytest.fixture(scope="module")
def live_server() -> Any:
    with FakeOpenAIServer() as fake:
        fake.push(*[completion_reply(" an answer\n") for _ in range(10 * MAX_EXAMPLES)])
        # a body limit above what the generator writes: an over-long invalid body must get its 422, not a 413
        args = [
            "--scorer",
            "keywords",
            "--max-body-bytes",
            "5000000",
            "--max-concurrency",
            "8",
            "--deadline",
            "10",
            "--reader",
            f"{fake.base_url}/v1",
            "--reader-model",
            "fake",
            "--reader-mode",
            "completions",
            "--llm-cache",
            "off",
        ]
        with ServerProcess(args, token=TOKEN) as srv:
            yield srv


def _app_schema() -> dict[str, Any]:
    from ctxsel.service import ServiceSettings, create_app

    return create_app(ServiceSettings(token=TOKEN, scorer="keywords")).openapi()


# The schema the app builds; test_the_server_serves_this_schema checks that the
# live server's /openapi.json is the same document. (Loading it from the live
# server through a fixture, schemathesis.pytest.from_fixture, fails under pytest 9.)
APP_SCHEMA = _app_schema()
schema = schemathesis.openapi.from_dict(APP_SCHEMA)


def test_the_server_serves_this_schema(live_server: ServerProcess) -> None:
    status, headers, served = live_server.request("GET", "/openapi.json", auth=False)
    assert status == 200 and headers["content-type"] == "application/json"
    assert served == APP_SCHEMA
    assert set(served["paths"]) == {"/select", "/explain", "/answer", "/health", "/metrics", "/methods"}
    assert set(served["paths"]["/health"]) == {"get", "head"}
    assert served["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    for code in ("401", "413", "422", "503", "504"):
        assert code in served["paths"]["/select"]["post"]["responses"]


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture],
)
def test_every_response_matches_the_schema(case: Any, live_server: ServerProcess) -> None:
    # Every check but positive_data_acceptance: a body can match the schema and still
    # be unusable (an unknown method name, 2 scores for 3 chunks, both 'scores' and
    # 'embeddings'); the service answers those 422 with a message, as documented.
    case.call_and_validate(
        base_url=live_server.base_url,
        headers={"Authorization": f"Bearer {TOKEN}"},
        excluded_checks=[positive_data_acceptance],
    )
