"""REINFORCE training of LDAR: it learns a known best band, resumes exactly, records its reward."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ctxsel.selectors.ldar.checkpoint import load_policy  # noqa: E402
from ctxsel.selectors.ldar.policy import PolicyConfig  # noqa: E402
from ctxsel.selectors.ldar.selector import LDAR  # noqa: E402
from ctxsel.train.ldar.config import TrainConfig  # noqa: E402
from ctxsel.train.ldar.items import TrainItem  # noqa: E402
from ctxsel.train.ldar.rewards import LabelReward  # noqa: E402
from ctxsel.train.ldar.trainer import Trainer  # noqa: E402
from ctxsel.types import Chunk, Example  # noqa: E402

SMALL = PolicyConfig(d_model=32, ff_dim=32, n_frequencies=8, head_hidden=32)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def synthetic(m: int = 32, n: int = 40, seed: int = 0) -> list[TrainItem]:
    """Score vectors whose 3 most similar chunks are the gold ones (lifted 0.3 above
    a uniform bulk), shuffled. The best band is exactly the top 3 (F2 = 1)."""
    rng = np.random.default_rng(seed)
    items = []
    for q in range(m):
        chunks = [Chunk(id=f"c{i}", text="t", position=i, n_tokens=10) for i in range(n)]
        s = np.sort(rng.uniform(0.0, 0.6, n))[::-1].copy()
        s[:3] += 0.3
        perm = rng.permutation(n)
        scores = np.empty(n)
        scores[perm] = s
        gold = [f"c{perm[r]}" for r in range(3)]
        items.append(TrainItem(Example(id=f"q{q}", question="?", chunks=chunks, gold_ids=gold), scores))
    return items


@pytest.mark.slow  # 200 REINFORCE steps (about 3 s)
def test_reinforce_learns_the_known_best_band(tmp_path: Path) -> None:
    items = synthetic()
    cfg = TrainConfig(steps=150, batch_size=16, seed=0, eval_every=50, checkpoint_every=0)  # Table 4's lr
    trainer = Trainer(items, LabelReward(2.0), tmp_path, SMALL, cfg, progress=False)
    summary = trainer.train()
    random_band = summary["reference"]["random_band"]["reward"]
    initial = summary["reference"]["initial"]["reward"]
    final = summary["final_train_deterministic"]["reward"]
    assert random_band < 0.15 and initial < 0.15
    assert final > 0.8 and final > random_band + 0.6
    # the trained policy, loaded as a selector, takes the top 3 on a new synthetic question
    sel = LDAR(policy=tmp_path / "policy")
    test = synthetic(m=1, seed=99)[0]
    chosen = sel.select("?", test.example.chunks, test.scores)
    assert set(test.example.gold_ids) <= set(chosen.ids) and chosen.k <= 5
    curve = json.loads((tmp_path / "reward_curve.json").read_text())
    assert len(curve["steps"]) == 150 and curve["reward"]["name"] == "label"
    assert (tmp_path / "reward_curve.png").stat().st_size > 1000


def test_resume_gives_the_same_weights_as_an_uninterrupted_run(tmp_path: Path) -> None:
    items = synthetic(m=12, n=20)
    straight = Trainer(
        items,
        LabelReward(),
        tmp_path / "a",
        SMALL,
        TrainConfig(steps=6, batch_size=4, checkpoint_every=3, eval_every=0),
        progress=False,
    )
    straight.train()
    first = Trainer(
        items,
        LabelReward(),
        tmp_path / "b",
        SMALL,
        TrainConfig(steps=3, batch_size=4, checkpoint_every=3, eval_every=0),
        progress=False,
    )
    first.train()
    resumed = Trainer(
        items,
        LabelReward(),
        tmp_path / "b",
        SMALL,
        TrainConfig(steps=6, batch_size=4, checkpoint_every=3, eval_every=0),
        progress=False,
    )
    assert resumed.step == 3
    resumed.train()
    a, _ = load_policy(tmp_path / "a" / "policy")
    b, info = load_policy(tmp_path / "b" / "policy")
    for (k, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), k
    assert [r["reward"] for r in straight.curve] == [r["reward"] for r in resumed.curve]
    assert info["training"]["steps_done"] == 6 and info["training"]["reward"]["name"] == "label"
    # another reward in the same folder is refused, not mixed in
    with pytest.raises(ValueError, match="other settings"):
        Trainer(items, LabelReward(1.0), tmp_path / "b", SMALL, TrainConfig(steps=8, batch_size=4), progress=False)


@pytest.mark.parametrize(
    "cfg",
    [
        PolicyConfig(**{**SMALL.to_dict(), "head": "bernoulli"}),
        PolicyConfig(**{**SMALL.to_dict(), "encoder": "mlp", "embedding": "linear"}),
    ],
)
def test_ablations_train(tmp_path: Path, cfg: PolicyConfig) -> None:
    trainer = Trainer(
        synthetic(m=8, n=15),
        LabelReward(),
        tmp_path,
        cfg,
        TrainConfig(steps=3, batch_size=4, eval_every=0),
        progress=False,
    )
    trainer.train()
    _, info = load_policy(tmp_path / "policy")
    assert info["policy"] == cfg.to_dict()
    assert len(trainer.curve) == 3 and all(np.isfinite(r["loss"]) for r in trainer.curve)


def test_non_finite_rewards_are_an_error(tmp_path: Path) -> None:
    def broken(examples, selections, **kw):
        return [float("nan")] * len(examples)

    trainer = Trainer(synthetic(m=4, n=10), broken, tmp_path, SMALL, TrainConfig(steps=1, batch_size=2), progress=False)
    with pytest.raises(ValueError, match="non-finite rewards"):
        trainer.train_step()


def test_train_item_checks() -> None:
    ex = synthetic(m=1, n=5)[0].example
    with pytest.raises(ValueError, match="3 scores for 5 chunks"):
        TrainItem(ex, np.zeros(3))
    with pytest.raises(ValueError, match="no finite scores"):
        TrainItem(ex, np.full(5, np.nan))


def test_warm_start_from_a_trained_policy(tmp_path: Path) -> None:
    items = synthetic(m=8, n=15)
    Trainer(
        items, LabelReward(), tmp_path / "a", SMALL, TrainConfig(steps=2, batch_size=4, eval_every=0), progress=False
    ).train()
    warm = Trainer(
        items,
        LabelReward(1.0),
        tmp_path / "b",
        SMALL,
        TrainConfig(steps=0, seed=5),
        progress=False,
        init_policy=tmp_path / "a" / "policy",
    )
    source, _ = load_policy(tmp_path / "a" / "policy")
    for (k, x), (_, y) in zip(source.state_dict().items(), warm.policy.state_dict().items()):
        assert torch.equal(x, y), k
    assert warm.training_info()["init_policy"] == str(tmp_path / "a" / "policy")
    other = PolicyConfig(**{**SMALL.to_dict(), "encoder": "mlp"})
    with pytest.raises(ValueError, match="init-policy"):
        Trainer(
            items,
            LabelReward(),
            tmp_path / "c",
            other,
            TrainConfig(steps=0),
            progress=False,
            init_policy=tmp_path / "a" / "policy",
        )


def constant_reward(examples, selections, **kw):
    return [0.5] * len(examples)


@pytest.mark.parametrize("head", ["band", "bernoulli"])
def test_the_entropy_bonus_alone_widens_the_policy(tmp_path: Path, head: str) -> None:
    # a constant reward gives every band the same advantage (zero): only the entropy term moves the weights
    cfg = PolicyConfig(**{**SMALL.to_dict(), "head": head})
    runs = {}
    for coef in (0.0, 0.05):
        trainer = Trainer(
            synthetic(m=8, n=15),
            constant_reward,
            tmp_path / str(coef),
            cfg,
            TrainConfig(steps=15, batch_size=8, lr=3e-3, eval_every=0, checkpoint_every=0, entropy_coef=coef),
            progress=False,
        )
        trainer.train()
        runs[coef] = [r["entropy"] for r in trainer.curve]
    assert runs[0.0][-1] == pytest.approx(runs[0.0][0], abs=1e-5)  # no advantage, no bonus: nothing moves
    assert runs[0.05][-1] > runs[0.05][0] + 1e-3


def test_per_question_baselines_and_the_cosine_schedule(tmp_path: Path) -> None:
    items = synthetic(m=6, n=12)
    cfg = TrainConfig(
        steps=5, batch_size=6, lr=1e-3, eval_every=0, checkpoint_every=0, baseline="question",
        normalize_advantages=True, lr_schedule="cosine",
    )  # fmt: skip
    trainer = Trainer(items, LabelReward(), tmp_path, SMALL, cfg, progress=False)
    first = trainer.train_step()
    # every question of the batch now has its own baseline: its first reward
    assert set(trainer.question_baselines) == {it.example.id for it in items}
    snapshot = dict(trainer.question_baselines)
    second = trainer.train_step()
    assert second["baseline_used"] == pytest.approx(np.mean(list(snapshot.values())))
    assert first["lr"] == pytest.approx(1e-3)
    trainer.train()
    assert trainer.curve[-1]["lr"] == pytest.approx(1e-4)  # lr / 10 at the last step
    # the per-question baselines are part of the resumable state
    again = Trainer(items, LabelReward(), tmp_path, SMALL, cfg, progress=False)
    assert again.question_baselines == pytest.approx(trainer.question_baselines)


@pytest.mark.parametrize(
    "bad",
    [
        {"baseline": "median"},
        {"lr_schedule": "linear"},
        {"entropy_coef": -0.1},
        {"entropy_coef": float("nan")},
        {"lr": -1.0},  # was an optimizer error reported as "this is a bug"
        {"lr": 0.0},
        {"threads": 0},
        {"checkpoint_every": -1},
        {"eval_every": -1},
    ],
)
def test_bad_stability_options_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError):
        TrainConfig(**bad)
