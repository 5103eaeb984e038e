"""Two-stage GRPO training of the picker (paper Sec. 3.3, Algorithm 2) with TRL's GRPOTrainer.

Stage 1 (recall) trains LoRA adapters on the stage-1 prompt with the
stage-1 reward (:data:`~.reward.STAGE1`) until the validation reward
plateaus (or ``stage1_max_steps``); stage 2 (precision) continues from the
stage-1 adapters with the stage-2 prompt and reward for ``stage2_steps``.
Each stage saves its adapter (``OUT/stage{i}/``, usable as
``context-picker[adapter=OUT/stage{i}]``) and the reward curves go to
``OUT/reward_curves.{json,png}`` (training reward per step, validation
reward every ``eval_every`` steps, gradient norm, share of valid replies).

GRPO itself is TRL's: group sampling (``num_generations`` = the paper's
group size K), group-normalised advantages, the clipped ratio objective
with decoupled clipping (``epsilon`` low, ``epsilon_high`` high) and a KL
weight ``beta``. ``num_iterations = 1`` and one optimiser step per
generation batch make pi_old the policy that sampled, as in Algorithm 2.

Choices where the paper is silent (all in :class:`PickerTrainConfig`):

- group size K = 8, 2 questions per step, LoRA r = 16, alpha = 32 on the
  attention projections, learning rate 1e-4 (a usual LoRA rate), sampling
  temperature 1.0, replies up to 160 tokens (as the picker allows at inference);
- ``beta = 0`` (no KL term) with ``epsilon = 0.2`` and ``epsilon_high =
  0.28``: the decoupled, asymmetric clipping the paper names comes from
  DAPO, which drops the KL term; ``--beta`` restores it;
- plateau: the validation reward (greedy replies on held-out training
  questions) has not improved by ``min_delta = 0.01`` for ``patience = 3``
  evaluations;
- a reply ends at its first newline (the newline token is an end-of-reply
  token during sampling, as the ``\\n`` stop string is at inference);
- candidate pools are built exactly as at inference (:func:`.picker.candidate_pool`);
  S_gold chunks that fall outside a question's pool are dropped from its
  target, and questions with none left are skipped (counted), so training
  sees the inference distribution;
- activations are recomputed in the backward pass: on a 24 GB CPU machine
  memory is the limit, not compute; without it a group of 4 replies to a
  1,200-token prompt on the 0.5B Qwen grew to 21 GB and was killed;
- not in TRL: each question's prompt is read once for its K samples
  (:mod:`ctxsel.train.shared_prompt`, ``share_prompt``, on by default), with
  the same log-probabilities and gradients; ``--no-share-prompt`` is TRL's
  own path;
- optional, not in the paper: ``shuffle_candidates`` shows a share of the training
  prompts' pools in a random order (gold renumbered). On ranked pools the 0.5B
  learned the retriever's order, not the passages: after 28 GRPO steps it named
  candidates 1 and 2 for 17 of 20 held-out questions (docs/methods/context-picker.md);
- ``init_adapter`` goes on training a saved adapter, so that short GPU leases add
  up to a longer run (with a KL term TRL's reference is then that adapter);
- an optional supervised format warm-up (``warmup_steps``, off by default,
  not in the paper) teaches a base model the reply format on S_gold before
  GRPO: a base model whose every sample is invalid gets reward -1 for the
  whole group, a zero advantage and so no gradient at all.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ctxsel.errors import InputError, InvalidReply
from ctxsel.llm.hf_client import is_bundled_base, is_chat_base, load_base, model_text
from ctxsel.plotting import pyplot
from ctxsel.selectors.context_picker.picker import candidate_pool
from ctxsel.selectors.context_picker.prompt import PREFILL, parse_reply, render_prompt
from ctxsel.train.picker_config import PickerTrainConfig
from ctxsel.train.picker_reward import STAGES, PickerReward, picker_reward
from ctxsel.types import Example

TINY = "tiny"
WARMUP_RATIONALE = "They hold the evidence."


# -- data -----------------------------------------------------------------------------------------


def picker_rows(
    records: Sequence[dict[str, Any]],
    examples: dict[str, Example],
    scorer: Any,
    n_tokens: int = 2000,
    max_candidates: int = 20,
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Training rows ``{query_id, question, passages, gold}`` (gold: 1-based numbers in the pool).

    ``records`` are mined records, already expanded with rewrites
    (:func:`.rewrite.split_records`); the pool is built for each question
    variant with ``scorer``, as the picker builds it at inference.
    """
    import numpy as np

    rows, skipped, trimmed = [], 0, 0
    for r in records:
        qid = r.get("query_id", r["id"])
        ex = examples[qid]
        scores = np.asarray(scorer.score(r["question"], ex.chunks), dtype=np.float64)
        pool = candidate_pool(r["question"], ex.chunks, scores, n_tokens, max_candidates)
        pos = {cid: i + 1 for i, cid in enumerate(pool.ids)}
        gold = [pos[c] for c in r["s_gold"] if c in pos]
        if not gold:
            skipped += 1
            continue
        trimmed += len(gold) < len(r["s_gold"])
        rows.append(
            {"query_id": qid, "question": r["question"], "passages": [c.text for c in pool.chunks], "gold": gold}
        )
    return rows, {"rows": len(rows), "skipped_no_gold_in_pool": skipped, "gold_partly_outside_pool": trimmed}


