"""A trained LoRA adapter (peft's folder) as a llama.cpp LoRA GGUF.

A picker trained by ``ctxsel train context-picker`` is a peft adapter over a bundled
model whose weights came from that model's GGUF. Written as a llama.cpp
adapter, it runs on the same GGUF in llama.cpp: with a grammar on its reply
(transformers here has none), without torch at inference, and with the
prompt-prefix reuse of every other local call. llama.cpp adds the adapter's
product to the quantised base weights as it computes, as QLoRA does; the
adapter was trained on those weights de-quantised, so nothing is
re-quantised or merged.

The file is what llama.cpp's ``convert_lora_to_gguf.py`` writes: general.type
``adapter``, ``adapter.type`` ``lora``, ``adapter.lora.alpha``, and per
adapted weight ``<gguf name>.lora_a`` (peft's lora_A, rank x in) and
``.lora_b`` (lora_B, out x rank) under the base architecture's tensor names.
Only plain LoRA converts (no DoRA, rsLoRA, per-module ranks or alphas, biases
or extra saved modules): anything else is a clear error, never an adapter
that silently computes something else. Architectures whose converter permutes
attention weights (llama's q and k) are refused for the same reason.

Conversions are cached by the adapter's content hash under
``$CTXSEL_CACHE_DIR/adapters/`` (written beside the final name, then renamed).
Needs numpy, safetensors and gguf (``ctxsel[picker]``).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from ctxsel.errors import InputError, MissingExtraError, install_hint
from ctxsel.llm.local import LocalLlamaClient
from ctxsel.paths import files_dir, find_cached

#: Architectures whose GGUF tensors are peft's weights renamed, unpermuted (convert_hf_to_gguf's Qwen2 and Gemma3).
SUPPORTED_ARCHITECTURES = ("qwen2", "gemma3")
_PEFT_PREFIX = "base_model.model."


def _modules() -> tuple[Any, Any, Any]:
    try:
        import gguf
        import numpy as np
        from safetensors.numpy import load_file
    except ImportError:
        raise MissingExtraError(
            "running a trained adapter in llama.cpp converts it once with gguf and safetensors: "
            + install_hint("picker")
        ) from None
    return gguf, np, load_file


def adapter_sha(adapter_dir: Path, base_gguf: Path) -> str:
    """sha256 of the adapter's config and weights and the base file's name: the conversion's cache key."""
    h = hashlib.sha256(base_gguf.name.encode("utf-8"))
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        h.update((adapter_dir / name).read_bytes())
    return h.hexdigest()


def _check_config(cfg: dict[str, Any], where: Path) -> float:
    """lora_alpha of a plain-LoRA peft config; a clear error for anything llama.cpp would compute differently."""
    if cfg.get("peft_type") != "LORA":
        raise InputError(f"{where} is a {cfg.get('peft_type')} adapter: only LoRA runs in llama.cpp")
    unsupported = [
        k
        for k in ("use_dora", "use_rslora", "rank_pattern", "alpha_pattern", "modules_to_save", "layer_replication")
        if cfg.get(k)
    ]
    if cfg.get("bias", "none") != "none":
        unsupported.append("bias")
    if unsupported:
        raise InputError(f"{where} uses {', '.join(unsupported)}: a llama.cpp LoRA adapter is plain LoRA only")
    return float(cfg["lora_alpha"])


