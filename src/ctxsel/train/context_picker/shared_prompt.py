"""GRPO that reads each question's prompt once for its whole group of samples.

In GRPO every question is sampled K times (the group), and TRL scores each
sample as its own sequence: prompt + reply. The picker's prompt is long and a
reply short, so K - 1 of every K prompt passes (in sampling, in
the reference and policy log-probabilities, and in the backward pass) repeat
work already done. Here the prompt runs once; its key/value cache is repeated
K times and the replies are read on top of it, in one batch. Autograd sums the
K replies' gradients into the one prompt pass, so the log-probabilities and
their gradients are those of the full sequences (``tests/train/test_shared_prompt.py``
checks both against the full sequences, and the trainer's against TRL's path,
to 1e-5). What differs: LoRA dropout draws one mask for the shared prompt
instead of K, and sampling uses another random stream.

Activations are recomputed in the backward pass per group
(``torch.utils.checkpoint``), as TRL's gradient checkpointing does per
sequence, so memory holds one group's graph at a time.

Falls back to TRL's own path wherever this does not apply: vLLM or continuous
batching, images, MoE auxiliary losses, or a model whose logits are capped or
scaled.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch.utils.checkpoint import checkpoint
from transformers import DynamicCache
from trl import GRPOTrainer  # type: ignore[attr-defined]  # lazily exported by trl
from trl.kernels.chunked_logprob import ChunkedLogProbFunction
from trl.models.utils import unwrap_model_for_generation

#: vocabulary columns per tile of the chunked head (TRL's own setting)
HEAD_CHUNK = 32768


def causal_lm(model: Any) -> Any:
    """The transformers causal LM inside a peft wrapper (LoRA layers are injected in place, so they stay active)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def supports_sharing(model: Any) -> bool:
    """Whether the shared path computes exactly what the model's own head does (plain ``lm_head(h) / T``)."""
    cfg = causal_lm(model).config.get_text_config()
    scaled = ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier", "logits_scaling")
    return all(getattr(cfg, name, None) in (None, 1, 1.0) for name in scaled)


