"""A first ``--scorer accurate`` run on a fresh machine builds nomic's ONNX graph: it says so on
stderr, how long to expect and how long it took, and stdout stays the clean ``--json`` document."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ctxsel.scoring.onnx_backend import auto_int8
from tests.support.cli import ctxsel_command


@pytest.mark.model
@pytest.mark.slow  # builds the GGUF's graph (int8 on a CPU with VNNI): up to a minute on 2 cores
def test_the_first_accurate_run_reports_its_build_on_stderr_only(tmp_path: Path) -> None:
    env = {**os.environ, "CTXSEL_CACHE_DIR": str(tmp_path / "fresh-cache"), "OMP_NUM_THREADS": "1"}
    question = "How heavy is the meteorite in the museum?"
    argv = [*ctxsel_command(), "select", "--document", "example:handbook", "--question", question]
    res = subprocess.run(
        [*argv, "--scorer", "accurate", "--json"], capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr[-2000:]
    body = json.loads(res.stdout)  # nothing but the document on stdout
    assert body["method"] == "adaptive-k" and body["ids"][0] == "15"
    building = [line for line in res.stderr.splitlines() if "nomic-v1.5" in line]
    about = "about a minute" if auto_int8() else "about 30 s"  # int8: the export, then quantising it
    assert building[0].startswith("ctxsel: building ") and f"once for this machine ({about}" in building[0]
    assert building[1].startswith("ctxsel: built ") and building[1].endswith(" s")