def prompt_text(tokenizer: Any, row: dict[str, Any], stage: int, chat: bool) -> str:
    """The text a model reads for ``row``'s picker prompt: what inference sends (the plain prompt,
    ending in the prefill), through the chat template when the base is a chat model."""
    return model_text(tokenizer, render_prompt(row["question"], row["passages"], stage), chat, PREFILL)


def prompt_ids(tokenizer: Any, row: dict[str, Any], stage: int, chat: bool) -> list[int]:
    """:func:`prompt_text` as token ids (a chat template brings its own special tokens)."""
    return list(tokenizer(prompt_text(tokenizer, row, stage, chat), add_special_tokens=not chat)["input_ids"])


def shuffled_row(row: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """``row`` with its candidates in a random order and its gold numbers following them."""
    order = list(range(len(row["passages"])))
    rng.shuffle(order)
    number = {old + 1: new + 1 for new, old in enumerate(order)}
    return {**row, "passages": [row["passages"][i] for i in order], "gold": [number[g] for g in row["gold"]]}


def _dataset(rows: Sequence[dict[str, Any]], stage: int, tokenizer: Any, chat: bool, shuffle: float = 0.0) -> Any:
    from datasets import Dataset

    rng = random.Random(stage)  # the same prompts for a stage whatever ran before it
    shown = [shuffled_row(r, rng) if shuffle and rng.random() < shuffle else r for r in rows]
    return Dataset.from_list(
        [
            {
                "prompt": prompt_text(tokenizer, r, stage, chat),
                "gold": r["gold"],
                "n_candidates": len(r["passages"]),
            }
            for r in shown
        ]
    )


# -- reward for TRL -------------------------------------------------------------------------------


def _reply_text(completion: Any) -> str:
    text = completion if isinstance(completion, str) else completion[-1]["content"]
    return text.split("\n", 1)[0]  # a reply ends at its first newline, as at inference


def score_reply(text: str, gold: Sequence[int], n_candidates: int, stage: int) -> tuple[float, bool]:
    """(reward, valid) of one sampled reply against the 1-based gold numbers."""
    gold_ids = [str(g) for g in gold]
    try:
        ids = parse_reply(_reply_text(text), n_candidates).ids
    except InvalidReply:
        return picker_reward(None, gold_ids, stage), False
    return picker_reward([str(i) for i in ids], gold_ids, stage), True


class TRLPickerReward:
    """The stage reward in TRL's reward-function shape:
    ``(prompts, completions, gold, n_candidates) -> list[float]``."""

    def __init__(self, stage: int) -> None:
        self.stage = stage
        self.__name__ = f"picker_stage{stage}"
        self.valid: list[float] = []  # share of valid replies per call (one call per generation batch)

    def __call__(
        self, prompts: list[Any], completions: list[Any], gold: list[list[int]], n_candidates: list[int], **kw: Any
    ) -> list[float]:
        scored = [score_reply(c, g, n, self.stage) for c, g, n in zip(completions, gold, n_candidates)]
        self.valid.append(sum(v for _, v in scored) / max(1, len(scored)))
        return [r for r, _ in scored]


# -- models -----------------------------------------------------------------------------------------


def make_tiny_model(seed: int = 0) -> tuple[Any, Any]:
    """A 2-layer Llama (hidden 64) with a byte-level tokenizer built in process: fast GRPO on CPU in tests."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    for special in ("<pad>", "<bos>", "<eos>"):
        vocab[special] = len(vocab)
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tk.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>")
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config), tok


def newline_ends_replies(model: Any, tokenizer: Any) -> None:
    """Make the newline token an end-of-reply token for generation (and TRL's completion mask)."""
    ids = tokenizer.encode("\n", add_special_tokens=False)
    eos = model.generation_config.eos_token_id
    eos = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in eos:
        eos.insert(0, tokenizer.eos_token_id)
    if len(ids) == 1 and ids[0] not in eos:
        eos.append(ids[0])
    model.generation_config.eos_token_id = eos
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.generation_config.pad_token_id = tokenizer.pad_token_id


def _target(gold: Sequence[int]) -> str:
    return WARMUP_RATIONALE + '", "ids": ' + json.dumps(list(gold)) + "}\n"


def format_warmup(
    model: Any, tokenizer: Any, rows: Sequence[dict[str, Any]], steps: int, lr: float, seed: int = 0, chat: bool = False
) -> list[float]:
    """Supervised steps on ``prompt -> {rationale, S_gold}`` (loss on the reply only); returns the losses.

    Each step takes a random row and a random stage's prompt, so both
    stages' prompts know the format.
    """
    import torch

    if steps <= 0 or not rows:
        return []
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr)
    rng = random.Random(seed)
    model.train()
    losses = []
    for _ in range(steps):
        r = rng.choice(list(rows))
        stage = rng.choice((1, 2))
        prompt = prompt_ids(tokenizer, r, stage, chat)
        target_ids = tokenizer(_target(r["gold"]), add_special_tokens=False)["input_ids"]
        ids = torch.tensor([prompt + target_ids], device=model.device)
        labels = torch.tensor([[-100] * len(prompt) + target_ids], device=model.device)
        loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses


def greedy_replies(
    model: Any,
    tokenizer: Any,
    rows: Sequence[dict[str, Any]],
    stage: int,
    max_new_tokens: int,
    chat: bool = False,
    batch_size: int = 8,
    progress: bool = False,
) -> list[str]:
    """Greedy replies (up to the first newline) to ``rows``' picker prompts, ``batch_size`` at a time,
    left-padded on the model's device."""
    import torch
    from tqdm.auto import tqdm

    was_training = model.training
    model.eval()
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    replies: list[str] = []
    try:
        with torch.no_grad():
            starts = range(0, len(rows), batch_size)
            for i in tqdm(starts, desc="picks", unit="batch", disable=not progress):
                texts = [prompt_text(tokenizer, r, stage, chat) for r in rows[i : i + batch_size]]
                enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=not chat).to(model.device)
                out = model.generate(
                    **enc, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id
                )
                new = out[:, enc["input_ids"].shape[1] :]
                replies += [_reply_text(tokenizer.decode(o, skip_special_tokens=True)) for o in new]
    finally:
        tokenizer.padding_side = side
        if was_training:
            model.train()
    return replies


