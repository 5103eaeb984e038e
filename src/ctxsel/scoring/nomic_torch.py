"""nomic-bert (nomic-embed-text-v1.5) as a torch module, built from the weights of its f16 GGUF.

Only the ONNX export uses it (:mod:`ctxsel.scoring.nomic_onnx`): it needs torch and the ``gguf``
package, once; the exported graph then runs on onnxruntime alone.

The architecture is llama.cpp's ``nomic-bert`` graph, so the GGUF route is the reference: token
embeddings plus token type 0's, a LayerNorm; then per layer a fused Q/K/V projection (no bias),
rotary position embeddings over the full head (NeoX style: the two halves of a head rotate
together), softmax attention over the unmasked tokens, the output projection, residual and
post-LayerNorm, then a SwiGLU MLP ``down(silu(gate(x)) * up(x))``, residual and post-LayerNorm.
The graph returns the mean over the unmasked tokens, not normalised (the caller applies
Matryoshka and L2 normalisation, as the llama route does). Sizes, eps, heads and the RoPE base come
from the GGUF's ``nomic-bert.*`` metadata, and :func:`read_gguf` refuses any other architecture.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ctxsel.errors import MissingExtraError, ModelError


@dataclass(frozen=True)
class NomicConfig:
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    eps: float
    rope_base: float
    n_ctx_train: int


def _field(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    if field is None:
        raise ModelError(f"the GGUF lacks {key!r}: not a nomic-bert model")
    return field.contents()


def read_gguf(path: str | Path) -> tuple[NomicConfig, dict[str, np.ndarray]]:
    """The model's settings and its tensors as float32 arrays (torch's ``[out, in]`` layout)."""
    try:
        from gguf import GGUFReader
    except ImportError as e:
        raise MissingExtraError("exporting nomic-v1.5 to ONNX (once) needs the gguf package: pip install gguf") from e
    reader = GGUFReader(str(path))
    arch = _field(reader, "general.architecture")
    if arch != "nomic-bert":
        raise ModelError(f"{Path(path).name} is a {arch!r} model, not nomic-bert")
    if _field(reader, "nomic-bert.attention.causal"):
        raise ModelError(f"{Path(path).name} declares causal attention: not the pinned embedder")
    cfg = NomicConfig(
        n_layer=int(_field(reader, "nomic-bert.block_count")),
        n_embd=int(_field(reader, "nomic-bert.embedding_length")),
        n_ff=int(_field(reader, "nomic-bert.feed_forward_length")),
        n_head=int(_field(reader, "nomic-bert.attention.head_count")),
        eps=float(_field(reader, "nomic-bert.attention.layer_norm_epsilon")),
        rope_base=float(_field(reader, "nomic-bert.rope.freq_base")),
        n_ctx_train=int(_field(reader, "nomic-bert.context_length")),
    )
    # GGUF lists a tensor's dimensions fastest first; the data is already laid out [out, in]
    tensors = {
        t.name: np.array(t.data, dtype=np.float32).reshape(tuple(reversed(t.shape.tolist()))) for t in reader.tensors
    }
    return cfg, tensors


def build_module(cfg: NomicConfig, tensors: dict[str, np.ndarray]) -> Any:
    """The torch module (eval mode): ``(input_ids, attention_mask) -> mean-pooled hidden states``."""
    import torch
    from torch import nn

    def param(name: str) -> nn.Parameter:
        if name not in tensors:
            raise ModelError(f"the GGUF lacks the tensor {name!r}: not the nomic-bert layout")
        return nn.Parameter(torch.from_numpy(np.ascontiguousarray(tensors[name])), requires_grad=False)

    def layer_norm(prefix: str) -> nn.LayerNorm:
        ln = nn.LayerNorm(cfg.n_embd, eps=cfg.eps)
        ln.weight, ln.bias = param(f"{prefix}.weight"), param(f"{prefix}.bias")
        return ln

    def linear(name: str) -> nn.Linear:
        w = param(name)
        lin = nn.Linear(w.shape[1], w.shape[0], bias=False)
        lin.weight = w
        return lin

    head_dim = cfg.n_embd // cfg.n_head

    class Block(nn.Module):
        def __init__(self, i: int) -> None:
            super().__init__()
            p = f"blk.{i}"
            self.qkv = linear(f"{p}.attn_qkv.weight")
            self.out = linear(f"{p}.attn_output.weight")
            self.norm1 = layer_norm(f"{p}.attn_output_norm")
            self.up = linear(f"{p}.ffn_up.weight")
            self.gate = linear(f"{p}.ffn_gate.weight")
            self.down = linear(f"{p}.ffn_down.weight")
            self.norm2 = layer_norm(f"{p}.layer_output_norm")

        def forward(self, x: Any, cos: Any, sin: Any, bias: Any) -> Any:
            b, n, _ = x.shape
            q, k, v = self.qkv(x).view(b, n, 3, cfg.n_head, head_dim).permute(2, 0, 3, 1, 4)
            q, k = _rope(q, cos, sin), _rope(k, cos, sin)
            att = torch.softmax(q @ k.transpose(-1, -2) * (1.0 / math.sqrt(head_dim)) + bias, dim=-1)
            ctx = (att @ v).transpose(1, 2).reshape(b, n, cfg.n_embd)
            x = self.norm1(x + self.out(ctx))
            return self.norm2(x + self.down(nn.functional.silu(self.gate(x)) * self.up(x)))

    def _rope(x: Any, cos: Any, sin: Any) -> Any:
        half = head_dim // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    class NomicBert(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            table = tensors["token_embd.weight"]
            self.tok = nn.Embedding(table.shape[0], table.shape[1])
            self.tok.weight = param("token_embd.weight")
            self.register_buffer("type0", torch.from_numpy(np.ascontiguousarray(tensors["token_types.weight"][0])))
            self.norm = layer_norm("token_embd_norm")
            self.blocks = nn.ModuleList(Block(i) for i in range(cfg.n_layer))
            inv = 1.0 / (cfg.rope_base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
            self.register_buffer("inv_freq", inv)

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            n = input_ids.shape[1]
            pos = torch.arange(n, dtype=torch.float32, device=input_ids.device)
            freqs = torch.outer(pos, self.inv_freq)  # type: ignore[arg-type]  # a registered buffer
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos()[None, None], emb.sin()[None, None]
            mask = attention_mask.to(torch.float32)
            bias = ((1.0 - mask) * -1e9)[:, None, None, :]
            x = self.norm(self.tok(input_ids) + self.type0)
            for block in self.blocks:
                x = block(x, cos, sin, bias)
            m = mask.unsqueeze(-1)
            return (x * m).sum(1) / m.sum(1).clamp(min=1.0)

    return NomicBert().eval()


def load_module(path: str | Path) -> tuple[NomicConfig, Any]:
    """The settings and the torch module of the GGUF at ``path``."""
    try:
        import torch  # noqa: F401
    except ImportError as e:
        raise MissingExtraError(
            "exporting nomic-v1.5 to ONNX (once) needs torch: pip install 'ctxsel[embed,onnx]'"
        ) from e
    cfg, tensors = read_gguf(path)
    return cfg, build_module(cfg, tensors)


__all__ = ["NomicConfig", "build_module", "load_module", "read_gguf"]
