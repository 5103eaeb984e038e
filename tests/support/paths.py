"""The repository's files the tests read, named once: a test file may move, these paths do not."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
FIXTURES = REPO / "tests" / "fixtures"
EXAMPLE_MD = SRC / "ctxsel" / "data" / "example.md"