def shared_prompt_logps(
    model: Any,
    prompt: torch.Tensor,
    replies: torch.Tensor,
    reply_mask: torch.Tensor,
    temperature: float = 1.0,
    compute_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probabilities (and entropies) of each token of ``replies`` (K, L) after one ``prompt`` (P,).

    Returns tensors of shape (K, L); positions after a reply's end
    (``reply_mask`` 0) hold finite values that the loss masks out.
    """
    lm = causal_lm(model)
    if lm.training and lm.is_activation_checkpointing:
        raise RuntimeError(
            "transformers' activation checkpointing is on: in training it drops the prompt's KV cache, so the "
            "replies would be scored without their prompt; turn it off (model.activation_checkpointing_disable())"
        )
    backbone = getattr(lm, lm.base_model_prefix)
    k, length = replies.shape
    cache = DynamicCache(config=lm.config)
    last = backbone(input_ids=prompt[None], past_key_values=cache, use_cache=True).last_hidden_state[:, -1:]
    hidden = last.expand(k, 1, last.size(-1))  # the prompt's last position predicts each reply's first token
    if length > 1:
        cache.batch_repeat_interleave(k)
        n = prompt.numel()
        body = backbone(
            input_ids=replies[:, :-1],
            attention_mask=torch.cat([reply_mask.new_ones(k, n), reply_mask[:, :-1]], dim=1),
            position_ids=torch.arange(n, n + length - 1, device=replies.device).expand(k, -1),
            past_key_values=cache,
            use_cache=True,
        ).last_hidden_state
        hidden = torch.cat([hidden, body], dim=1)
    head = lm.get_output_embeddings()
    # TRL's own head, so the (K, L, vocabulary) logits never exist at once
    logps, entropy, *_ = ChunkedLogProbFunction.apply(  # type: ignore[no-untyped-call]
        hidden.reshape(k * length, -1),
        head.weight,
        head.bias,
        replies.reshape(-1),
        temperature,
        HEAD_CHUNK,
        None,
        1.0,
        ("entropy",) if compute_entropy else (),
    )
    return logps.view(k, length), None if entropy is None else entropy.view(k, length)


def prompt_groups(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> list[tuple[torch.Tensor, list[int]]]:
    """(the prompt without its left padding, the rows that share it), in first-seen order."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for row in range(prompt_ids.size(0)):
        key = tuple(prompt_ids[row][prompt_mask[row].bool()].tolist())
        groups.setdefault(key, []).append(row)
    return [(torch.tensor(key, dtype=prompt_ids.dtype, device=prompt_ids.device), rows) for key, rows in groups.items()]


class SharedPromptGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer with each distinct prompt read once per step (see the module doc).

    transformers' own gradient checkpointing drops a layer's KV cache, which the
    replies read, so it is turned off here; each group is recomputed instead.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        train_args = kwargs.get("args")
        # transformers 5 renamed the flag; the old name is an alias that ``Trainer.train`` no longer reads
        for name in ("activation_checkpointing", "gradient_checkpointing"):
            if getattr(train_args, name, None):
                setattr(train_args, name, False)
        super().__init__(*args, **kwargs)

    def _shares(self, inputs_besides_text: Any = ()) -> bool:
        """One process, text only, a plain head: what the shared path computes exactly."""
        return (
            self.accelerator.num_processes == 1
            and not any(v is not None for v in inputs_besides_text)
            and supports_sharing(self.model)
        )

    def _get_per_token_logps_and_entropies(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        batch_size: int | None = None,
        compute_entropy: bool = False,
        compute_aux_loss: bool = False,
        **multimodal: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        if compute_aux_loss or not self._shares(multimodal.values()):
            return super()._get_per_token_logps_and_entropies(  # type: ignore[no-any-return]
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss,
                **multimodal,
            )  # fmt: skip
        replies, reply_mask = input_ids[:, -logits_to_keep:], attention_mask[:, -logits_to_keep:]
        out_logps, out_ent, rows_of = [], [], []
        for prompt, rows in prompt_groups(input_ids[:, :-logits_to_keep], attention_mask[:, :-logits_to_keep]):
            args = (model, prompt, replies[rows], reply_mask[rows], self.temperature, compute_entropy)
            with self.accelerator.autocast():  # as TRL's own path (bf16 / fp16 mixed precision)
                if torch.is_grad_enabled() and model.training:
                    lp, ent = checkpoint(shared_prompt_logps, *args, use_reentrant=False)
                else:
                    lp, ent = shared_prompt_logps(*args)
            out_logps.append(lp)
            out_ent.append(ent)
            rows_of.extend(rows)
        back = torch.argsort(torch.tensor(rows_of, device=input_ids.device))  # group order -> batch order
        logps = torch.cat(out_logps)[back]
        entropies = torch.cat(out_ent)[back] if compute_entropy else None
        return logps, entropies, None

    def _generate_single_turn(
        self, prompt_ids: Any, images: Any, multimodal_fields: Any, num_generations: Any, has_tool_images: Any = False
    ) -> Any:
        if (
            self.use_vllm
            or self.use_transformers_continuous_batching
            or multimodal_fields
            or not self._shares([images])
        ):
            return super()._generate_single_turn(  # type: ignore[no-untyped-call]
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images
            )
        args = cast(Any, self.args)  # TRL's GRPOConfig fields on a TrainingArguments annotation
        device = self.accelerator.device
        eos = set(self.eos_token_ids)
        completions: list[list[int]] = [[] for _ in prompt_ids]
        order: dict[tuple[int, ...], list[int]] = {}
        for i, ids in enumerate(prompt_ids):
            order.setdefault(tuple(ids), []).append(i)
        with (
            unwrap_model_for_generation(
                self.model_wrapped,
                self.accelerator,
                gather_deepspeed3_params=args.ds3_gather_for_generation,
                generation_kwargs=self.generation_kwargs,
                gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs,
            ) as unwrapped,
            torch.no_grad(),
        ):
            for key, rows in order.items():
                prompt = torch.tensor([key], device=device)
                cache = DynamicCache(config=causal_lm(unwrapped).config)
                if prompt.size(1) > 1:  # the prompt but its last token; generate reads that one and samples
                    unwrapped(input_ids=prompt[:, :-1], past_key_values=cache, use_cache=True, logits_to_keep=1)
                    cache.batch_repeat_interleave(len(rows))
                out = unwrapped.generate(
                    input_ids=prompt.expand(len(rows), -1),
                    attention_mask=torch.ones(len(rows), prompt.size(1), dtype=torch.long, device=device),
                    past_key_values=cache,
                    generation_config=self.generation_config,
                )
                for row, seq in zip(rows, out[:, prompt.size(1) :].tolist(), strict=True):
                    end = next((j for j, t in enumerate(seq) if t in eos), len(seq) - 1)
                    completions[row] = seq[: end + 1]
        return completions, None


__all__ = ["SharedPromptGRPOTrainer", "prompt_groups", "shared_prompt_logps", "supports_sharing"]
