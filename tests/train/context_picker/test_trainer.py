"""Two-stage GRPO (TRL's GRPOTrainer + LoRA) end to end on CPU with a tiny random
model and an in-process byte-level tokenizer; the TRL-shaped reward on
literal completions; training rows built from mined records."""

from __future__ import annotations

import dataclasses
import json

import pytest

from ctxsel.scoring import get_scorer
from ctxsel.selectors.context_picker.picker import PickerDetails
from ctxsel.train.context_picker.rows import picker_rows, split_train_val
from ctxsel.train.context_picker.trl_reward import TRLPickerReward, score_reply
from ctxsel.types import Chunk, Example

pytest.importorskip("trl")
pytest.importorskip("peft")


def test_trl_reward_parses_the_first_line_of_each_completion():
    fn = TRLPickerReward(stage=1)
    out = fn(
        prompts=["p"] * 5,
        completions=[
            'ok", "ids": [1, 2]}\ngarbage after the newline',
            'ok", "ids": [1]}',
            'ok", "ids": [3, 3]}',
            "prose",
            'ok", "ids": [1, 2, 3, 4, 5, 6]}',
        ],
        gold=[[1, 2]] * 5,
        n_candidates=[6] * 5,
    )
    assert out == pytest.approx([1.0, 0.5, -1.0, -1.0, 0.0])  # 6 > 2 + red_1 = 5: beyond the margin
    assert fn.valid == [pytest.approx(0.6)]
    assert score_reply('x", "ids": [2, 1, 3]}', [1, 2], 3, 2) == (pytest.approx(0.75), True)


def _examples() -> dict[str, Example]:
    chunks = [
        Chunk(f"c{i}", f"{w} fact number {i}.", position=i, n_tokens=10)
        for i, w in enumerate(["Alpha", "Beta", "Gamma", "Delta", "Epsilon", "Zeta"])
    ]
    return {f"q{i}": Example(f"q{i}", f"Alpha Beta question {i}?", chunks, answers=["x"]) for i in range(4)}


def _records() -> list[dict]:
    out = []
    for i in range(4):
        gold = ["c0", "c1"] if i % 2 else ["c1"]
        out.append(
            {
                "id": f"q{i}",
                "query_id": f"q{i}",
                "variant": 0,
                "question": f"Alpha Beta question {i}?",
                "kept": True,
                "s_gold": gold,
            }
        )
    out.append(
        {"id": "q3", "query_id": "q3", "variant": 1, "question": "Gamma only?", "kept": True, "s_gold": ["c5"]}
    )  # c5 is outside this variant's 3-chunk pool
    return out


def _rows() -> list[dict]:
    """Training rows of the first four records, on 3-chunk pools."""
    return picker_rows(_records()[:4], _examples(), get_scorer("keywords"), n_tokens=30, max_candidates=3)[0]


