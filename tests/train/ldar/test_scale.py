"""LDAR at scale: the inference path equals the module forward, and the summary encoder
(linear cost, for large N) keeps the selector's contract, equals the paper's network on the
multiset it stands for, trains, and loads back as a method."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")

import torch

from ctxsel import get_selector
from ctxsel.selectors.ldar.band import LDARBand, band_ranks
from ctxsel.selectors.ldar.checkpoint import load_policy, save_policy
from ctxsel.selectors.ldar.policy import LDARPolicy, PolicyConfig, pad_batch, summarize_scores
from ctxsel.selectors.ldar.selector import LDAR
from ctxsel.train.ldar.items import TrainItem
from ctxsel.train.ldar.rewards import LabelReward
from ctxsel.train.ldar.trainer import TrainConfig, Trainer
from ctxsel.types import Example
from tests.support.ldar import SMALL, band, chunks
from tests.support.ldar import fixed_policy as ldar_fixed_policy

SUMMARY: dict[str, Any] = dict(encoder="summary", summary_points=32, summary_top=8)
#: infer() against the module forward: float32 rounding of the same function.
RTOL, ATOL = 1e-5, 1e-6

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def fixed_policy(q_l: float, q_d: float, **cfg: Any) -> LDARPolicy:
    """test_ldar's input-independent band policy, sharp (concentration 1e4), in eval mode."""
    return ldar_fixed_policy(q_l, q_d, concentration=1e4, **cfg).eval()


def module_forward(p: LDARPolicy, x: torch.Tensor, mask: torch.Tensor | None = None):
    """What ``infer`` ran before: the modules in training mode (dropout 0) under no_grad."""
    was = p.training
    p.train()
    try:
        with torch.no_grad():
            return p(x, mask)
    finally:
        p.train(was)


# -- fast inference == the module forward ---------------------------------------------------


@pytest.mark.parametrize("n", [1, 7, 300, 1000])
def test_infer_gives_the_same_band_as_the_module_forward(n: int) -> None:
    torch.manual_seed(1)
    p = LDARPolicy(PolicyConfig()).eval()  # the paper's sizes
    scores = np.sort(np.random.default_rng(n).uniform(-0.1, 0.8, n)).astype(np.float32)
    x = torch.from_numpy(scores)[None]
    ref, got = module_forward(p, x), p.infer(x)
    for name in ("alpha_l", "beta_l", "alpha_d", "beta_d"):
        torch.testing.assert_close(getattr(got, name), getattr(ref, name), rtol=RTOL, atol=ATOL)
    (rl, rd), (gl, gd) = ref.mean_band(), got.mean_band()
    band = lambda ql, qd: band_ranks(n, float(ql), min(1.0, float(ql + (1 - ql) * qd)))  # noqa: E731
    assert band(gl[0], gd[0]) == band(rl[0], rd[0])
    assert got.alpha_l is not None and not got.alpha_l.requires_grad and got.alpha_l.is_inference()


@pytest.mark.parametrize("cfg", [{}, {"head": "bernoulli"}, {"embedding": "linear"}, {"encoder": "mlp"}])
def test_infer_matches_the_module_forward_on_padded_batches(cfg) -> None:
    torch.manual_seed(0)
    p = LDARPolicy(PolicyConfig(**{**SMALL, **cfg})).eval()
    x, mask = pad_batch([np.sort(np.random.default_rng(k).random(m)) for k, m in ((0, 300), (1, 120), (2, 1))])
    ref, got = module_forward(p, x, mask), p.infer(x, mask)
    for name in ("alpha_l", "beta_d", "logits"):
        if getattr(ref, name) is not None:
            torch.testing.assert_close(getattr(got, name), getattr(ref, name), rtol=RTOL, atol=1e-5)


def test_existing_configs_serialise_as_before(tmp_path: Path) -> None:
    # the keys every checkpoint written before the summary encoder holds, and no others
    before = {
        "head",
        "encoder",
        "embedding",
        "d_model",
        "n_layers",
        "n_heads",
        "ff_dim",
        "n_frequencies",
        "frequency_scale",
        "head_hidden",
        "dropout",
    }
    cfgs: list[dict[str, Any]] = [{}, {"encoder": "mlp"}, {"head": "bernoulli"}, {"embedding": "linear"}]
    for cfg in cfgs:
        assert set(PolicyConfig(**cfg).to_dict()) == before
    # an old config.json (no summary keys) loads, and the selector gives the module forward's band
    torch.manual_seed(3)
    p = LDARPolicy(PolicyConfig(**SMALL)).eval()
    path = save_policy(tmp_path / "old", p, {"reward": {"name": "label"}})
    doc = json.loads((path / "config.json").read_text())
    assert "summary_points" not in doc["policy"]
    loaded, _ = load_policy(path)
    s = np.random.default_rng(0).random(500)
    sel = LDAR(policy=path).select("q", chunks(500), s)
    ref = module_forward(loaded, torch.as_tensor(np.sort(s), dtype=torch.float32)[None])
    q_l, q_d = (float(v[0]) for v in ref.mean_band())
    assert sel.details_as(LDARBand).q_l == pytest.approx(q_l, rel=1e-5)
    assert sel.details_as(LDARBand).q_d == pytest.approx(q_d, rel=1e-5)
    assert (sel.details_as(LDARBand).l, sel.details_as(LDARBand).u) == band_ranks(
        500, q_l, min(1.0, q_l + (1 - q_l) * q_d)
    )


