"""experiments/gpu_answer_table.py on CPU with the tiny test model: every row of the answer table is there,
with intervals, the paired differences to full and to adaptive-k, and the rows not run with a reason; a
machine without what the run needs is told so, one line each, before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")


def test_preflight_names_a_missing_gpu_and_weights(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    from experiments.gpu_answer_table import main

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    rc = main(["--device", "cuda", "--model", str(tmp_path / "nowhere"), "--output", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "missing: a CUDA GPU" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()  # nothing ran
    rc = main(["--table-only", "--output", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "holds no run.json" in err and "Traceback" not in err


@pytest.mark.slow
def test_the_whole_table_runs_on_cpu_with_limit_2(tmp_path: Path) -> None:
    from ctxsel.train.context_picker.tiny_model import make_tiny_model
    from experiments.gpu_answer_table import HYBRID, METHODS, TRAINED, main

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
    from experiments.run_summary import from_csv, log_rows

    summary = from_csv((out / "dense" / "examples.csv").read_text())  # the committed form, written beside the log
    assert [(r["example_id"], r["method"], r.get("subem")) for r in summary] == [
        (r["example_id"], r["method"], r.get("subem")) for r in log_rows(out / "dense" / "results.jsonl")
    ]
    against = {(c["b"], c["a"]) for c in report["comparisons"] if c["metric"] == "recall"}
    assert ("full", "adaptive-k") in against and ("adaptive-k", HYBRID) in against
    assert report["not_run"] == {TRAINED: "no trained adapter ships with ctxsel: pass --adapter PATH"}
    md = (out / "summary.md").read_text()
    assert "Paired differences to `full`" in md and "Paired differences to `adaptive-k`" in md
    assert report["machine"]["device"] == "cpu" and report["seconds"]["total"] > 0


def test_a_run_cut_short_still_gives_its_table(tmp_path: Path) -> None:
    """The 2026-11-28 H100 run stopped inside its first stage: --table-only rebuilds the table from the
    64 questions it read, names the stages it never reached, and pairs only rows that read the same
    questions (a row missing one question is left out of the comparisons, not compared on other ones)."""
    import shutil

    from experiments.gpu_answer_table import HYBRID, TRAINED, main
    from experiments.run_summary import read_rows

    out = tmp_path / "h100"
    shutil.copytree(Path(__file__).parents[1] / "benchmarks" / "results" / "gpu_answer_table_h100", out)
    committed = (out / "summary.json").read_text()
    assert main(["--table-only", "--output", str(out)]) == 0
    assert (out / "summary.json").read_text() == committed  # the summaries rebuild the committed table
    report = json.loads((out / "summary.json").read_text())
    assert not (out / "dense" / "results.jsonl").exists()  # the committed form: the per-example summary
    rows = read_rows(out / "dense")
    assert {label: row["n"] for label, row in report["methods"].items()} == {
        m: 64 for m in ("closed-book", "oracle", "top-k@5", "top-n-tokens@1k", "top-n-tokens@2k", "adaptive-k", "full")
    }
    assert set(report["not_run"]) == {HYBRID, "self-route", "context-picker", "sage", TRAINED}
    assert (out / "comparisons.png").stat().st_size > 0

    def subem(method: str) -> float:
        return sum(r["subem"] for r in rows if r["method"] == method) / 64

    pair = next(c for c in report["comparisons"] if (c["a"], c["b"], c["metric"]) == ("adaptive-k", "full", "subem"))
    assert pair["diff"] == pytest.approx(subem("adaptive-k") - subem("full")) and pair["n"] == 64

    # drop one question's full row (a log beside the summary wins, and rewrites it): nothing is paired with
    # full any more, the rest with adaptive-k still is
    kept = [r for r in rows if not (r["method"] == "full" and r["example_id"] == "hotpotqa-000")]
    (out / "dense" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    assert main(["--table-only", "--output", str(out)]) == 0
    assert (
        len(read_rows(out / "dense")) == 447 and len((out / "dense" / "examples.csv").read_text().splitlines()) == 448
    )
    report = json.loads((out / "summary.json").read_text())
    assert report["methods"]["full"]["n"] == 63
    assert not [c for c in report["comparisons"] if "full" in (c["a"], c["b"])]
    assert {c["a"] for c in report["comparisons"]} == {
        "closed-book",
        "oracle",
        "top-k@5",
        "top-n-tokens@1k",
        "top-n-tokens@2k",
    }


def test_the_bundle_names_tensors_and_refuses_a_missing_piece(tmp_path: Path) -> None:
    import hashlib

    from experiments.gpu_bundle import hf_name, unpack

    assert hf_name("blk.3.attn_q.bias") == "model.layers.3.self_attn.q_proj.bias"
    assert hf_name("blk.27.ffn_down.weight") == "model.layers.27.mlp.down_proj.weight"
    assert hf_name("output.weight") == "lm_head.weight"
    pieces = [b"first", b"second", b"third"]
    (tmp_path / "bundle.sha256").write_text(hashlib.sha256(b"".join(pieces)).hexdigest() + "\n")
    for i, piece in enumerate(pieces[:2], 1):  # the third call's piece never arrived
        (tmp_path / f"p{i:02d}").write_bytes(piece)
    with pytest.raises(SystemExit, match="the 2 pieces' sha256 .* a piece is missing"):
        unpack(tmp_path)


def test_a_piece_fits_a_call_beside_the_checkout_as_it_is() -> None:
    from experiments.gpu_bundle import CALL_LIMIT, ROOM, checkout_bytes, piece_size

    checkout = checkout_bytes()
    assert 10_000_000 < checkout < 30_000_000  # the tracked files only (no .venv, runs or caches)
    assert piece_size() % 1_000_000 == 0 and piece_size() + checkout + ROOM <= CALL_LIMIT
    assert piece_size() + 1_000_000 + checkout + ROOM > CALL_LIMIT  # and no smaller than it needs to be
