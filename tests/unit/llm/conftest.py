"""The fake OpenAI-compatible server, one per test, for every test module here."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_server import FakeOpenAIServer


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as s:
        yield s