def validation_reward(
    model: Any, tokenizer: Any, rows: Sequence[dict[str, Any]], stage: int, max_new_tokens: int, chat: bool = False
) -> dict[str, float]:
    """Mean reward and share of valid replies of greedy replies on ``rows``."""
    if not rows:
        return {"reward": math.nan, "valid": math.nan}
    scored = [
        score_reply(text, r["gold"], len(r["passages"]), stage)
        for text, r in zip(greedy_replies(model, tokenizer, rows, stage, max_new_tokens, chat), rows)
    ]
    return {"reward": sum(s for s, _ in scored) / len(scored), "valid": sum(v for _, v in scored) / len(scored)}


# -- the stages -------------------------------------------------------------------------------------


def _callback(
    stage: int,
    val_rows: Sequence[dict[str, Any]],
    tokenizer: Any,
    cfg: PickerTrainConfig,
    curve: dict[str, Any],
    stop_on_plateau: bool,
    chat: bool,
) -> Any:
    from transformers import TrainerCallback

    limit = cfg.stage2_seconds if stage == 2 and cfg.stage2_seconds >= 0 else cfg.stage_seconds

    class StageCallback(TrainerCallback):
        """Validation reward at the start, every ``eval_every`` steps (plateau stop) and at the end (a
        stage cut by its time limit still shows where it got), the wall time of each step and the
        stage's time limit."""

        best = -math.inf
        since_best = 0

        def _validate(self, step: int, model: Any) -> dict[str, float]:
            v = validation_reward(model, tokenizer, val_rows, stage, cfg.max_completion_length, chat)
            curve["val"].append({"step": step, **v})
            return v

        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            self.started = time.perf_counter()
            if val_rows:
                v = self._validate(state.global_step, model)
                self.best = v["reward"]

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.t0 = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            seconds = time.perf_counter() - self.t0
            curve["seconds"].append({"step": state.global_step, "seconds": seconds})
            if os.environ.get("TQDM_DISABLE") == "1":  # no progress bar: a line per step (a CPU step takes minutes)
                print(f"stage {stage}: step {state.global_step} took {seconds:.0f} s", file=sys.stderr, flush=True)
            if limit and time.perf_counter() - self.started >= limit:
                curve["stopped"] = f"time limit of {limit:g} s reached at step {state.global_step}"
                control.should_training_stop = True
            if not val_rows or cfg.eval_every <= 0 or state.global_step % cfg.eval_every:
                return
            v = self._validate(state.global_step, model)
            if v["reward"] > self.best + cfg.min_delta:
                self.best, self.since_best = v["reward"], 0
            else:
                self.since_best += 1
                if stop_on_plateau and self.since_best >= cfg.patience:
                    curve["stopped"] = f"validation reward plateaued at step {state.global_step}"
                    control.should_training_stop = True

        def on_train_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            if val_rows and curve["val"][-1]["step"] != state.global_step:
                self._validate(state.global_step, model)

    return StageCallback()