def test_rows_use_the_inference_pool_and_drop_gold_outside_it():
    rows, stats = picker_rows(_records(), _examples(), get_scorer("keywords"), n_tokens=30, max_candidates=3)
    assert stats == {"rows": 4, "skipped_no_gold_in_pool": 1, "gold_partly_outside_pool": 0}
    assert all(len(r["passages"]) == 3 for r in rows)
    assert rows[0]["passages"][0].startswith(("Alpha", "Beta")) and rows[1]["gold"] and rows[0]["gold"]
    train, val = split_train_val(rows, 0.25, seed=0)
    assert len(val) == 1 and not {r["query_id"] for r in train} & {r["query_id"] for r in val}


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("share_prompt", [True, False], ids=["shared-prompt", "trl-path"])
def test_two_stage_grpo_runs_end_to_end_with_nonzero_gradient(tmp_path, share_prompt):
    from safetensors.torch import load_file

    from ctxsel import get_selector
    from ctxsel.train.context_picker.config import PickerTrainConfig
    from ctxsel.train.context_picker.tiny_model import make_tiny_model
    from ctxsel.train.context_picker.trainer import train_picker
    from ctxsel.train.context_picker.warmup import format_warmup

    rows = _rows()
    model, tok = make_tiny_model(seed=0)
    # the random model first learns the reply format (all params, plain supervision), so that sampled
    # groups hold valid replies with different ids and so different rewards
    losses = format_warmup(model, tok, rows, steps=100, lr=3e-3)
    assert losses[-1] < losses[0] / 10
    cfg = PickerTrainConfig(
        base="tiny",
        stage1_max_steps=3,
        stage2_steps=2,
        eval_every=2,
        num_generations=4,
        prompts_per_step=2,
        max_completion_length=56,
        lora_r=4,
        lora_alpha=8,
        lr=1e-2,
        target_modules=["q_proj", "v_proj"],
        n_tokens=30,
        max_candidates=3,
        share_prompt=share_prompt,
    )
    res = train_picker(rows, rows[:2], tmp_path, cfg, model_and_tokenizer=(model, tok))
    s1 = res["curves"]["stage1"]
    assert s1["steps"] == 3 and len(s1["train"]) == 3 and len(s1["grad_norm"]) == 3
    assert [p["step"] for p in s1["seconds"]] == [1, 2, 3] and all(p["seconds"] > 0 for p in s1["seconds"])
    differing = [i for i, p in enumerate(s1["train"]) if p["reward_std"] > 0]
    assert differing, f"no stage-1 batch had differing rewards: {s1['train']}"
    assert all(s1["grad_norm"][i]["grad_norm"] > 0 for i in differing)
    # LoRA B starts at zero: non-zero after training means gradients reached the adapters
    lora_b = [
        v
        for k, v in load_file(str(tmp_path / "stage1" / "adapter" / "adapter_model.safetensors")).items()
        if "lora_B" in k
    ]
    assert lora_b and any(float(v.abs().sum()) > 0 for v in lora_b)
    assert res["curves"]["stage2"]["steps"] == 2 and res["curves"]["stage2"]["reward"]["red"] == 1
    for f in (
        "stage1/picker.json",
        "stage2/picker.json",
        "stage2/adapter/adapter_config.json",
        "reward_curves.json",
        "reward_curves.png",
        "train_summary.json",
    ):
        assert (tmp_path / f).is_file(), f
    curves = json.loads((tmp_path / "reward_curves.json").read_text())
    # validated at the start, every eval_every steps, and at the end unless that step just was
    assert [p["step"] for p in curves["stage1"]["val"]] == [0, 2, 3]
    assert [p["step"] for p in curves["stage2"]["val"]] == [0, 2]
    # the trained adapter is a selector: context-picker[adapter=...] loads base + LoRA and picks
    ex = next(iter(_examples().values()))
    sel = get_selector(
        f"context-picker[adapter={tmp_path / 'stage2'},n_tokens=30,max_candidates=3,max_reply_tokens=56]"
    ).select(ex.question, ex.chunks, get_scorer("keywords").score(ex.question, ex.chunks))
    assert sel.k >= 1 and sel.details_as(PickerDetails).invalid_replies in (0, 1, 2) and sel.usage.calls >= 1
    assert sel.config["adapter"].endswith("stage2")


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_a_stage_stops_at_its_time_limit_and_keeps_its_adapter(tmp_path):
    from ctxsel.train.context_picker.config import PickerTrainConfig
    from ctxsel.train.context_picker.trainer import train_picker

    rows = _rows()
    cfg = PickerTrainConfig(
        base="tiny",
        stage1_max_steps=5,
        stage2_steps=5,
        eval_every=0,
        num_generations=2,
        prompts_per_step=1,
        max_completion_length=8,
        lora_r=2,
        target_modules=["q_proj"],
        stage_seconds=1e-3,  # every step takes longer: each stage stops after its first
    )
    res = train_picker(rows, [], tmp_path, cfg)
    for stage in ("stage1", "stage2"):
        curve = res["curves"][stage]
        assert curve["steps"] == 1 and curve["stopped"] == "time limit of 0.001 s reached at step 1"
        assert (tmp_path / stage / "adapter" / "adapter_config.json").is_file()
    # stage 2 may have its own limit: here none, so it runs its 2 steps
    cfg = dataclasses.replace(cfg, stage2_steps=2, stage2_seconds=0.0)
    res = train_picker(rows, [], tmp_path / "own", cfg)
    assert res["curves"]["stage1"]["steps"] == 1 and res["curves"]["stage2"]["steps"] == 2
    assert "time limit" not in str(res["curves"]["stage2"].get("stopped"))


