"""LDAR's *training* states, for resuming a run exactly (a trained *policy*, what the selector
loads, is :mod:`ctxsel.selectors.ldar.checkpoint`'s): a folder with ``state.json`` (step, EMA
baseline, RNG states, the reward curve so far, the run's config), ``model.safetensors`` and
``optimizer.safetensors`` (Adam's moments, with the param-group settings in ``state.json``).
Written beside the final name and renamed into place, as the policies in
:mod:`ctxsel.selectors.ldar.checkpoint` are; nothing is unpickled."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import torch
from safetensors.torch import load_file, save_file

from ctxsel.errors import InputError
from ctxsel.selectors.ldar.checkpoint import (
    STATE_FORMAT,
    VERSION,
    WEIGHTS_NAME,
    _fresh_tmp,
    _load_weights,
    _replace_dir,
    _state_dict,
)
from ctxsel.selectors.ldar.policy import LDARPolicy


def save_training_state(
    path: str | Path,
    policy: LDARPolicy,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
) -> Path:
    """Everything needed to continue a run exactly: weights, Adam, ``state`` (JSON)."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = _fresh_tmp(final)
    save_file(_state_dict(policy), str(tmp / WEIGHTS_NAME))
    opt = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for idx, st in opt["state"].items():
        for name, value in st.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{idx}.{name}"] = value.detach().contiguous().clone()
            else:
                scalars.setdefault(str(idx), {})[name] = value
    tensors["torch_rng_state"] = torch.get_rng_state().clone()
    save_file(tensors, str(tmp / "optimizer.safetensors"))
    doc = {
        "format": STATE_FORMAT,
        "version": VERSION,
        "param_groups": opt["param_groups"],
        "optimizer_scalars": scalars,
        "policy": policy.config.to_dict(),
        **state,
    }
    (tmp / "state.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    _replace_dir(tmp, final)
    return final


def load_training_state(path: str | Path, policy: LDARPolicy, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Restore weights, Adam and torch's RNG in place; return the JSON state."""
    p = Path(path)
    doc = json.loads((p / "state.json").read_text(encoding="utf-8"))
    if doc.get("format") != STATE_FORMAT or doc.get("version") != VERSION:
        raise InputError(f"{p} is not an LDAR training state of version {VERSION}")
    if doc["policy"] != policy.config.to_dict():
        raise InputError(
            f"{p} was trained with a different network ({doc['policy']}); use another --output or --overwrite"
        )
    _load_weights(policy, p / WEIGHTS_NAME)
    tensors = load_file(str(p / "optimizer.safetensors"))
    torch.set_rng_state(tensors.pop("torch_rng_state"))
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        idx, name = key.split(".", 1)
        state.setdefault(int(idx), {})[name] = value
    for idx, extra in doc.get("optimizer_scalars", {}).items():
        state.setdefault(int(idx), {}).update(extra)
    groups = doc["param_groups"]
    for g in groups:
        if "betas" in g:
            g["betas"] = tuple(g["betas"])
    optimizer.load_state_dict({"state": state, "param_groups": groups})
    return cast(dict[str, Any], doc)


__all__ = ["load_training_state", "save_training_state"]
