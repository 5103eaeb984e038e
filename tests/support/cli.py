"""Running the ``ctxsel`` command line from a test: in process, or as the installed console script."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ctxsel.cli.main import main


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``ctxsel ARGV`` in this process: the exit code, standard output and standard error."""
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def ctxsel_command() -> list[str]:
    """The argv prefix that starts ``ctxsel`` in a subprocess (the console script when installed)."""
    script = Path(sys.executable).with_name("ctxsel")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "ctxsel.cli.main"]