def test_a_chat_base_reads_the_picker_prompt_through_its_chat_template(tmp_path):
    """An instruction-tuned base (the bundled Qwens) is trained and used on its chat template, a base
    model on the plain prompt; the adapter records which, so inference reads what training read."""
    from ctxsel.llm.hf_client import TransformersClient, is_chat_base, model_text
    from ctxsel.selectors.context_picker.prompt import PREFILL, render_prompt
    from ctxsel.train.context_picker.rows import prompt_ids
    from ctxsel.train.context_picker.tiny_model import make_tiny_model

    model, tok = make_tiny_model(seed=0)
    assert is_chat_base("qwen-0.5b", tok) and is_chat_base("qwen-1.5b", tok)
    assert not is_chat_base("gemma-270m-gguf", tok) and not is_chat_base("gemma-270m", tok)
    assert not is_chat_base(str(tmp_path), tok)  # a folder whose tokenizer has no template
    tok.chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"
    assert is_chat_base(str(tmp_path), tok)

    prompt = render_prompt("Who?", ["a b", "c d"], 1)
    # the reply's first characters start the assistant's turn, not the end of the user's message
    user = render_prompt("Who?", ["a b", "c d"], 1, prefill=False).rstrip()
    assert prompt == user + " " + PREFILL
    assert model_text(tok, prompt, chat=True, reply_start=PREFILL) == f"<user>{user}<assistant>{PREFILL}"
    assert model_text(tok, prompt, chat=True) == f"<user>{prompt}<assistant>"  # a prompt with no reply start
    assert model_text(tok, prompt, chat=False, reply_start=PREFILL) == prompt
    row = {"question": "Who?", "passages": ["a b", "c d"]}
    assert tok.decode(prompt_ids(tok, row, 1, chat=True)) == f"<user>{user}<assistant>{PREFILL}"
    assert tok.decode(prompt_ids(tok, row, 1, chat=False), skip_special_tokens=True) == prompt

    client = TransformersClient(model, tok, "tiny", chat=True)
    reply = client.complete(prompt, max_tokens=3, reply_start=PREFILL)  # as the picker calls a trained adapter
    assert reply.usage.tokens_in == len(prompt_ids(tok, row, 1, chat=True))


def test_a_shuffled_pool_keeps_each_gold_number_on_its_passage():
    import random

    from ctxsel.train.context_picker.rows import shuffled_row

    row = {"question": "q?", "passages": [f"p{i}" for i in range(1, 9)], "gold": [1, 5]}
    seen = set()
    for seed in range(20):
        out = shuffled_row(row, random.Random(seed))
        assert sorted(out["passages"]) == sorted(row["passages"])
        assert [out["passages"][g - 1] for g in out["gold"]] == ["p1", "p5"]
        seen.add(tuple(out["gold"]))
    assert len(seen) > 5  # the gold numbers move with the order
    assert row["gold"] == [1, 5] and row["passages"][0] == "p1"  # the row itself is untouched


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"stage1_max_steps": 0, "stage2_steps": 0}, "nothing to train"),
        ({"shuffle_candidates": 1.5}, "share of prompts, 0 to 1, not 1.5"),
        ({"prompts_per_step": 0}, "--prompts-per-step must be at least 1, got 0"),  # was "this is a bug"
        ({"num_generations": 1}, "--group-size must be at least 2, got 1"),
        ({"stage_seconds": -5}, r"--stage-seconds must be 0 or more, got 0.0, 0.01 and -5"),  # trained on before
        ({"beta": -1.0}, r"--kl-beta, min_delta and --stage-seconds must be 0 or more, got -1.0"),
        ({"lr": 0.0}, "--picker-lr must be above 0, got 0.0"),
        ({"init_adapter": "no/such/run/stage2"}, "not a trained picker's stage folder"),
    ],
)
def test_bad_training_settings_are_clear_errors(tmp_path, change, message):
    from ctxsel.errors import InputError
    from ctxsel.train.context_picker.config import PickerTrainConfig
    from ctxsel.train.context_picker.trainer import train_picker

    rows = _rows()
    with pytest.raises(InputError, match=message):
        train_picker(rows, [], tmp_path, PickerTrainConfig(base="tiny", **change))


