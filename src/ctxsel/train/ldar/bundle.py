"""A trained LDAR policy made an artefact that ships (``ctxsel train ldar ... --bundle DIR``,
``make ldar-policy``): config.json and model.safetensors copied into DIR with a MODEL_CARD.md and
the manifest.json that :mod:`ctxsel.bundled` checks them against (:func:`ctxsel.bundled.write_bundle`).

    from ctxsel.train.ldar.bundle import bundle_ldar
    sums = bundle_ldar("runs/ldar/label/policy", "/tmp/ldar", made_by="my command")

Standard library only (the card is read from config.json): no torch.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from ctxsel import bundled
from ctxsel.errors import InputError

ARTEFACT = "ldar"


def bundle_ldar(
    policy_dir: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    made_by: str,
    card: bundled.CardWriter | None = None,
) -> dict[str, str]:
    """Copy a trained policy folder (``ctxsel train ldar``'s OUTPUT/policy) into ``dest`` with a model
    card (``card``; default :func:`ldar_card`) and manifest.json; the files' sha256. Refuses a
    policy over the registry's 5 MB."""
    src = Path(policy_dir)

    def install(folder: Path) -> None:
        for name in bundled.get(ARTEFACT).files:
            if not (src / name).is_file():
                raise InputError(f"{src / name} is missing: is {src} a trained policy (OUTPUT/policy)?")
            shutil.copyfile(src / name, folder / name)

    return bundled.write_bundle(
        dest, ARTEFACT, made_by, install, card or (lambda d, s: ldar_card(d, s, made_by)), source=src
    )


def ldar_card(dest: Path, sums: Mapping[str, str], made_by: str, heldout: str = "") -> str:
    """MODEL_CARD.md of a bundled policy, from its config.json: what it is, the files and their sha256,
    the command, the training settings and data; ``heldout``: a markdown table of held-out results."""
    cfg = json.loads((dest / "config.json").read_text(encoding="utf-8"))
    pol, tr = cfg.get("policy", {}), cfg.get("training", {})
    total = sum((dest / n).stat().st_size for n in sums)
    reward = tr.get("reward") if isinstance(tr.get("reward"), dict) else {}
    lines = [
        "# LDAR policy (bundled)",
        "",
        "An LDAR band policy for `ldar[policy=FOLDER]` (or, in the package's data/ldar, `ldar` with no options). "
        "Every file is checked against the sha256 in manifest.json (the same as below) before it is read.",
        "",
        *bundled.files_table(dest, sums),
        "",
        f"{total:,} bytes in all. Check by hand: `sha256sum {' '.join(sums)}` in this folder.",
        "",
        "## The network",
        "",
        f"Variant `{pol.get('head')}/{pol.get('encoder')}/{pol.get('embedding')}`; it reads only the "
        "question-chunk similarity scores, never the text. Inference takes the Betas' means (deterministic). "
        "See docs/methods/ldar.md.",
        "",
        "## How it was made",
        "",
        "```bash",
        made_by,
        "```",
        "",
        f"- Training: `{tr.get('command')}`; reward {reward.get('name', '?')}"
        + (f" ({reward['metric']})" if reward.get("metric") else "")
        + f", {tr.get('steps_done', tr.get('steps'))} REINFORCE steps at batch {tr.get('batch_size')}, "
        f"lr {tr.get('lr')} ({tr.get('lr_schedule')}), seed {tr.get('seed')}, threads {tr.get('threads')}.",
        f"- Data: {tr.get('dataset')}, scored by {tr.get('scorer')}; {tr.get('n_train')} training questions "
        f"(split {json.dumps(tr.get('split'))}).",
        f"- ctxsel {cfg.get('ctxsel_version')}.",
        "",
    ]
    if heldout:
        lines += ["## Held-out questions", "", heldout.rstrip(), ""]
    return "\n".join(lines)


__all__ = ["bundle_ldar", "ldar_card"]
