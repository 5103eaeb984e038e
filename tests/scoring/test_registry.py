"""Scorer presets: ``fast`` and ``accurate`` resolve to specs in Python, the CLI, the service and env."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ctxsel.scoring import PRESETS, available_scorers, get_scorer, resolve_preset, scorer_class
from ctxsel.scoring.dense import DenseScorer
from ctxsel.scoring.gguf_embedders import embedder_ready
from ctxsel.scoring.registry import base_scorer, scorer_options
from tests.support.cli import run_cli

nomic_here = pytest.mark.skipif(not embedder_ready("nomic-v1.5"), reason="nomic-embed-text-v1.5 parts not installed")


def test_presets_are_listed_after_the_scorers_with_the_spec_they_stand_for() -> None:
    scorers = available_scorers()
    assert list(scorers)[:6] == ["dense", "bm25", "keywords", "hybrid", "fast", "accurate"]
    assert scorers["fast"].preset == "dense"
    assert scorers["accurate"].preset == "dense[model=nomic-v1.5]"
    assert scorers["dense"].preset is None
    assert PRESETS == {"fast": "dense", "accurate": "dense[model=nomic-v1.5]"}


def test_a_preset_resolves_to_its_scorer_and_given_options_override_its_own() -> None:
    assert base_scorer("accurate") == "dense" and base_scorer("bm25") == "bm25"
    assert scorer_class("accurate") is DenseScorer
    assert "backend" in scorer_options("accurate")
    assert resolve_preset("accurate", {}) == ("dense", {"model": "nomic-v1.5"})
    assert resolve_preset("accurate", {"backend": "llama-q8_0"}) == (
        "dense",
        {"model": "nomic-v1.5", "backend": "llama-q8_0"},
    )
    # a flag left out (None) keeps the preset's model; one given replaces it
    assert resolve_preset("accurate", {"model": None, "num_threads": None}) == (
        "dense",
        {"model": "nomic-v1.5", "num_threads": None},
    )
    assert resolve_preset("accurate", {"model": "/m"}) == ("dense", {"model": "/m"})
    assert resolve_preset("bm25", {"k1": 1.0}) == ("bm25", {"k1": 1.0})


def test_fast_is_the_default_dense_scorer() -> None:
    fast, dense = get_scorer("fast"), get_scorer("dense")
    assert isinstance(fast, DenseScorer) and isinstance(dense, DenseScorer)
    assert fast.model_id == dense.model_id and fast.backend == dense.backend


@nomic_here
def test_accurate_is_nomic_and_takes_options() -> None:
    s = get_scorer("accurate[backend=llama-q8_0]")
    assert isinstance(s, DenseScorer) and s.model_id == "nomic-v1.5|llama-q8_0"
    small = get_scorer("accurate", dim=256, backend="llama-q8_0")
    assert isinstance(small, DenseScorer) and small.model_id == "nomic-v1.5|llama-q8_0|dim=256"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("acurate", "unknown scorer 'acurate'; choose dense, bm25, keywords, hybrid, fast, accurate"),
        ("fast[batch=8]", "bad options for scorer 'fast': no option 'batch' \\(did you mean 'batch_size'\\?\\)"),
        ("accurate[bogus=1]", "bad options for scorer 'accurate': no option 'bogus'"),
        ("accurate@2", "bad scorer spec 'accurate@2'"),
    ],
)
def test_bad_preset_names_and_options_are_one_line_errors(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        get_scorer(spec)


def test_the_cli_takes_the_presets_and_refuses_a_misspelt_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from ctxsel.cli.scorer_args import scorer_spec

    assert [scorer_spec(s) for s in ("fast", "accurate", "accurate[backend=llama-q8_0]")] == [
        "fast",
        "accurate",
        "accurate[backend=llama-q8_0]",
    ]
    doc = tmp_path / "doc.txt"
    doc.write_text("The museum opened in 1901.\n")
    with pytest.raises(SystemExit) as e:
        run_cli(capsys, "select", "--document", str(doc), "--question", "q?", "--scorer", "acurate")
    out, err = capsys.readouterr()
    assert e.value.code == 2 and out == ""
    last = err.strip().splitlines()[-1]
    assert "unknown scorer 'acurate'; choose dense, bm25, keywords, hybrid, fast, accurate" in last
    assert "Traceback" not in err


def test_make_scorer_keeps_the_presets_model_when_model_is_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    import ctxsel.scoring as scoring
    from ctxsel.cli.scorer_args import make_scorer

    seen: dict[str, Any] = {}

    def fake_get_scorer(name: str, **options: Any) -> object:
        seen.update(resolve_preset(name, options)[1], name=name)
        return object()

    monkeypatch.setattr(scoring, "get_scorer", fake_get_scorer)
    args = argparse.Namespace(scorer="accurate", model=None, threads=2, backend="llama-q8_0", expand=None)
    make_scorer(args)
    assert seen["name"] == "accurate"
    assert (seen["model"], seen["backend"], seen["num_threads"]) == ("nomic-v1.5", "llama-q8_0", 2)


def test_the_service_takes_a_preset_and_refuses_an_unknown_name() -> None:
    from ctxsel.service import ServiceSettings
    from ctxsel.service.service import Service

    scorer = Service(ServiceSettings(scorer="fast")).scorer()
    dense = get_scorer("dense")
    assert isinstance(scorer, DenseScorer) and isinstance(dense, DenseScorer)
    assert scorer.model_id == dense.model_id
    ServiceSettings(scorer="accurate")  # accepted; the model loads when the server warms up
    with pytest.raises(ValueError, match="unknown scorer 'acurate'; choose dense, bm25, keywords, hybrid, fast"):
        ServiceSettings(scorer="acurate")


def test_env_lists_both_presets_with_what_they_resolve_to(capsys: pytest.CaptureFixture[str]) -> None:
    from ctxsel.cli.env_cmd import scorers

    listed = scorers()
    assert listed["fast"]["preset"] == "dense" and listed["fast"]["ready"] is None
    assert listed["accurate"]["preset"] == "dense[model=nomic-v1.5]"
    assert listed["accurate"]["ready"] is embedder_ready("nomic-v1.5")
    rc, out, _ = run_cli(capsys, "env")
    assert rc == 0
    lines = out.splitlines()
    assert any(line.split()[:3] == ["fast", "=", "dense:"] for line in lines)
    assert any(line.split()[:3] == ["accurate", "=", "dense[model=nomic-v1.5]:"] for line in lines)