def test_an_adapter_from_another_base_is_refused(tmp_path):
    from ctxsel.errors import InputError
    from ctxsel.train.context_picker.config import PickerTrainConfig
    from ctxsel.train.context_picker.trainer import train_picker

    stage = tmp_path / "old" / "stage2"
    (stage / "adapter").mkdir(parents=True)
    (stage / "adapter" / "adapter_config.json").write_text("{}")
    (stage / "picker.json").write_text(json.dumps({"base": "qwen-1.5b", "stage": 2}))
    rows = _rows()
    with pytest.raises(InputError, match="trained on base 'qwen-1.5b', this run's is '../base'"):
        train_picker(rows, [], tmp_path / "new", PickerTrainConfig(base="tiny", init_adapter=str(stage)))


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_training_goes_on_from_a_saved_adapter_on_shuffled_pools(tmp_path):
    from safetensors.torch import load_file

    from ctxsel.train.context_picker.config import PickerTrainConfig
    from ctxsel.train.context_picker.trainer import train_picker

    rows = _rows()
    small = {
        "base": "tiny",
        "eval_every": 0,
        "num_generations": 2,
        "prompts_per_step": 1,
        "max_completion_length": 8,
        "lora_r": 2,
        "target_modules": ["q_proj"],
        "lr": 1e-2,
    }
    first = train_picker(rows, [], tmp_path / "a", PickerTrainConfig(stage1_max_steps=2, stage2_steps=0, **small))
    assert list(first["curves"]) == ["stage1"] and not (tmp_path / "a" / "stage2").exists()

    def lora_b(folder):
        weights = load_file(str(folder / "adapter" / "adapter_model.safetensors"))
        return {k: v for k, v in weights.items() if "lora_B" in k}

    # plant known values in the saved adapter (a random tiny model's replies are all invalid, so its
    # own steps leave lora_B at zero, as a new adapter starts): training must go on from these
    from safetensors.torch import save_file

    saved = tmp_path / "a" / "stage1" / "adapter" / "adapter_model.safetensors"
    weights = load_file(str(saved))
    save_file({k: v.fill_(0.5) if "lora_B" in k else v for k, v in weights.items()}, str(saved))
    cfg = PickerTrainConfig(
        stage1_max_steps=0, stage2_steps=1, init_adapter=str(tmp_path / "a" / "stage1"), shuffle_candidates=1.0, **small
    )
    res = train_picker(rows, [], tmp_path / "b", cfg)
    assert list(res["curves"]) == ["stage2"] and res["curves"]["stage2"]["steps"] == 1
    meta = json.loads((tmp_path / "b" / "stage2" / "picker.json").read_text())
    sha = json.loads((tmp_path / "a" / "stage1" / "picker.json").read_text())["adapter_sha"]
    assert meta["init_adapter"]["adapter_sha"] == sha and meta["config"]["shuffle_candidates"] == 1.0
    resumed = lora_b(tmp_path / "b" / "stage2")
    assert resumed and all(abs(float(v.mean()) - 0.5) < 0.05 for v in resumed.values())
