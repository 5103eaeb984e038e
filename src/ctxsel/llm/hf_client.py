"""A transformers causal LM (optionally with a LoRA adapter) as an LLM client.

This is how a picker trained by ``ctxsel train context-picker`` is used as
``--method context-picker[adapter=PATH]``: the adapter folder's
``picker.json`` names its base model (the bundled Gemma 3 270M GGUF,
or an instruction-tuned Qwen, de-quantised into PyTorch, or a saved model
folder such as the tiny test model), which is loaded, the adapter applied, and prompts completed with
greedy decoding that stops at the first newline (the picker's stop).

Needs torch, transformers, peft (and gguf for the Gemma base): the
``ctxsel[picker]`` extra.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from ctxsel.errors import MissingExtraError, install_hint
from ctxsel.llm.base import Completion, Prompt, normalize_prompt, split_reply_start
from ctxsel.llm.local import flatten_prompt
from ctxsel.types import LLMUsage

GEMMA_GGUF = "gemma-270m-gguf"


def _need(what: str) -> None:
    raise MissingExtraError(
        f"{what} is needed for Context-Picker training and trained pickers: {install_hint('picker')}"
    )


def _torch_dtype(dtype: str) -> Any:
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError:
        _need("torch and transformers")
    return getattr(torch, dtype)


def _from_gguf(path: Path, torch_dtype: Any) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        import gguf  # noqa: F401
    except ImportError:
        _need("the gguf package")
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


def dequantized_folder(name: str) -> Path:
    """A bundled local model (``ctxsel.llm.models``: qwen-0.5b, qwen-1.5b, gemma-270m) as a transformers
    folder: its GGUF de-quantised once (the slow part) and saved in the cache beside it, then loaded from there."""
    from ctxsel.llm.models import get_model, gguf_path

    model_info = get_model(name)
    path = gguf_path(name)
    folder = path.parent / "transformers" / f"{name}-{(model_info.sha256 or 'package')[:12]}"
    if (folder / "config.json").is_file():
        return folder
    import shutil
    import tempfile

    model, tok = _from_gguf(path, _torch_dtype("float32"))
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        model.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache is readable like the GGUF beside it
        tmp.rename(folder)  # atomic: a folder with config.json is complete
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (isinstance(e, OSError) and (folder / "config.json").is_file()):  # lost a rename race: fine
            raise
    return folder


def load_base(base: str, dtype: str = "float32") -> tuple[Any, Any]:
    """(model, tokenizer) for a bundled local model's name (``qwen-0.5b``, ``qwen-1.5b``, ``gemma-270m``;
    ``gemma-270m-gguf`` is the bundled Gemma read straight from its GGUF) or a saved model folder."""
    torch_dtype = _torch_dtype(dtype)  # a clear error when the picker extra is missing
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ctxsel.llm.models import MODELS

    if base == GEMMA_GGUF:
        from ctxsel.llm.local import bundled_gguf_path

        return _from_gguf(bundled_gguf_path(), torch_dtype)
    p = dequantized_folder(base) if base in MODELS else Path(base)
    if not p.is_dir():
        raise FileNotFoundError(
            f"base model {base!r} is neither a bundled model ({', '.join([GEMMA_GGUF, *MODELS])}) nor a model folder"
        )
    return AutoModelForCausalLM.from_pretrained(str(p), dtype=torch_dtype), AutoTokenizer.from_pretrained(str(p))


def bundled_base(base: str) -> str | None:
    """The bundled model (:data:`ctxsel.llm.models.MODELS`) a base names, or None for a model folder."""
    from ctxsel.llm.models import MODELS

    if base == GEMMA_GGUF:
        return "gemma-270m"
    return base if base in MODELS else None


def is_bundled_base(base: str) -> bool:
    """A base named by its bundled model (its adapters store the name, not a path)."""
    return bundled_base(base) is not None


def adapter_meta(path: Path) -> dict[str, Any]:
    """A trained picker folder's ``picker.json`` (its base model, chat flag, adapter hash, how it was trained)."""
    meta_path = path / "picker.json"
    if not meta_path.is_file():
        raise FileNotFoundError(
            f"{path} is not a trained picker (no picker.json): train one with `ctxsel train context-picker`"
        )
    return dict(json.loads(meta_path.read_text(encoding="utf-8")))


def is_chat_base(base: str, tokenizer: Any) -> bool:
    """Whether prompts go through the tokenizer's chat template: a bundled model says so itself
    (the instruction-tuned Qwens do, Gemma 3 270M base does not); a folder does when its tokenizer
    has a chat template."""
    from ctxsel.llm.models import MODELS

    if base == GEMMA_GGUF:
        return False
    if base in MODELS:
        return MODELS[base].chat
    return getattr(tokenizer, "chat_template", None) is not None


def model_text(tokenizer: Any, prompt: Prompt, chat: bool, reply_start: str = "") -> str:
    """The text a model reads for ``prompt``: a chat model gets its chat template (a string prompt is one
    user message) ending where the assistant's reply begins; a base model gets the plain text.

    ``reply_start`` names the first characters of the reply that a prompt may end with (the picker's
    ``{"rationale": "``). A chat model reads them as the start of its own turn: inside the user's
    message the 0.5B Qwen answers with a pretty-printed object whose first line, ``{``, is all a
    one-line reply keeps.
    """
    if not chat:
        return flatten_prompt(prompt)
    prompt, start = split_reply_start(normalize_prompt(prompt), reply_start)
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    return str(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)) + start


class TransformersClient:
    """``complete(prompt)`` with a transformers model; greedy unless temperature > 0; ``reply_start``
    as in :func:`model_text`."""

    def __init__(self, model: Any, tokenizer: Any, model_id: str, chat: bool = False) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.model_id = model_id
        self.chat = chat
        self._lock = threading.Lock()

    @classmethod
    def from_adapter(cls, adapter: str | Path) -> TransformersClient:
        path = Path(adapter)
        meta = adapter_meta(path)
        base = meta["base"]
        if not is_bundled_base(base) and not Path(base).is_absolute():
            base = str((path / base).resolve())
        model, tok = load_base(base)
        try:
            from peft import PeftModel
        except ImportError:
            _need("peft")
        model = PeftModel.from_pretrained(model, str(path / "adapter"))
        model_id = f"transformers:{meta['base']}+lora:{path.resolve().name}:{meta.get('adapter_sha', '')}"
        return cls(model, tok, model_id, chat=bool(meta.get("chat", False)))

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
        reply_start: str = "",
        **extra: Any,
    ) -> Completion:
        import torch

        text = model_text(self.tokenizer, prompt, self.chat, reply_start)
        enc = self.tokenizer(text, return_tensors="pt", add_special_tokens=not self.chat)  # a template has its own
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


__all__ = [
    "GEMMA_GGUF",
    "TransformersClient",
    "adapter_meta",
    "bundled_base",
    "dequantized_folder",
    "is_bundled_base",
    "is_chat_base",
    "load_base",
    "model_text",
]
