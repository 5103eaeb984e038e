"""A transformers causal LM (optionally with a LoRA adapter) as an LLM client.

This is how a picker trained by ``ctxsel train picker`` is used as
``--method context-picker[adapter=PATH]``: the adapter folder's
``picker.json`` names its base model (the bundled Gemma 3 270M GGUF,
de-quantised into PyTorch, or a saved model folder such as the tiny test
model), which is loaded, the adapter applied, and prompts completed with
greedy decoding that stops at the first newline (the picker's stop).

Needs torch, transformers, peft (and gguf for the Gemma base): the
``ctxsel[picker]`` extra.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from ctxsel.errors import MissingExtraError
from ctxsel.llm.base import Completion, Prompt
from ctxsel.llm.local import flatten_prompt
from ctxsel.types import LLMUsage

GEMMA_GGUF = "gemma-270m-gguf"


def _need(what: str) -> None:
    raise MissingExtraError(
        f"{what} is needed for Context-Picker training and trained pickers: pip install 'ctxsel[picker]'"
    )


def load_base(base: str, dtype: str = "float32") -> tuple[Any, Any]:
    """(model, tokenizer) for ``gemma-270m-gguf`` (the bundled GGUF, offline) or a saved model folder."""
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        _need("torch and transformers")
    torch_dtype = getattr(torch, dtype)
    if base == GEMMA_GGUF:
        try:
            import gguf  # noqa: F401
        except ImportError:
            _need("the gguf package")
        from ctxsel.llm.local import bundled_gguf_path

        path = bundled_gguf_path()
        tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch_dtype)
        # transformers de-quantises GGUF tensors into ``dtype`` while loading but keeps a GGUF "quantizer"
        # marker, and its Trainer then refuses to train; the weights are plain tensors, so drop the marker
        quantizer = getattr(model, "hf_quantizer", None)
        if quantizer is not None:
            quantizer.remove_quantization_config(model)
        for module in model.modules():
            cfg = getattr(module, "config", None)
            if cfg is not None and getattr(cfg, "_is_quantized", False):
                cfg._is_quantized = False
        return model, tok
    p = Path(base)
    if not p.is_dir():
        raise FileNotFoundError(f"base model {base!r} is neither {GEMMA_GGUF!r} nor a model folder")
    return AutoModelForCausalLM.from_pretrained(str(p), dtype=torch_dtype), AutoTokenizer.from_pretrained(str(p))


class TransformersClient:
    """``complete(prompt)`` with a transformers model; greedy unless temperature > 0."""

    def __init__(self, model: Any, tokenizer: Any, model_id: str) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.model_id = model_id
        self._lock = threading.Lock()

    @classmethod
    def from_adapter(cls, adapter: str | Path) -> TransformersClient:
        path = Path(adapter)
        meta_path = path / "picker.json"
        if not meta_path.is_file():
            raise FileNotFoundError(
                f"{path} is not a trained picker (no picker.json): train one with `ctxsel train picker`"
            )
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        base = meta["base"]
        if base != GEMMA_GGUF and not Path(base).is_absolute():
            base = str((path / base).resolve())
        model, tok = load_base(base)
        try:
            from peft import PeftModel
        except ImportError:
            _need("peft")
        model = PeftModel.from_pretrained(model, str(path / "adapter"))
        return cls(model, tok, f"transformers:{meta['base']}+lora:{path.resolve().name}:{meta.get('adapter_sha', '')}")

    def cache_identity(self) -> dict[str, Any]:
        return {"model": self.model_id}

    def complete(
        self,
        prompt: Prompt,
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        stop: list[str] | None = None,
        seed: int | None = None,
        **extra: Any,
    ) -> Completion:
        import torch

        text = flatten_prompt(prompt)
        enc = self.tokenizer(text, return_tensors="pt", add_special_tokens=True)
        with self._lock, torch.no_grad():
            if seed is not None:
                torch.manual_seed(seed)
            out = self.model.generate(
                **enc,
                max_new_tokens=max_tokens,
                do_sample=temperature > 0,
                temperature=temperature if temperature > 0 else None,
                pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
                tokenizer=self.tokenizer,
                stop_strings=list(stop) if stop else None,
            )
        new = out[0, enc["input_ids"].shape[1] :]
        reply = self.tokenizer.decode(new, skip_special_tokens=True)
        for s in stop or []:
            if s in reply:
                reply = reply[: reply.index(s)]
        n_in, n_out = int(enc["input_ids"].shape[1]), int(new.shape[0])
        return Completion(reply, LLMUsage(1, n_in, n_out), finish_reason="stop", model=self.model_id)


__all__ = ["GEMMA_GGUF", "TransformersClient", "load_base"]