def convert(adapter_dir: str | Path, base_gguf: str | Path, out: str | Path) -> Path:
    """Write the peft adapter in ``adapter_dir`` as a llama.cpp LoRA GGUF for ``base_gguf`` at ``out``."""
    gguf, np, load_file = _modules()
    adapter_dir, out = Path(adapter_dir), Path(out)
    cfg = json.loads((adapter_dir / "adapter_config.json").read_text(encoding="utf-8"))
    alpha = _check_config(cfg, adapter_dir)
    base = gguf.GGUFReader(str(base_gguf))
    arch = str(base.get_field("general.architecture").contents())
    if arch not in SUPPORTED_ARCHITECTURES:
        raise InputError(f"{Path(base_gguf).name} is a {arch!r} model: adapters convert for {SUPPORTED_ARCHITECTURES}")
    n_layers = int(base.get_field(f"{arch}.block_count").contents())
    base_shapes = {t.name: tuple(int(d) for d in t.shape) for t in base.tensors}  # GGUF order: (in, out)
    names = gguf.TensorNameMap(next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch), n_layers)
    weights = load_file(str(adapter_dir / "adapter_model.safetensors"))
    pairs: list[tuple[str, Any, Any]] = []
    for key in sorted(weights):
        if ".lora_A." not in key:
            if ".lora_B." not in key:
                raise InputError(f"{adapter_dir} holds {key!r}, which is not a LoRA weight")
            continue
        module = key.split(".lora_A.")[0].removeprefix(_PEFT_PREFIX)
        name = names.get_name(module + ".weight", try_suffixes=(".weight",))
        if name is None or name not in base_shapes:
            raise InputError(f"{adapter_dir}: {module} has no tensor in {Path(base_gguf).name}")
        a, b = weights[key], weights[key.replace(".lora_A.", ".lora_B.")]
        n_in, n_out = base_shapes[name][:2]
        if a.shape[1] != n_in or b.shape[0] != n_out or a.shape[0] != b.shape[1]:
            raise InputError(f"{adapter_dir}: {module}'s LoRA shapes {a.shape} x {b.shape} do not fit {name}")
        pairs.append((name, a, b))
    if not pairs:
        raise InputError(f"{adapter_dir} holds no LoRA weights")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    try:
        writer = gguf.GGUFWriter(tmp_name, arch)
        writer.add_type(gguf.GGUFType.ADAPTER)
        writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
        writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)
        for name, a, b in pairs:
            writer.add_tensor(f"{name}.lora_a", np.ascontiguousarray(a, dtype=np.float32))
            writer.add_tensor(f"{name}.lora_b", np.ascontiguousarray(b, dtype=np.float32))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.chmod(tmp_name, 0o644)
        os.replace(tmp_name, out)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return out


def cached_lora_gguf(adapter_dir: str | Path, base_gguf: str | Path) -> Path:
    """The llama.cpp LoRA GGUF of ``adapter_dir``, converted on first use and cached by content hash."""
    adapter_dir, base_gguf = Path(adapter_dir), Path(base_gguf)
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        if not (adapter_dir / name).is_file():
            raise FileNotFoundError(f"{adapter_dir} is not a peft LoRA adapter (no {name})")
    name = f"lora-{adapter_sha(adapter_dir, base_gguf)[:16]}.gguf"
    ready = find_cached("adapters", name)  # also in a cache folder this process cannot write
    if ready is not None and ready.is_file():
        return ready
    out = files_dir("adapters") / name  # the temporary folder when the cache folder cannot be written
    return out if out.is_file() else convert(adapter_dir, base_gguf, out)


def llama_adapter_client(
    adapter: str | Path, *, n_threads: int | None = None, n_ctx: int | None = None
) -> LocalLlamaClient:
    """A trained picker (``ctxsel train context-picker``'s folder) run by llama.cpp: its bundled base model's GGUF
    with the adapter converted (once) to a llama.cpp LoRA. A picker trained on a model folder has no GGUF:
    run it with transformers (:meth:`ctxsel.llm.hf_client.TransformersClient.from_adapter`)."""
    from ctxsel.llm.hf_client import adapter_meta, bundled_base
    from ctxsel.llm.models import gguf_path

    path = Path(adapter)
    meta = adapter_meta(path)
    name = bundled_base(str(meta["base"]))
    if name is None:
        raise InputError(
            f"{path} was trained on the model folder {meta['base']!r}, which has no GGUF for llama.cpp: "
            "use runtime=transformers"
        )
    base = gguf_path(name)
    lora = cached_lora_gguf(path / "adapter", base)
    return LocalLlamaClient(name, lora=lora, n_threads=n_threads, n_ctx=n_ctx, chat=bool(meta.get("chat", False)))


__all__ = [
    "SUPPORTED_ARCHITECTURES",
    "adapter_sha",
    "cached_lora_gguf",
    "convert",
    "llama_adapter_client",
]