def run_stage(
    model: Any,
    tokenizer: Any,
    stage: int,
    train_rows: Sequence[dict[str, Any]],
    val_rows: Sequence[dict[str, Any]],
    steps: int,
    cfg: PickerTrainConfig,
    out: Path,
    peft_config: Any = None,
    stop_on_plateau: bool = False,
    chat: bool = False,
) -> tuple[Any, dict[str, Any]]:
    """One GRPO stage with TRL's GRPOTrainer; returns (the trained peft model, its curve)."""
    import torch
    from trl import GRPOConfig, GRPOTrainer  # type: ignore[attr-defined]  # lazily exported by trl

    curve: dict[str, Any] = {
        "stage": stage,
        "reward": asdict(STAGES[stage]),
        "train": [],
        "val": [],
        "grad_norm": [],
        "seconds": [],  # wall time of each GRPO step (sampling, scoring, the update)
    }
    reward_fn = TRLPickerReward(stage)
    batch = cfg.num_generations * cfg.prompts_per_step
    args = GRPOConfig(
        output_dir=str(out / f"stage{stage}" / "trainer"),
        max_steps=steps,
        learning_rate=cfg.lr,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        num_generations=cfg.num_generations,
        num_iterations=1,
        max_completion_length=cfg.max_completion_length,
        temperature=cfg.temperature,
        beta=cfg.beta,
        epsilon=cfg.epsilon,
        epsilon_high=cfg.epsilon_high,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        bf16=False,
        fp16=False,
        # see the module doc: memory, not compute, is the limit on a CPU (the shared-prompt trainer turns
        # transformers' recomputation off and recomputes per group instead)
        activation_checkpointing=True,
        use_cpu=not torch.cuda.is_available(),
        seed=cfg.seed,
        remove_unused_columns=False,
        dataloader_num_workers=0,
        disable_tqdm=os.environ.get("TQDM_DISABLE") == "1",  # what `ctxsel train --no-progress` sets
    )
    trainer_cls = GRPOTrainer
    if cfg.share_prompt:
        from ctxsel.train.shared_prompt import SharedPromptGRPOTrainer

        trainer_cls = SharedPromptGRPOTrainer
    trainer = trainer_cls(
        model=model,
        reward_funcs=[reward_fn],  # type: ignore[list-item]  # a callable object; TRL's hint wants a function
        args=args,
        train_dataset=_dataset(train_rows, stage, tokenizer, chat, cfg.shuffle_candidates),
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[_callback(stage, val_rows, tokenizer, cfg, curve, stop_on_plateau, chat)],
    )
    trainer.train()
    for i, log in enumerate(h for h in trainer.state.log_history if "reward" in h):
        step = int(log.get("step", i + 1))
        # the norm before clipping (max_grad_norm 1.0), as the Trainer logs it: after clipping it is <= 1 always
        curve["grad_norm"].append({"step": step, "grad_norm": float(log.get("grad_norm", math.nan))})
        curve["train"].append(
            {
                "step": step,
                "reward": float(log["reward"]),
                "reward_std": float(log.get("reward_std", math.nan)),
                "valid": reward_fn.valid[i] if i < len(reward_fn.valid) else None,
            }
        )
    curve["steps"] = int(trainer.state.global_step)
    return trainer.model, curve


