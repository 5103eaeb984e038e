"""One clean install of the wheel, used as a user would (wheel_smoke.sh runs it with the venv's python,
from an empty folder outside the checkout). The argument names the install:

- none: select with keywords; --scorer bm25 and `ctxsel serve` each fail in one line naming their extra (exit 2)
- bm25-serve: select with bm25; the dense default fails in one line naming [embed] and the torch step;
  `ctxsel serve` answers /health
- all: select with the default (dense) scorer

and in each, `ctxsel eval --dataset example` writes its summary: with plots for `all`, else none and
one warning naming [plots].
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from importlib import resources
from pathlib import Path

import ctxsel

KIND = sys.argv[1]
CTXSEL = str(Path(sys.executable).with_name("ctxsel"))
SCORER = {"none": "keywords", "bm25-serve": "bm25", "all": "dense"}[KIND]
DOC = str(resources.files("ctxsel") / "data" / "example.md")  # the wheel's package data
QUESTION = "How heavy is the meteorite in the museum?"


def ctxsel_cli(*args: str, expect: int = 0) -> subprocess.CompletedProcess[str]:
    res = subprocess.run([CTXSEL, *args], capture_output=True, text=True, timeout=900)
    assert res.returncode == expect, (
        f"ctxsel {' '.join(args)}: exit {res.returncode}, not {expect}\n{res.stderr[-3000:]}"
    )
    return res


def missing(extra: str, *args: str, also: str = "") -> None:
    err = ctxsel_cli(*args, expect=2).stderr.strip()
    assert len(err.splitlines()) == 1 and f'"ctxsel[{extra}]"' in err and also in err, err


def serve_health() -> None:
    proc = subprocess.Popen([CTXSEL, "serve", "--port", "0", "--scorer", SCORER], stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # JSON log lines; the first names the port
            event = json.loads(line) if line.startswith("{") else {}
            if event.get("event") == "listening":  # bound; it accepts, then warms its scorer (503)
                for _ in range(600):
                    try:
                        with urllib.request.urlopen(event["url"] + "/health", timeout=30) as r:
                            assert r.status == 200, r.status
                            return
                    except urllib.error.HTTPError as e:
                        if e.code != 503:
                            raise
                    except OSError:  # refused: not accepting yet
                        pass
                    time.sleep(0.1)
                raise AssertionError("ctxsel serve listened but /health was not 200 within 60 s")
        raise AssertionError(f"ctxsel serve exited {proc.wait()} before listening")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


assert Path(ctxsel.__file__).resolve().is_relative_to(Path(sys.prefix).resolve()), ctxsel.__file__
assert ctxsel_cli("--version").stdout.strip() == f"ctxsel {ctxsel.__version__}"
sel = json.loads(ctxsel_cli("select", "--document", DOC, "--question", QUESTION, "--scorer", SCORER, "--json").stdout)
assert sel["chunks"], sel
if KIND == "none":
    missing("bm25", "select", "--document", DOC, "--question", QUESTION, "--scorer", "bm25")
    missing("serve", "serve", "--port", "0", "--scorer", "keywords")
if KIND == "bm25-serve":
    missing("embed", "select", "--document", DOC, "--question", QUESTION, also="torch==2.13.0")
    serve_health()

res = ctxsel_cli("eval", "--dataset", "example", "--scorer", SCORER, "--output", "ev", "--no-progress")
assert json.loads(Path("ev/summary.json").read_text())["methods"], res.stdout
warnings = [line for line in res.stderr.splitlines() if ": warning: " in line]
if KIND == "all":
    assert list(Path("ev/plots").rglob("*.png")), "no plots with [all]"
else:
    assert not Path("ev/plots").exists(), "plots without matplotlib?"
    assert len(warnings) == 1 and '"ctxsel[plots]"' in warnings[0], warnings
print(f"wheel smoke [{KIND}]: ok (ctxsel {ctxsel.__version__}, scorer {SCORER})")
