"""A trained Context-Picker stage made the adapter that ships (``ctxsel train context-picker ... --bundle
DIR``, ``python -m experiments.context_picker_grpo bundle``): its LoRA weights in float16, checked to
convert for its base's GGUF, with a MODEL_CARD.md and the manifest.json that :mod:`ctxsel.bundled`
checks the files against (:func:`ctxsel.bundled.write_bundle`).

    from ctxsel.train.context_picker.bundle import bundle_context_picker
    sums = bundle_context_picker("runs/picker/stage2", "/tmp/picker", made_by="my command")

Importing it loads nothing heavy; bundling imports torch and safetensors.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ctxsel import bundled
from ctxsel.errors import InputError

ARTEFACT = "context-picker"


def half_precision(src: Path, dest: Path) -> None:
    """Copy a peft safetensors file with its float tensors in float16, half what float32 takes; llama.cpp's
    conversion and peft's loader read them back into float32."""
    import torch
    from safetensors.torch import load_file, save_file

    weights = load_file(str(src))
    cast = {k: v.to(torch.float16) if v.is_floating_point() else v for k, v in weights.items()}
    bad = [k for k, v in cast.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        raise InputError(f"{src}: {bad[0]} does not fit float16 (values beyond +-65,504)")
    save_file(cast, str(dest), metadata={"format": "pt"})


def install_adapter(stage: Path, dest: Path) -> None:
    """Copy a trained stage folder (OUTPUT/stage2) into ``dest`` as a bundled adapter: its base must be a
    bundled model, its LoRA weights go to float16 and must convert for that model's GGUF (llama.cpp
    runs it); :func:`ctxsel.bundled.write_bundle` then checks they fit 10 MB. The KL reference
    (adapter/ref) stays behind."""
    import tempfile

    from ctxsel.llm.hf_client import adapter_meta, bundled_base
    from ctxsel.llm.lora_gguf import convert
    from ctxsel.llm.models import gguf_path
    from ctxsel.train.context_picker.trainer import adapter_digest

    meta = adapter_meta(stage)
    base = bundled_base(str(meta.get("base", "")))
    if base is None:
        raise InputError(f"{stage} was trained on {meta.get('base')!r}: the bundled adapter must be on a bundled model")
    shutil.rmtree(dest / "adapter", ignore_errors=True)
    (dest / "adapter").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(stage / "adapter" / "adapter_config.json", dest / "adapter" / "adapter_config.json")
    half_precision(stage / "adapter" / "adapter_model.safetensors", dest / "adapter" / "adapter_model.safetensors")
    with tempfile.TemporaryDirectory() as tmp:
        convert(dest / "adapter", gguf_path(base), Path(tmp) / "lora.gguf")  # refuses shapes the base lacks
    meta.update(adapter_sha=adapter_digest(dest / "adapter"), weights="float16 (cast from the trained float32)")
    (dest / "picker.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")


def bundle_context_picker(
    stage_dir: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    made_by: str,
    card: bundled.CardWriter | None = None,
) -> dict[str, str]:
    """A trained stage folder (``ctxsel train context-picker``'s OUTPUT/stage2) made the adapter that
    ships (:func:`install_adapter`) in ``dest``, with a model card (``card``, default :func:`picker_card`
    from the run's train_summary.json beside the stage) and manifest.json; the files' sha256."""
    stage = Path(stage_dir)
    if card is None:
        summary_file = stage.parent / "train_summary.json"
        summary = json.loads(summary_file.read_text(encoding="utf-8")) if summary_file.is_file() else {}
        n = int(json.loads((stage / "picker.json").read_text(encoding="utf-8")).get("stage", 2))
        card = lambda d, s: picker_card(d, s, summary, n, [made_by])  # noqa: E731
    return bundled.write_bundle(dest, ARTEFACT, made_by, lambda d: install_adapter(stage, d), card, source=stage)


def _pct(v: Any, pct: bool = True) -> str:
    if v is None:
        return "-"
    return f"{100 * v:.1f}" if pct else f"{v:.2f}"


def picker_card(
    dest: Path,
    sums: Mapping[str, str],
    summary: Mapping[str, Any],
    stage: int,
    commands: Sequence[str],
    data: Mapping[str, Any] | None = None,
    picks: Mapping[str, Any] | None = None,
) -> str:
    """MODEL_CARD.md of a bundled adapter: data, commands, seed, training curve, held-out picks, sha256.
    ``summary``: the run's train_summary.json; ``data``: how its rows were made (``labels``,
    ``pool_tokens``, ``n_test``; default: from the summary); ``picks``: greedy picks on held-out
    questions (``{"train_seconds": s, "picks": {model: {valid, named, recall, precision}}}``)."""
    cfg = dict(summary.get("config", {}))
    data = dict(data or {})
    labels = data.get("labels") or (
        "labelled gold chunks" if summary.get("labels") else f"mined by `ctxsel mine` ({summary.get('mined')})"
    )
    pool = data.get("pool_tokens", cfg.get("n_tokens"))
    picks = dict(picks or {})
    targets = ", ".join(cfg.get("target_modules", []))
    lines = [
        "# Context-Picker adapter (bundled)",
        "",
        f"A LoRA adapter (r {cfg.get('lora_r')}, alpha {cfg.get('lora_alpha')}, on {targets}) for "
        f"the bundled `{cfg.get('base')}`, trained by Context-Picker's two-stage GRPO (stage {stage} of 2 shipped). "
        f"`context-picker` with no `adapter` runs it when its llm is the bundled local `{cfg.get('base')}` "
        "(llama.cpp, the reply format under a grammar); `adapter=none` runs the untrained picker. "
        "Every file is checked against the sha256 below (listed in manifest.json beside it) before it is read.",
        "",
        "## Data",
        "",
        f"{summary.get('dataset', 'hotpotqa-long')}'s training split (the fixed 80/20 split, seed 0): "
        f"{summary.get('n_train_rows')} GRPO and {summary.get('n_val_rows')} validation rows; S_gold: {labels}; "
        f"candidate pools of B = {pool:,} tokens ranked by all-MiniLM-L6-v2."
        if isinstance(pool, int)
        else f"{summary.get('n_train_rows')} GRPO and {summary.get('n_val_rows')} validation rows; S_gold: {labels}.",
    ]
    if "n_test" in data:
        lines[-1] += f" The {data['n_test']} test questions were never trained on."
    lines[-1] += " HotpotQA is CC BY-SA 4.0; the base model Apache-2.0."
    lines += ["", "## Commands", "", "```bash", *commands, "```", ""]
    trained = f"Seed {cfg.get('seed')}"
    if summary.get("device"):
        trained += f"; trained on {summary['device']}"
    if "train_seconds" in picks:
        trained += f" in {picks['train_seconds']:,.0f} s"
    shuffle = cfg.get("shuffle_candidates")
    lines += [
        trained + f"; GRPO group {cfg.get('num_generations')}, questions a step {cfg.get('prompts_per_step')}, "
        f"lr {cfg.get('lr')}, KL weight {cfg.get('beta')}"
        + (f", {shuffle:.0%} of training pools shuffled." if isinstance(shuffle, int | float) else "."),
        "",
        "## Training",
        "",
        "| stage | steps | stopped | validation reward (first -> last) | valid replies (last) |",
        "|---|---:|---|---:|---:|",
    ]
    for name, c in dict(summary.get("curves", {})).items():
        first, last = c.get("val_first") or {}, c.get("val_last") or {}
        reward = f"{first['reward']:.3f} -> {last['reward']:.3f}" if "reward" in first and "reward" in last else "-"
        valid = f"{last['valid']:.0%}" if "valid" in last else "-"
        lines.append(f"| {name} | {c.get('steps')} | {c.get('stopped') or 'its step limit'} | {reward} | {valid} |")
    if picks.get("picks"):
        n_test = data.get("n_test", "held-out")
        lines += [
            "",
            f"## Held-out picks ({n_test} test questions, greedy, transformers)",
            "",
            "| model | valid % | named | gold recall % | precision % |",
            "|---|---:|---:|---:|---:|",
        ]
        for name, s in picks["picks"].items():
            lines.append(
                f"| {name} | {100 * s['valid']:.1f} | {_pct(s.get('named'), pct=False)} | {_pct(s.get('recall'))} "
                f"| {_pct(s.get('precision'))} |"
            )
    lines += ["", *bundled.files_table(dest, sums)]
    lines += [
        "",
        "The answer quality it gives the bundled reader is in docs/results.md (row `context-picker, trained adapter`).",
        "",
    ]
    return "\n".join(lines)


__all__ = ["bundle_context_picker", "half_precision", "install_adapter", "picker_card"]
