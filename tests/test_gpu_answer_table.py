"""benchmarks/gpu_answer_table.py on CPU with the tiny test model: every row of the answer table is there,
with intervals, the paired differences to full and to adaptive-k, and the rows not run with a reason; a
machine without what the run needs is told so, one line each, before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")


def test_preflight_names_a_missing_gpu_and_weights(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    from benchmarks.gpu_answer_table import main

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    rc = main(["--device", "cuda", "--model", str(tmp_path / "nowhere"), "--output", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "missing: a CUDA GPU" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()  # nothing ran


@pytest.mark.slow
def test_the_whole_table_runs_on_cpu_with_limit_2(tmp_path: Path) -> None:
    from benchmarks.gpu_answer_table import HYBRID, METHODS, TRAINED, main
    from ctxsel.train.context_picker.tiny_model import make_tiny_model

    model, tok = make_tiny_model(seed=2)
    model.save_pretrained(str(tmp_path / "tiny"))
    tok.save_pretrained(str(tmp_path / "tiny"))
    out = tmp_path / "table"
    argv = ["--device", "cpu", "--limit", "2", "--model", str(tmp_path / "tiny"), "--output", str(out)]
    assert main(argv) == 0
    report = json.loads((out / "summary.json").read_text())
    assert list(report["methods"]) == [*METHODS, HYBRID]
    for label, row in report["methods"].items():
        assert row["n"] == 2, label
        if row["errors"] == 0:
            assert len(row["subem_ci95"]) == 2 and len(row["recall_ci95"]) == 2
    # the byte-level tiny tokenizer makes the picker's 2,000-token pool overflow the 8k window: its rows
    # are errors that say so (with the bundled reader's tokenizer the pool fits)
    errors = [json.loads(line).get("error", "") for line in (out / "dense" / "results.jsonl").open()]
    assert all(e.startswith("LLMContextLengthError") for e in errors if e)
    against = {(c["b"], c["a"]) for c in report["comparisons"] if c["metric"] == "recall"}
    assert ("full", "adaptive-k") in against and ("adaptive-k", HYBRID) in against
    assert report["not_run"] == {TRAINED: "no trained adapter ships with ctxsel: pass --adapter PATH"}
    md = (out / "summary.md").read_text()
    assert "Paired differences to `full`" in md and "Paired differences to `adaptive-k`" in md
    assert report["machine"]["device"] == "cpu" and report["seconds"]["total"] > 0