# -- the summary ------------------------------------------------------------------------------


def test_summarize_scores_by_hand() -> None:
    asc = torch.arange(10, dtype=torch.float32)  # descending 9, 8, ..., 0
    # top 2 exactly; ranks 2..9 in 2 bins with edges rint(2 * 5^(k/2)) = 2, 4, 10
    values, weights = summarize_scores(asc, points=4, top=2)
    assert values.tolist() == [9.0, 8.0, 6.5, 2.5]
    assert weights.tolist() == [1.0, 1.0, 2.0, 6.0]
    same, ones = summarize_scores(asc, points=10, top=2)  # N <= points: the scores themselves
    assert same is asc and ones.tolist() == [1.0] * 10


@pytest.mark.parametrize("n", [257, 1000, 100_000])
def test_summarize_scores_properties(n: int) -> None:
    asc = torch.from_numpy(np.sort(np.random.default_rng(n).uniform(-0.2, 0.9, n)).astype(np.float32))
    values, weights = summarize_scores(asc, points=256, top=64)
    assert len(values) <= 256 and weights.sum().item() == n
    assert torch.equal(values[:64], asc.flip(0)[:64]) and bool((weights[:64] == 1).all())
    assert bool((values[1:] <= values[:-1] + 1e-6).all())  # still descending: bins follow the ranking
    assert bool((weights[64:] >= 1).all())
    assert bool((weights[65:] >= weights[64:-1] - 1).all())  # bins widen down the ranking (edges are rounded)
    assert weights[-1] >= weights[64] and weights[-1] <= 0.05 * n
    mean = (values.double() * weights.double()).sum() / n
    assert mean.item() == pytest.approx(asc.double().mean().item(), abs=1e-6)


