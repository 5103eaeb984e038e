"""LDAR checkpoints: safetensors for tensors, JSON for everything else.

Loading never unpickles anything (no ``torch.load``): a policy is a folder
with ``config.json`` (format name, version, the network's PolicyConfig and
how it was trained, including the reward) and ``model.safetensors``.

Folders are written beside their final name and renamed into place, so a kill
mid-write leaves the previous checkpoint intact. Training states (for resuming a
run) live with the trainer, in :mod:`ctxsel.train.ldar.checkpoint`.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path
from typing import Any, cast

import torch
from safetensors.torch import load_file, save_file

from ctxsel.errors import InputError
from ctxsel.selectors.ldar.policy import LDARPolicy, PolicyConfig

FORMAT = "ctxsel-ldar-policy"
STATE_FORMAT = "ctxsel-ldar-train-state"
VERSION = 1
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"


def _replace_dir(tmp: Path, final: Path) -> None:
    """Swap ``tmp`` into ``final`` (keeping the old one until the new one is in place)."""
    old = final.with_name(f".{final.name}.old")
    if old.exists():
        shutil.rmtree(old)
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    if old.exists():
        shutil.rmtree(old)


def _fresh_tmp(final: Path) -> Path:
    tmp = final.with_name(f".{final.name}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    return tmp


def _state_dict(policy: LDARPolicy) -> dict[str, torch.Tensor]:
    return {k: v.detach().contiguous().clone() for k, v in policy.state_dict().items()}


def save_policy(path: str | Path, policy: LDARPolicy, training: dict[str, Any] | None = None) -> Path:
    """Write ``path/config.json`` and ``path/model.safetensors``; return ``path``."""
    from ctxsel._version import __version__

    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = _fresh_tmp(final)
    config = {
        "format": FORMAT,
        "version": VERSION,
        "ctxsel_version": __version__,
        "policy": policy.config.to_dict(),
        "training": training or {},
    }
    save_file(_state_dict(policy), str(tmp / WEIGHTS_NAME), metadata={"format": FORMAT, "version": str(VERSION)})
    canonical_header(tmp / WEIGHTS_NAME)
    (tmp / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    _replace_dir(tmp, final)
    return final


def canonical_header(file: Path) -> None:
    """Sort the safetensors header's metadata keys in place. safetensors writes them in hash-map order,
    which changes from process to process, so the same weights gave files with different sha256 (the
    bundled policy's sha256 should follow from its weights alone). The header keeps its length."""
    with file.open("r+b") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        if "__metadata__" in header:
            header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
        text = json.dumps(header, separators=(",", ":")).encode("utf-8")
        if len(text) > n:  # pragma: no cover - reordering keys never lengthens it
            return
        f.seek(8)
        f.write(text + b" " * (n - len(text)))


def resolve_policy_dir(path: str | Path) -> Path:
    """Accept the folder, its config.json or its model.safetensors."""
    p = Path(path)
    if p.is_file() and p.name in (CONFIG_NAME, WEIGHTS_NAME):
        p = p.parent
    if not p.is_dir():
        raise FileNotFoundError(
            f"no LDAR policy at {p}: pass the folder written by `ctxsel train ldar` "
            f"(OUTPUT/policy, holding {CONFIG_NAME} and {WEIGHTS_NAME})"
        )
    for name in (CONFIG_NAME, WEIGHTS_NAME):
        if not (p / name).is_file():
            raise FileNotFoundError(f"LDAR policy folder {p} has no {name}")
    return p


def read_policy_config(path: str | Path) -> dict[str, Any]:
    p = resolve_policy_dir(path)
    try:
        config = json.loads((p / CONFIG_NAME).read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InputError(f"{p / CONFIG_NAME} is not valid JSON ({e.msg})") from None
    if config.get("format") != FORMAT:
        raise InputError(
            f"{p / CONFIG_NAME} is not an LDAR policy (format {config.get('format')!r}, expected {FORMAT!r})"
        )
    if config.get("version") != VERSION:
        raise InputError(
            f"{p} is LDAR policy format version {config.get('version')!r}; this ctxsel reads version {VERSION}"
        )
    return cast(dict[str, Any], config)


def load_policy(path: str | Path) -> tuple[LDARPolicy, dict[str, Any]]:
    """(policy in eval mode, its config.json as a dict)."""
    p = resolve_policy_dir(path)
    config = read_policy_config(p)
    policy = LDARPolicy(PolicyConfig.from_dict(config["policy"]))
    _load_weights(policy, p / WEIGHTS_NAME)
    policy.eval()
    return policy, config


def _load_weights(policy: LDARPolicy, file: Path) -> None:
    tensors = load_file(str(file))
    expected = policy.state_dict()
    missing = sorted(set(expected) - set(tensors))
    extra = sorted(set(tensors) - set(expected))
    if missing or extra:
        raise InputError(f"{file} does not match its config: missing {missing[:3]}, unexpected {extra[:3]}")
    for k, v in tensors.items():
        if v.shape != expected[k].shape:
            raise InputError(f"{file}: {k} has shape {tuple(v.shape)}, the config says {tuple(expected[k].shape)}")
    policy.load_state_dict(tensors)


def atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


__all__ = [
    "FORMAT",
    "VERSION",
    "load_policy",
    "read_policy_config",
    "resolve_policy_dir",
    "save_policy",
]
