"""`ctxsel serve`'s request deadline when --deadline is not given: a local reader gets minutes."""

from __future__ import annotations

import pytest

from ctxsel.cli.serve_cmd import LOCAL_READER_DEADLINE_S, SELECT_DEADLINE_S, default_deadline


@pytest.mark.parametrize(
    ("reader", "seconds"),
    [
        (None, SELECT_DEADLINE_S),
        ("http://localhost:8000/v1", SELECT_DEADLINE_S),
        ("local", LOCAL_READER_DEADLINE_S),
        ("local:qwen-0.5b", LOCAL_READER_DEADLINE_S),
    ],
)
def test_the_default_deadline_follows_the_reader(reader: str | None, seconds: float) -> None:
    assert default_deadline(reader) == seconds
    assert SELECT_DEADLINE_S == 30.0 and LOCAL_READER_DEADLINE_S >= 300.0
