"""GRPO with one prompt pass per group: the same log-probabilities, entropies and
LoRA gradients as scoring each prompt + reply as its own sequence (TRL's way),
and the same greedy samples as a plain ``generate``."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")
pytest.importorskip("peft")

import torch

from ctxsel.train.context_picker.shared_prompt import causal_lm, prompt_groups, shared_prompt_logps, supports_sharing
from ctxsel.train.context_picker.tiny_model import make_tiny_model


def _lora_model():
    from peft import LoraConfig, get_peft_model

    model, tok = make_tiny_model(seed=3)
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    return get_peft_model(model, lora), tok


def _reference(model, prompt, replies, mask, temperature):
    """TRL's way: each prompt + reply a sequence of its own, logits of the reply positions."""
    k, n = replies.shape[0], prompt.numel()
    ids = torch.cat([prompt.expand(k, -1), replies], dim=1)
    att = torch.cat([torch.ones(k, n, dtype=torch.long), mask], dim=1)
    logits = model(input_ids=ids, attention_mask=att).logits[:, n - 1 : -1].float() / temperature
    logp = torch.log_softmax(logits, -1)
    return logp.gather(-1, replies.unsqueeze(-1)).squeeze(-1), -(logp.exp() * logp).sum(-1)


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_one_prompt_pass_gives_the_full_sequences_logps_entropies_and_gradients():
    model, _ = _lora_model()
    model.train()
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, 250, (37,), generator=g)
    replies = torch.randint(0, 250, (5, 9), generator=g)
    mask = torch.ones_like(replies)
    mask[1, 6:] = 0  # a reply that ended early: its tail is padding
    mask[3, 2:] = 0
    weights = torch.randn(5, 9, generator=g) * mask

    ref_lp, ref_ent = _reference(model, prompt, replies, mask, 0.7)
    (ref_lp * weights).sum().backward()
    ref_grads = _grads(model)
    model.zero_grad()

    lp, ent = shared_prompt_logps(model, prompt, replies, mask, temperature=0.7, compute_entropy=True)
    (lp * weights).sum().backward()
    grads = _grads(model)

    real = mask.bool()
    assert torch.allclose(lp[real], ref_lp[real], atol=1e-5)
    assert torch.allclose(ent[real], ref_ent[real], atol=1e-5)
    assert torch.isfinite(lp).all()
    assert set(grads) == set(ref_grads) and len(grads) == 8  # lora_A and lora_B of q and v in 2 layers
    for name, grad in ref_grads.items():
        assert grad.abs().sum() > 0
        assert torch.allclose(grads[name], grad, atol=1e-5, rtol=1e-4), name


def test_a_one_token_reply_is_scored_from_the_prompt_alone():
    model, _ = _lora_model()
    prompt, replies = torch.arange(5, 30), torch.tensor([[7], [9]])
    lp, ent = shared_prompt_logps(model, prompt, replies, torch.ones_like(replies))
    ref_lp, _ = _reference(model, prompt, replies, torch.ones_like(replies), 1.0)
    assert ent is None
    assert torch.allclose(lp, ref_lp, atol=1e-5)


def test_prompt_groups_strip_left_padding_and_keep_first_seen_order():
    ids = torch.tensor([[0, 0, 5, 6], [9, 8, 7, 6], [0, 0, 5, 6], [0, 0, 5, 6]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1], [0, 0, 1, 1], [0, 0, 1, 1]])
    groups = prompt_groups(ids, mask)
    assert [(p.tolist(), rows) for p, rows in groups] == [([5, 6], [0, 2, 3]), ([9, 8, 7, 6], [1])]


