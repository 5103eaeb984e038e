"""A missing optional package is the user's to fix, never an internal error: the CLI prints one line
naming the extra and the command (exit 2), torch extras say to install the CPU torch first, and an
eval without matplotlib writes its results with no plots and one warning."""

from __future__ import annotations

import importlib.metadata
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from ctxsel import plotting
from ctxsel.cli.main import main
from ctxsel.errors import EXTRA_OF_MODULE, MissingExtraError, install_hint, missing_extra_error
from ctxsel.selectors.fixed import TopK
from tests.support.paths import REPO


def test_the_hint_names_the_extra_and_torch_first_only_where_it_is_needed() -> None:
    assert install_hint("bm25") == 'pip install "ctxsel[bm25]"'
    assert install_hint("bm25", "serve") == 'pip install "ctxsel[bm25,serve]"'
    for extra in ("embed", "onnx", "picker"):
        assert (
            install_hint(extra)
            == f'first pip install torch==2.13.0 (the CPU build), then pip install "ctxsel[{extra}]"'
        )


def test_run_from_a_checkout_that_is_not_installed_the_hint_names_the_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert install_hint("serve") == f'pip install "{REPO}[serve]"'


def test_every_mapped_module_names_an_extra_that_exists() -> None:
    extras = set(importlib.metadata.metadata("ctxsel").get_all("Provides-Extra") or [])
    assert set(EXTRA_OF_MODULE.values()) <= extras


def test_a_missing_optional_module_becomes_a_missing_extra_error() -> None:
    err = missing_extra_error(ModuleNotFoundError("No module named 'trl.trainer'", name="trl.trainer"))
    assert isinstance(err, MissingExtraError)
    assert str(err) == (
        "the optional package 'trl' is not installed (extra 'picker'): "
        'first pip install torch==2.13.0 (the CPU build), then pip install "ctxsel[picker]"'
    )
    assert missing_extra_error(ModuleNotFoundError("no", name="no_such_module")) is None
    assert missing_extra_error(ImportError("cannot import name 'x' from 'fastapi'", name="fastapi")) is None


@pytest.fixture
def doc(tmp_path: Path) -> Path:
    p = tmp_path / "doc.txt"
    p.write_text("The meteorite weighs 3.2 kg.\n\nCats sleep.", encoding="utf-8")
    return p


def _select(doc: Path, *extra: str) -> list[str]:
    return ["select", "--document", str(doc), "--question", "How heavy is the meteorite?", *extra]


def _raises(exc: BaseException) -> Any:
    def select(self: Any, *a: Any, **kw: Any) -> Any:
        raise exc

    return select


def test_cli_an_unguarded_optional_import_is_one_line_and_exit_2(
    doc: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(TopK, "_select", _raises(ModuleNotFoundError("No module named 'duckdb'", name="duckdb")))
    rc = main(_select(doc, "--scorer", "keywords", "--method", "top-k@1"))
    err = capsys.readouterr().err
    assert rc == 2
    assert err == "ctxsel select: error: the optional package 'duckdb' is not installed (extra 'holo'): " + (
        'pip install "ctxsel[holo]"\n'
    )


def test_cli_a_missing_module_that_is_no_extra_stays_a_bug(
    doc: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        TopK, "_select", _raises(ModuleNotFoundError("No module named 'ctxsel.gone'", name="ctxsel.gone"))
    )
    rc = main(_select(doc, "--scorer", "keywords", "--method", "top-k@1"))
    assert rc == 1 and "internal error: ModuleNotFoundError" in capsys.readouterr().err


def test_cli_bm25_without_bm25s(doc: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "bm25s", None)  # import bm25s raises ImportError
    rc = main(_select(doc, "--scorer", "bm25"))
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert err.startswith("ctxsel select: error: BM25 scoring needs bm25s: ") and '"ctxsel[bm25]"' in err


def test_eval_without_matplotlib_writes_its_results_no_plots_and_one_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setattr(plotting, "_warned", False)
    out = tmp_path / "ev"
    argv = ["eval", "--dataset", "example", "--scorer", "keywords", "--methods", "top-k@1,adaptive-k"]
    rc = main([*argv, "--output", str(out), "--no-progress"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert set(json.loads((out / "summary.json").read_text())["methods"]) == {"top-k@1", "adaptive-k"}
    assert not (out / "plots").exists()
    warnings = [line for line in captured.err.splitlines() if "warning" in line]
    assert warnings == ['ctxsel eval: warning: no plots: matplotlib is not installed (pip install "ctxsel[plots]")'], (
        captured.err
    )
    assert captured.out.rstrip().endswith("summary.md, summary.json")  # and no plots/ in the list


def test_eval_with_matplotlib_draws_its_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "ev"
    rc = main(["eval", "--dataset", "example", "--scorer", "keywords", "--methods", "top-k@1", "--output", str(out)])
    assert rc == 0
    assert (out / "plots" / "recall_vs_tokens.png").is_file()
    assert capsys.readouterr().out.rstrip().endswith("summary.json, plots/")


def test_picker_curves_without_matplotlib_are_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxsel.train.context_picker.plots import plot_curves

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setattr(plotting, "_warned", True)  # warned before: no second warning, no error
    plot_curves(tmp_path / "reward_curves.png", {"stage1": {"train": [], "val": []}})
    assert not (tmp_path / "reward_curves.png").exists()