def _init_adapter(path: str, base_ref: str) -> tuple[Path, str]:
    """The stage folder an ``init_adapter`` names, checked: a trained adapter on this run's base."""
    folder = Path(path)
    meta_file = folder / "picker.json"
    if not (folder / "adapter" / "adapter_config.json").is_file() or not meta_file.is_file():
        raise InputError(
            f"--init-adapter {path}: not a trained picker's stage folder (it needs adapter/ and picker.json, "
            "as OUTPUT/stage1 or OUTPUT/stage2 of `ctxsel train picker`)"
        )
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    if meta.get("base") != base_ref:
        raise InputError(f"--init-adapter {path} was trained on base {meta.get('base')!r}, this run's is {base_ref!r}")
    return folder, str(meta.get("adapter_sha", ""))


def _save_stage(model: Any, out: Path, stage: int, base_ref: str, cfg: PickerTrainConfig, info: dict[str, Any]) -> Path:
    import hashlib

    folder = out / f"stage{stage}"
    model.save_pretrained(str(folder / "adapter"))
    h = hashlib.sha256()
    # with a KL term TRL keeps the reference as a second adapter, saved in a subfolder (adapter/ref)
    for f in sorted(p for p in (folder / "adapter").rglob("*") if p.is_file()):
        h.update(f.read_bytes())
    meta = {
        "base": base_ref,
        "stage": stage,
        "reward": PickerReward(stage).describe(),
        "config": asdict(cfg),
        "adapter_sha": h.hexdigest()[:16],
        **info,
    }
    (folder / "picker.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return folder


def plot_curves(path: Path, curves: dict[str, Any]) -> None:
    """The stages' reward curves in one PNG; nothing without matplotlib (``ctxsel.plotting``)."""
    plt = pyplot()
    if plt is None:
        return
    stages = [curves[k] for k in ("stage1", "stage2") if k in curves]
    fig, axes = plt.subplots(1, max(1, len(stages)), figsize=(5.5 * max(1, len(stages)), 3.8), squeeze=False)
    for ax, c in zip(axes[0], stages):
        if c["train"]:
            ax.plot([p["step"] for p in c["train"]], [p["reward"] for p in c["train"]], lw=1, label="train (sampled)")
        if c["val"]:
            ax.plot(
                [p["step"] for p in c["val"]], [p["reward"] for p in c["val"]], "o-", ms=4, label="validation (greedy)"
            )
        r = c["reward"]
        ax.set_title(f"stage {c['stage']}: red={r['red']}, alpha={r['alpha']}", fontsize=9)
        ax.set_xlabel("GRPO step")
        ax.set_ylabel("reward")
        ax.set_ylim(-1.05, 1.05)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def train_picker(
    train_rows: Sequence[dict[str, Any]],
    val_rows: Sequence[dict[str, Any]],
    out: str | Path,
    cfg: PickerTrainConfig | None = None,
    info: dict[str, Any] | None = None,
    model_and_tokenizer: tuple[Any, Any] | None = None,
) -> dict[str, Any]:
    """Algorithm 2: stage 1 until the validation reward plateaus, then stage 2 from its adapters
    (either stage skipped at 0 steps; both go on from ``cfg.init_adapter`` when it is set)."""
    import torch
    from peft import LoraConfig

    cfg = cfg or PickerTrainConfig()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(cfg.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if not train_rows:
        raise InputError("no training rows: mine evidence sets first (ctxsel mine) and check their pools")
    if model_and_tokenizer is not None or cfg.base == TINY:
        # a model made in process is saved beside the adapters, which name it relative to themselves
        model, tok = model_and_tokenizer or make_tiny_model(cfg.seed)
        model.save_pretrained(str(out / "base"))
        tok.save_pretrained(str(out / "base"))
        rel_base = "../base"
    else:
        model, tok = load_base(cfg.base)
        rel_base = cfg.base if is_bundled_base(cfg.base) else str(Path(cfg.base).resolve())
    chat = is_chat_base(cfg.base, tok)
    info = {**(info or {}), "chat": chat}  # the adapter reads prompts as it was trained on them
    newline_ends_replies(model, tok)
    lora = LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=list(cfg.target_modules),
        task_type="CAUSAL_LM",
    )
    if cfg.init_adapter:
        from peft import PeftModel

        folder, sha = _init_adapter(cfg.init_adapter, rel_base)
        model = PeftModel.from_pretrained(model, str(folder / "adapter"), is_trainable=True)
        lora = None  # type: ignore[assignment]  # the stages go on training the loaded adapter
        info["init_adapter"] = {"path": str(folder.resolve()), "adapter_sha": sha}
    summary: dict[str, Any] = {
        "config": asdict(cfg),
        "n_train_rows": len(train_rows),
        "n_val_rows": len(val_rows),
        **info,
    }
    if cfg.warmup_steps:
        from peft import get_peft_model

        if lora is not None:
            model = get_peft_model(model, lora)
        lora = None  # type: ignore[assignment]  # applied once: the stages train the same adapter
        summary["warmup_loss"] = format_warmup(model, tok, train_rows, cfg.warmup_steps, cfg.warmup_lr, cfg.seed, chat)
    curves: dict[str, Any] = {}
    for stage, steps in ((1, cfg.stage1_max_steps), (2, cfg.stage2_steps)):
        if steps <= 0:
            continue
        model, curves[f"stage{stage}"] = run_stage(
            model,
            tok,
            stage,
            train_rows,
            val_rows,
            steps,
            cfg,
            out,
            peft_config=lora,
            stop_on_plateau=stage == 1,
            chat=chat,
        )
        lora = None  # type: ignore[assignment]  # stage 2 goes on from stage 1's adapter
        _save_stage(model, out, stage, rel_base, cfg, info)
    (out / "reward_curves.json").write_text(json.dumps(curves, indent=1) + "\n", encoding="utf-8")
    plot_curves(out / "reward_curves.png", curves)
    summary["curves"] = {
        k: {
            "steps": v["steps"],
            "stopped": v.get("stopped"),
            "val_first": v["val"][0] if v["val"] else None,
            "val_last": v["val"][-1] if v["val"] else None,
        }
        for k, v in curves.items()
    }
    (out / "train_summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n", encoding="utf-8")
    return {"summary": summary, "curves": curves, "model": model, "tokenizer": tok}


def split_train_val(
    rows: Sequence[dict[str, Any]], val_fraction: float = 0.2, seed: int = 0
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Validation rows for the plateau check: whole questions (all their rewrites) held out of training."""
    qids = sorted({r["query_id"] for r in rows})
    if len(qids) < 2:
        return list(rows), []
    random.Random(seed).shuffle(qids)
    n_val = max(1, round(val_fraction * len(qids)))
    val = set(qids[:n_val])
    return [r for r in rows if r["query_id"] not in val], [
        r for r in rows if r["query_id"] in val and r.get("variant", 0) == 0
    ]


__all__ = [
    "TINY",
    "PickerTrainConfig",
    "TRLPickerReward",
    "format_warmup",
    "make_tiny_model",
    "newline_ends_replies",
    "picker_rows",
    "plot_curves",
    "run_stage",
    "score_reply",
    "shuffled_row",
    "split_train_val",
    "train_picker",
    "validation_reward",
]
