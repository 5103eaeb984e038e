"""The bundled reader under transformers, for a GPU: many prompts in one ``generate`` call.

    client = TransformersReaderClient("qwen-1.5b", device="cuda")   # ``ctxsel eval --reader local --device cuda``
    client.complete_many([prompt_a, prompt_b], max_tokens=32, stop=["\\n"])

On a CPU llama.cpp reads one prompt at a time, so an answer table over many
questions and methods is slow to read; a GPU reads a batch of prompts in
about the time of one. This client loads the same GGUF the llama.cpp
reader runs, de-quantised into PyTorch once
(:func:`ctxsel.llm.hf_client.dequantized_folder`), in bf16 on ``cuda`` and
fp32 on ``cpu``, and renders prompts with the chat template stored in that
GGUF (:func:`~ctxsel.llm.hf_client.model_text`), so it reads the text the
llama.cpp reader reads. Decoding is greedy. The answers are not
bit-identical to llama.cpp's (its Q4_K_M arithmetic differs from de-quantised
weights in bf16): docs/archive/results-log.md states the measured share of
identical answers.

``complete_many`` sorts the prompts by length and cuts them into batches of
at most ``batch_size`` prompts and ``max_batch_tokens`` padded tokens, each
left-padded and generated in one call; ``complete`` is a batch of one. The
eval runner hands a reader with ``complete_many`` whole groups of questions
(:mod:`ctxsel.eval.reading`).

A ``reply_format`` (a JSON schema) is not enforced: no constrained-decoding
library is installed offline, so this client reports ``constrained=False``
and the caller's strict parser decides, as for any client that cannot
enforce one (Self-Route's, SAGE's and the untrained picker's replies).

Needs torch, transformers and gguf (the ``ctxsel[picker]`` extra).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ctxsel.errors import InputError
from ctxsel.inputs import as_int
from ctxsel.llm.base import Completion, Prompt, check_window
from ctxsel.llm.batcher import BatchingClient
from ctxsel.llm.hf_client import _torch_dtype, load_base, model_text
from ctxsel.llm.models import DEFAULT_LOCAL_MODEL, MODELS
from ctxsel.types import LLMUsage

#: Where the reader can run: ``cpu`` (fp32) or ``cuda`` (bf16).
DEVICES: tuple[str, ...] = ("cpu", "cuda")
#: Prompts and padded tokens per generate call unless told otherwise, by device.
DEFAULT_BATCH = {"cpu": (8, 8_192), "cuda": (64, 131_072)}


def check_device(device: str) -> str:
    """``device`` if this torch can run on it; else a clear one-line error (no GPU, no CUDA build)."""
    if device not in DEVICES:
        raise InputError(f"unknown device {device!r}: choose {' or '.join(DEVICES)}")
    _torch_dtype("float32")  # a clear error when torch/transformers are missing
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        build = f"torch {torch.__version__}" + ("" if torch.version.cuda else ", a CPU-only build")
        raise InputError(
            f"--device cuda: {build} sees no CUDA GPU; run on a machine with one, or use --device cpu "
            "(or no --device: the llama.cpp reader)"
        )
    return device


class TransformersReaderClient:
    """An :class:`~ctxsel.llm.base.LLMClient` with ``complete_many``: a bundled chat model (or a saved
    model folder, or a ``(model, tokenizer)`` pair) under transformers, greedy, batched.

    ``n_ctx`` is the window (prompt + answer) a prompt must fit, as with the llama.cpp client; by
    default the model's trained window. ``batch_size`` / ``max_batch_tokens`` bound one generate call.
    """

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        device: str = "cpu",
        n_ctx: int | None = None,
        batch_size: int | None = None,
        max_batch_tokens: int | None = None,
        model_and_tokenizer: tuple[Any, Any] | None = None,
        chat: bool | None = None,
    ) -> None:
        model = DEFAULT_LOCAL_MODEL if model is None else model
        if str(model).endswith(".gguf"):
            raise InputError(
                f"the transformers reader runs a bundled model ({', '.join(MODELS)}) or a transformers model "
                f"folder, not the GGUF file {model}: read that with llama.cpp (no --device)"
            )
        self.device = check_device(device)
        import torch

        dtype = "bfloat16" if device == "cuda" else "float32"
        if model_and_tokenizer is not None:
            net, tok = model_and_tokenizer
            net = net.to(device=device, dtype=getattr(torch, dtype))
        else:
            net, tok = load_base(str(model), dtype)
            net = net.to(device)
        self.model = net.eval()
        self.tokenizer = tok
        self.chat = bool(getattr(tok, "chat_template", None)) if chat is None else chat
        name = str(model) if not Path(str(model)).is_dir() else Path(str(model)).name
        self.model_id = f"transformers:{name}:{dtype}"
        trained = int(getattr(net.config, "max_position_embeddings", 0) or 0)
        self.n_ctx = as_int("n_ctx", n_ctx) if n_ctx else trained
        if self.n_ctx < 1:
            raise InputError(f"n_ctx must be >= 1 tokens, got {n_ctx}")
        default_batch, default_tokens = DEFAULT_BATCH[device]
        self.batch_size = as_int("batch_size", batch_size) if batch_size else default_batch
        self.max_batch_tokens = as_int("max_batch_tokens", max_batch_tokens) if max_batch_tokens else default_tokens
        if self.batch_size < 1 or self.max_batch_tokens < 1:
            raise InputError(f"batch_size and max_batch_tokens must be >= 1, got {batch_size}, {max_batch_tokens}")
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        tok.padding_side = "left"  # the answers all start where the prompts end
        self._eos = self._stop_ids()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"TransformersReaderClient({self.model_id!r}, device={self.device!r}, n_ctx={self.n_ctx})"

    def _stop_ids(self) -> list[int]:
        """The end-of-turn tokens: the tokenizer's eos, the generation config's, ChatML's ``<|im_end|>``."""
        ids = {self.tokenizer.eos_token_id}
        cfg = getattr(self.model, "generation_config", None)
        eos = getattr(cfg, "eos_token_id", None)
        ids |= set(eos) if isinstance(eos, (list, tuple)) else {eos}
        for t in ("<|im_end|>", "<|endoftext|>"):
            tid = self.tokenizer.convert_tokens_to_ids(t)
            if isinstance(tid, int) and tid != self.tokenizer.unk_token_id:
                ids.add(tid)
        return sorted(i for i in ids if isinstance(i, int) and i >= 0)

    def cache_identity(self) -> dict[str, Any]:
        return {"model": self.model_id, "n_ctx": self.n_ctx, "chat": self.chat}

    def render(self, prompt: Prompt, reply_start: str = "") -> str:
        """The text the model reads: its chat template, as the llama.cpp reader renders it."""
        return model_text(self.tokenizer, prompt, self.chat, reply_start)

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` in this model's vocabulary (special tokens parsed), for the reader's window."""
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def count_prompt_tokens(self, prompt: Prompt) -> int:
        return self.count_tokens(self.render(prompt))

    def complete(self, prompt: Prompt, **kw: Any) -> Completion:
        return self.complete_many([prompt], **kw)[0]

    def complete_many(
        self,
        prompts: Sequence[Prompt],
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        stop: list[str] | None = None,
        seed: int | None = None,
        reply_start: str = "",
        **extra: Any,
    ) -> list[Completion]:
        """One reply per prompt, in order; greedy (``temperature`` > 0 is refused: answers must repeat)."""
        if temperature > 0:
            raise InputError("the transformers reader decodes greedily: pass temperature=0")
        extra.pop("reply_format", None)  # not enforced here: the caller's strict parser decides
        texts = [self.render(p, reply_start) for p in prompts]
        ids = [self.tokenizer(t, add_special_tokens=not self.chat)["input_ids"] for t in texts]
        for n in map(len, ids):
            check_window(n, max_tokens, self.n_ctx, self.model_id)
        out: list[Completion | None] = [None] * len(ids)
        for batch in self._batches(ids, max_tokens):
            for i, c in zip(batch, self._generate([ids[i] for i in batch], max_tokens, stop or []), strict=True):
                out[i] = c
        return [c for c in out if c is not None]

    def _batches(self, ids: list[list[int]], max_tokens: int) -> list[list[int]]:
        """Indices of ``ids`` in batches of similar length (longest first), each within both bounds."""
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        batches: list[list[int]] = []
        for i in order:
            cur = batches[-1] if batches else None
            width = len(ids[cur[0]]) + max_tokens if cur else 0  # the first of a batch is its longest
            if cur and len(cur) < self.batch_size and width * (len(cur) + 1) <= self.max_batch_tokens:
                cur.append(i)
            else:
                batches.append([i])
        return batches

    def _generate(self, batch: list[list[int]], max_tokens: int, stop: list[str]) -> list[Completion]:
        import torch

        enc = self.tokenizer.pad({"input_ids": batch}, padding=True, return_tensors="pt").to(self.device)
        with self._lock, torch.inference_mode():
            gen = self.model.generate(
                **enc,
                max_new_tokens=max_tokens,
                do_sample=False,
                temperature=None,
                top_p=None,
                top_k=None,
                eos_token_id=self._eos,
                pad_token_id=self.tokenizer.pad_token_id,
                tokenizer=self.tokenizer,
                stop_strings=list(stop) or None,
            )
        width = enc["input_ids"].shape[1]
        replies = []
        for row, prompt_ids in zip(gen[:, width:].tolist(), batch, strict=True):
            new = _until_stop_token(row, self._eos)
            text = self.tokenizer.decode(new, skip_special_tokens=True)
            cut = [text.index(s) for s in stop if s in text]
            ended = bool(cut) or len(new) < len(row) or len(new) < max_tokens
            replies.append(
                Completion(
                    text[: min(cut)] if cut else text,
                    LLMUsage(1, len(prompt_ids), len(new)),
                    finish_reason="stop" if ended else "length",
                    model=self.model_id,
                )
            )
        return replies


def batching_reader(
    model: str | Path | None, device: str, n_ctx: int | None = None, batch_size: int | None = None
) -> BatchingClient:
    """``--reader local --device D``: the transformers reader behind a :class:`BatchingClient`, so the
    methods that ask it while selecting, one thread a question, are answered in batches too."""
    return BatchingClient(TransformersReaderClient(model, device=device, n_ctx=n_ctx, batch_size=batch_size))


def _until_stop_token(row: list[int], stops: list[int]) -> list[int]:
    """A generated row up to (not including) its first end-of-turn token; the padding after it goes too."""
    for j, t in enumerate(row):
        if t in stops:
            return row[:j]
    return row


__all__ = ["DEFAULT_BATCH", "DEVICES", "TransformersReaderClient", "batching_reader", "check_device"]