def test_summary_encoder_is_the_papers_network_on_the_multiset_it_stands_for() -> None:
    torch.manual_seed(0)
    paper = LDARPolicy(PolicyConfig(**SMALL)).eval()
    summary = LDARPolicy(PolicyConfig(**SMALL, **SUMMARY)).eval()
    summary.load_state_dict(paper.state_dict())  # same modules, same weights
    asc = torch.from_numpy(np.sort(np.random.default_rng(0).random(500)).astype(np.float32))
    values, weights = summarize_scores(asc, 32, 8)
    expanded = torch.repeat_interleave(values, weights.long()).flip(0)  # 500 scores, each point weight times
    assert len(expanded) == 500
    ref, got = module_forward(paper, expanded[None]), summary.infer(asc[None])
    for name in ("alpha_l", "beta_l", "alpha_d", "beta_d"):
        torch.testing.assert_close(getattr(got, name), getattr(ref, name), rtol=1e-4, atol=1e-5)
    # with N <= summary_points there is nothing to summarise: the paper's network exactly
    small = asc[:: 500 // 30][:30]
    torch.testing.assert_close(
        summary.infer(small[None]).alpha_l, paper.infer(small[None]).alpha_l, rtol=RTOL, atol=ATOL
    )
    # autograd forward (training) and infer agree; rows of a padded batch equal their lone selves
    with torch.no_grad():
        torch.testing.assert_close(summary(asc[None]).beta_d, got.beta_d, rtol=RTOL, atol=ATOL)
    x, mask = pad_batch([asc.numpy(), asc.numpy()[:20], asc.numpy()[::3]])
    batched = summary.infer(x, mask)
    assert batched.alpha_l is not None
    for i, row in enumerate((asc, asc[:20], asc[::3])):
        alone = summary.infer(row[None]).alpha_l
        assert alone is not None
        torch.testing.assert_close(batched.alpha_l[i], alone[0], rtol=RTOL, atol=ATOL)
    # unsorted input is sorted first (the policy reads a set)
    perm = asc[torch.randperm(500)]
    torch.testing.assert_close(summary.infer(perm[None]).alpha_l, got.alpha_l, rtol=RTOL, atol=ATOL)


def test_summary_config() -> None:
    with pytest.raises(ValueError, match="needs head='band'"):
        PolicyConfig(encoder="summary", head="bernoulli")
    with pytest.raises(ValueError, match="summary_top < summary_points"):
        PolicyConfig(encoder="summary", summary_points=16, summary_top=16)
    d = PolicyConfig(**SUMMARY).to_dict()
    assert (d["encoder"], d["summary_points"], d["summary_top"]) == ("summary", 32, 8)
    assert PolicyConfig.from_dict(d) == PolicyConfig(**SUMMARY)
    assert PolicyConfig(**SUMMARY).variant == "band/summary/periodic"
    # the same modules as the paper's network: a trained transformer's weights load into it
    assert set(LDARPolicy(PolicyConfig(**SMALL)).state_dict()) == set(
        LDARPolicy(PolicyConfig(**SMALL, **SUMMARY)).state_dict()
    )


# -- the selector's contract, both encoders ------------------------------------------------------


@pytest.mark.parametrize("n", [10, 3000])
def test_summary_selector_keeps_the_band_contract(n: int) -> None:
    s = np.random.default_rng(n).random(n)
    got = {}
    for enc in ("transformer", "summary"):
        cfg = SUMMARY if enc == "summary" else {}
        sel = LDAR(policy=fixed_policy(0.9, 0.3, **cfg)).select("q", chunks(n), s)
        got[enc] = sel
        l, u = band(sel)
        q_l, q_u = sel.details_as(LDARBand).q_l, sel.details_as(LDARBand).q_u
        assert q_l is not None and q_u is not None
        assert (l, u) == band_ranks(n, q_l, q_u)
        descending = [f"c{i}" for i in np.argsort(-s, kind="stable")]
        assert sel.ids == descending[n - u : n - l + 1] and sel.k == u - l + 1
        assert sel.details_as(LDARBand).variant == f"band/{enc}/periodic"
        assert [t["step"] for t in sel.trace] == ["policy", "quantiles", "band"]
    assert got["summary"].ids == got["transformer"].ids
    assert got["summary"].details_as(LDARBand).l == got["transformer"].details_as(LDARBand).l
    widened = LDAR(policy=fixed_policy(0.999, 0.01, **SUMMARY), min_k=5).select("q", chunks(n), s)
    assert widened.k == 5 and "widened to min_k=5" in widened.explanation


def test_summary_selector_handles_the_edges() -> None:
    sel = LDAR(policy=fixed_policy(0.5, 0.5, **SUMMARY))
    assert sel.select("q", [], []).k == 0
    assert sel.select("q", chunks(1), [0.4]).ids == ["c0"]
    s = np.random.default_rng(0).random(400)
    s[[3, 50]] = np.nan
    last = LDAR(policy=fixed_policy(0.5, 0.5, **SUMMARY), nan_policy="last").select("q", chunks(400), s)
    assert last.details_as(LDARBand).n_ranked == 398 and "c3" not in last.ids
    flat = sel.select("q", chunks(300), [0.3] * 300)
    assert "all scores equal" in flat.explanation and flat.k == band(flat)[1] - band(flat)[0] + 1


# -- training the summary encoder ----------------------------------------------------------------


def synthetic(m: int = 8, n: int = 100, seed: int = 0) -> list[TrainItem]:
    rng = np.random.default_rng(seed)
    items = []
    for q in range(m):
        s = rng.uniform(0.0, 0.6, n)
        top = np.argsort(-s)[:3]
        s[top] += 0.3
        items.append(TrainItem(Example(id=f"q{q}", question="?", chunks=chunks(n), gold_ids=[f"c{i}" for i in top]), s))
    return items


def test_a_tiny_training_run_changes_the_summary_policy_and_it_loads_as_a_method(tmp_path: Path) -> None:
    cfg = PolicyConfig(**SMALL, **SUMMARY)
    torch.manual_seed(0)
    initial = LDARPolicy(cfg).state_dict()  # the Trainer seeds torch the same way before building it
    trainer = Trainer(
        synthetic(),
        LabelReward(),
        tmp_path,
        cfg,
        TrainConfig(steps=3, batch_size=4, seed=0, eval_every=0, checkpoint_every=0),
        progress=False,
    )
    assert all(torch.equal(initial[k], v) for k, v in trainer.policy.state_dict().items())
    trainer.train()
    assert len(trainer.curve) == 3 and all(np.isfinite(r["loss"]) for r in trainer.curve)
    loaded, info = load_policy(tmp_path / "policy")
    assert info["policy"] == cfg.to_dict() and loaded.config == cfg
    changed = [k for k, v in loaded.state_dict().items() if not torch.equal(v, initial[k])]
    assert "heads.weight" in changed and "encoder.layers.0.self_attn.in_proj_weight" in changed
    assert "embed.frequencies" in changed
    sel = get_selector(f"ldar[policy={tmp_path / 'policy'}]")
    s = np.random.default_rng(5).random(2000)
    out = sel.select("q", chunks(2000), s)
    assert (
        out.details_as(LDARBand).variant == "band/summary/periodic"
        and out.details_as(LDARBand).beyond_training_n is True
    )
    assert 1 <= band(out)[0] <= band(out)[1] <= 2000 and out.k == band(out)[1] - band(out)[0] + 1
    assert sel.config()["variant"] == "band/summary/periodic"