def test_sharing_is_refused_for_a_model_with_capped_logits():
    model, _ = make_tiny_model()
    assert supports_sharing(model)
    model.config.final_logit_softcapping = 30.0
    assert not supports_sharing(model)


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_shared_prompt_grpo_trains_and_samples_like_plain_generate(tmp_path):
    """A real TRL step through the subclass: greedy samples equal plain generate's, the reward is logged
    and the LoRA weights move."""
    from trl import GRPOConfig, GRPOTrainer

    from ctxsel.train.context_picker.shared_prompt import SharedPromptGRPOTrainer

    model, tok = make_tiny_model(seed=1)
    prompts = ["Alpha beta gamma delta. Which?", "Zeta eta theta. Which one?"]

    def reward(completions, **_):
        return [float(len(c) % 3) for c in completions]

    from datasets import Dataset

    args = GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=6,
        learning_rate=5e-2,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        bf16=False,  # as the picker trainer runs (fp32); TRL's default here would be bf16 autocast
        gradient_checkpointing=True,  # the old name (an alias under transformers 5); the subclass turns it off for good
        seed=0,
    )
    from peft import LoraConfig

    trainer = SharedPromptGRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": prompts * 4}),
        processing_class=tok,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    assert not trainer.args.activation_checkpointing  # it would drop the KV cache the replies read
    ids = [tok(p)["input_ids"] for p in prompts]
    # the trainer's batch layout: left-padded prompts, right-padded replies; the same values as TRL's own path
    pad = tok.pad_token_id
    width = max(map(len, ids))
    rows = [[pad] * (width - len(i)) + i + r for i in ids for r in ([5, 6, 7], [8, pad, pad])]
    mask = [[0] * (width - len(i)) + [1] * len(i) + m for i in ids for m in ([1, 1, 1], [1, 0, 0])]
    batch = torch.tensor(rows), torch.tensor(mask)
    real = batch[1][:, -3:].bool()

    def agrees_with_trl() -> None:
        trainer.model.train()
        mine, mine_ent, _ = trainer._get_per_token_logps_and_entropies(trainer.model, *batch, 3, compute_entropy=True)
        trl_lp, trl_ent, _ = GRPOTrainer._get_per_token_logps_and_entropies(
            trainer, trainer.model, *batch, 3, compute_entropy=True
        )
        assert torch.allclose(mine[real], trl_lp[real], atol=1e-5)
        assert torch.allclose(mine_ent[real], trl_ent[real], atol=1e-4)

    agrees_with_trl()
    trainer.generation_config.do_sample = False
    shared, _ = trainer._generate_single_turn([ids[0]] * 3 + [ids[1]] * 2, None, {}, 3)
    plain = [
        trainer.model.generate(torch.tensor([i]), generation_config=trainer.generation_config)[0, len(i) :].tolist()
        for i in ids
    ]
    for got, want in zip(shared, [plain[0]] * 3 + [plain[1]] * 2, strict=True):
        assert got == want[: len(got)] and len(got) >= 1
    trainer.generation_config.do_sample = True
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n}
    trainer.train()
    after = dict(trainer.model.named_parameters())
    assert any(not torch.equal(before[n], after[n].detach()) for n in before)
    assert [h["reward"] for h in trainer.state.log_history if "reward" in h]
    # Trainer.train() turns on the checkpointing its args ask for; under transformers 5 the old flag's name
    # is an alias it does not read, and the replies were once scored without their prompt from here on
    assert not causal_lm(trainer.model).is_activation_checkpointing
    agrees_with_trl()


def test_shared_logps_refuse_layer_checkpointing():
    """In training, transformers' per-layer recomputation drops the prompt's KV cache: a clear error, not
    log-probabilities of the replies without their prompt."""
    model, _ = make_tiny_model(seed=2)
    model.activation_checkpointing_enable()
    model.train()
    assert model.is_activation_checkpointing
    with pytest.raises(RuntimeError, match="activation checkpointing"):
        shared_prompt_logps(model, torch.tensor([3, 4, 5]), torch.tensor([[6, 7]]), torch.ones(1, 2))
    model.activation_checkpointing_disable()
    lp, _ = shared_prompt_logps(model, torch.tensor([3, 4, 5]), torch.tensor([[6, 7]]), torch.ones(1, 2))
    assert lp.shape == (1, 2) and bool(torch.isfinite(lp).all())
