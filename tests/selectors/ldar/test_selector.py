"""LDAR: the band rule, the policy, the selector's conventions, checkpoints."""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ctxsel.selectors.ldar.band import band_positions, band_ranks, select_band

pytest.importorskip("torch")

import torch

from ctxsel import get_selector
from ctxsel.selectors.context_picker.picker import PickerDetails
from ctxsel.selectors.ldar.band import LDARBand
from ctxsel.selectors.ldar.checkpoint import load_policy, save_policy
from ctxsel.selectors.ldar.policy import LDARPolicy, PolicyConfig, pad_batch
from ctxsel.selectors.ldar.selector import LDAR
from tests.support.ldar import SMALL, band, chunks, fixed_policy, linear

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# -- Algorithm 1 ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "q_l", "q_u", "literal", "snapped"),
    [
        (10, 0.35, 0.80, (3, 8), (3, 8)),  # floor(3.5) = 3, floor(8.0) = 8
        (10, 0.37, 0.83, (3, 8), (3, 8)),
        (10, 0.0, 0.05, (1, 1), (1, 1)),  # l = max(1, 0); u = max(l, 0)
        (10, 0.5, 0.5, (5, 5), (5, 5)),
        (10, 0.90, 0.96, (9, 9), (9, 10)),  # 9.6 > 9.5: within half a rank of the top
        (10, 0.90, 0.94, (9, 9), (9, 9)),  # 9.4: not
        (10, 0.95, 0.99, (9, 9), (9, 10)),
        (10, 0.2, 1.0, (2, 10), (2, 10)),  # q_U = 1 reaches the top either way
        (991, 0.99, 0.999, (981, 990), (981, 990)),  # 990.009 is not above 990.5
        (991, 0.99, 0.9996, (981, 990), (981, 991)),  # 990.6 is
        (1, 0.3, 0.7, (1, 1), (1, 1)),
        (2, 0.2, 0.4, (1, 1), (1, 1)),
        (2, 0.5, 1.0, (1, 2), (1, 2)),
        (2, 0.6, 0.8, (1, 1), (1, 2)),  # u = floor(1.6) = 1; 1.6 > 1.5 snaps to 2
    ],
)
def test_band_ranks_hand_computed(n, q_l, q_u, literal, snapped) -> None:
    assert band_ranks(n, q_l, q_u, snap_top=False) == literal
    assert band_ranks(n, q_l, q_u) == snapped


def test_band_positions_map_ascending_ranks_to_the_descending_ranking() -> None:
    # ascending ranks 3..8 of 10 are descending positions 2..7
    assert band_positions(10, 3, 8) == (2, 8)
    assert band_positions(10, 10, 10) == (0, 1)  # the most similar chunk
    assert band_positions(10, 1, 1) == (9, 10)  # the least similar
    order = np.arange(10)[::-1]  # scores 0..9: index 9 is the most similar
    assert select_band(order, 3, 8).tolist() == [7, 6, 5, 4, 3, 2]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 0.1, 0.2), "at least one score"),
        ((5, math.nan, 0.2), "q_L must be a number"),
        ((5, 0.1, math.inf), "q_U must be a number"),
        ((5, -0.1, 0.2), "q_L must be a number in"),
        ((5, 0.1, 1.2), "q_U must be a number in"),
        ((5, 0.6, 0.5), "must not exceed"),
    ],
)
def test_band_ranks_rejects_bad_input(args, message) -> None:
    with pytest.raises(ValueError, match=message):
        band_ranks(*args)


def test_band_ranks_always_valid() -> None:
    rng = np.random.default_rng(0)
    for _ in range(2000):
        n = int(rng.integers(1, 3000))
        a, b = sorted(rng.random(2))
        for snap in (True, False):
            l, u = band_ranks(n, float(a), float(b), snap_top=snap)
            assert 1 <= l <= u <= n


# -- the policy ---------------------------------------------------------------------------


@pytest.mark.parametrize("cfg", [{}, {"encoder": "mlp"}, {"embedding": "linear"}])
def test_q_l_below_q_u_always(cfg) -> None:
    rng = np.random.default_rng(1)
    for seed in range(8):
        torch.manual_seed(seed)
        p = LDARPolicy(PolicyConfig(**{**SMALL, **cfg}))
        x = torch.as_tensor(rng.normal(0.3, 0.5, size=(4, 30)), dtype=torch.float32)
        with torch.no_grad():
            out = p(x)
            for q_l, q_d in (out.mean_band(), out.sample_band(), out.sample_band()):
                q_u = q_l.double() + (1 - q_l.double()) * q_d.double()
                assert torch.all(q_l > 0) and torch.all(q_u <= 1)
                assert torch.all(q_l.double() < q_u)
            for a in (out.alpha_l, out.beta_l, out.alpha_d, out.beta_d):
                assert torch.all(a > 0)


def test_q_l_below_q_u_even_for_extreme_concentrations() -> None:
    # concentrations of 1e-3 (the floor) make float32 Beta draws round to exactly 0 or 1
    p = fixed_policy(0.5, 0.5)
    with torch.no_grad():
        linear(p.heads).bias.fill_(-30.0)
    torch.manual_seed(0)
    with torch.no_grad():
        out = p(torch.rand(256, 5))
        q_l, q_d = out.sample_band()
    q_u = q_l.double() + (1 - q_l.double()) * q_d.double()
    assert torch.all(q_l.double() < q_u)
    assert torch.isfinite(out.band_log_prob(q_l, q_d)).all()


@pytest.mark.parametrize("cfg", [{}, {"encoder": "mlp"}, {"head": "bernoulli"}])
def test_padding_does_not_change_a_row(cfg) -> None:
    torch.manual_seed(0)
    p = LDARPolicy(PolicyConfig(**{**SMALL, **cfg})).eval()
    a, b = np.linspace(0, 0.8, 7), np.linspace(0.1, 0.5, 12)
    x, mask = pad_batch([a, b])
    with torch.no_grad():
        batched = p(x, mask)
        alone = p(torch.as_tensor(a, dtype=torch.float32)[None])
    if cfg.get("head") == "bernoulli":
        torch.testing.assert_close(batched.logits[0, :7], alone.logits[0], atol=1e-5, rtol=1e-5)
    else:
        torch.testing.assert_close(batched.alpha_l[0], alone.alpha_l[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(batched.beta_d[0], alone.beta_d[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("cfg", [{}, {"head": "bernoulli"}])
def test_infer_matches_the_eval_mode_forward(cfg) -> None:
    torch.manual_seed(0)
    p = LDARPolicy(PolicyConfig(**{**SMALL, **cfg})).eval()
    x, mask = pad_batch([np.random.default_rng(0).random(300), np.random.default_rng(1).random(120)])
    with torch.inference_mode():
        ref = p(x, mask)
    got = p.infer(x, mask)
    assert p.training is False  # restored
    for name in ("alpha_l", "beta_d", "logits"):
        if getattr(ref, name) is not None:
            torch.testing.assert_close(getattr(got, name), getattr(ref, name), atol=1e-5, rtol=1e-5)
    p.train()
    p.infer(x, mask)
    assert p.training is True


def test_policy_sees_a_set_not_a_sequence() -> None:
    torch.manual_seed(0)
    p = LDARPolicy(PolicyConfig(**SMALL)).eval()
    s = torch.rand(1, 40)
    with torch.no_grad():
        a, b = p(s), p(s[:, torch.randperm(40)])
    torch.testing.assert_close(a.alpha_l, b.alpha_l, atol=1e-5, rtol=1e-5)


def test_ablations_change_the_network() -> None:
    base = set(LDARPolicy(PolicyConfig(**SMALL)).state_dict())
    mlp = set(LDARPolicy(PolicyConfig(**SMALL, encoder="mlp")).state_dict())
    lin = set(LDARPolicy(PolicyConfig(**SMALL, embedding="linear")).state_dict())
    bern = set(LDARPolicy(PolicyConfig(**SMALL, head="bernoulli")).state_dict())
    assert any(k.startswith("encoder.layers.") for k in base) and not any("layers" in k for k in mlp)
    assert "embed.frequencies" in base and "embed.frequencies" not in lin
    assert "heads.weight" in base and "token_head.weight" in bern and "heads.weight" not in bern


def test_bad_policy_config() -> None:
    with pytest.raises(ValueError, match="head must be"):
        PolicyConfig(head="beta")  # type: ignore[arg-type]  # a head that does not exist, on purpose
    with pytest.raises(ValueError, match="divisible"):
        PolicyConfig(d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="unknown policy config keys"):
        PolicyConfig.from_dict({"head": "band", "colour": "red"})


# -- the selector ---------------------------------------------------------------------------


def test_selector_takes_the_band_of_algorithm_1() -> None:
    # scores 0.0 .. 0.9 in chunk order: chunk i has ascending rank i + 1
    sel = LDAR(policy=fixed_policy(0.37, (0.83 - 0.37) / 0.63, concentration=1e4))
    s = sel.select("q", chunks(10), np.arange(10) / 10)
    assert (s.details_as(LDARBand).l, s.details_as(LDARBand).u) == (3, 8)
    assert s.ids == ["c7", "c6", "c5", "c4", "c3", "c2"]  # ascending ranks 8..3, most similar first
    assert s.details_as(LDARBand).q_l == pytest.approx(0.37, abs=1e-4)
    assert s.details_as(LDARBand).q_u == pytest.approx(0.83, abs=1e-4)
    assert "skipping the 2 most similar" in s.explanation
    steps = [t["step"] for t in s.trace]
    assert steps == ["policy", "quantiles", "band"]
    assert s.trace[2] == {"step": "band", "n": 10, "l": 3, "u": 8, "k": 6}
    json.dumps(s.to_dict())


def test_top_band_and_literal_rule() -> None:
    p = fixed_policy(0.8, 0.97, concentration=1e4)  # q_U = 0.994: 9.94 of 10
    snapped = LDAR(policy=p).select("q", chunks(10), np.arange(10) / 10)
    literal = LDAR(policy=p, snap_top=False).select("q", chunks(10), np.arange(10) / 10)
    assert snapped.ids == ["c9", "c8", "c7"] and (snapped.details_as(LDARBand).l, snapped.details_as(LDARBand).u) == (
        8,
        10,
    )
    assert literal.ids == ["c8", "c7"] and literal.details_as(LDARBand).u == 9  # the most similar is out of reach


def test_deterministic_by_default_and_seeded_sampling() -> None:
    p = fixed_policy(0.5, 0.5, concentration=2.0)
    s = np.random.default_rng(0).random(50)
    a = LDAR(policy=p).select("q", chunks(50), s)
    assert a.ids == LDAR(policy=p).select("q", chunks(50), s).ids
    x = LDAR(policy=p, sample=True, seed=3).select("q", chunks(50), s)
    y = LDAR(policy=p, sample=True, seed=3).select("q", chunks(50), s)
    assert (x.ids, x.details_as(LDARBand).q_l) == (y.ids, y.details_as(LDARBand).q_l)
    draws = {LDAR(policy=p, sample=True, seed=k).select("q", chunks(50), s).details_as(LDARBand).q_l for k in range(5)}
    assert len(draws) == 5


def test_n_equals_one_and_two_and_empty() -> None:
    sel = LDAR(policy=fixed_policy(0.3, 0.5))
    one = sel.select("q", chunks(1), [0.4])
    assert one.ids == ["c0"] and band(one) == (1, 1)
    two = sel.select("q", chunks(2), [0.1, 0.9])
    assert 1 <= two.k <= 2 and 1 <= band(two)[0] <= band(two)[1] <= 2
    empty = sel.select("q", [], [])
    assert empty.k == 0 and "empty" in empty.explanation


def test_all_equal_scores() -> None:
    sel = LDAR(policy=fixed_policy(0.5, 0.5, concentration=1e4))
    s = sel.select("q", chunks(10), [0.3] * 10)
    # ascending ranks 5..7 of the position-ordered ties (descending = c0, c1, ..., c9)
    assert (s.details_as(LDARBand).l, s.details_as(LDARBand).u) == (5, 7)
    assert s.ids == ["c3", "c4", "c5"]
    assert "all scores equal" in s.explanation


def test_nan_scores() -> None:
    sel = LDAR(policy=fixed_policy(0.5, 0.5, concentration=1e4))
    s = [0.1, math.nan, 0.5, 0.7, math.inf, 0.2, 0.9, 0.3, 0.4, 0.6, 0.8]
    with pytest.raises(ValueError, match="NaN or infinite"):
        sel.select("q", chunks(11), s)
    last = LDAR(policy=fixed_policy(0.5, 0.5, concentration=1e4), nan_policy="last").select("q", chunks(11), s)
    assert "c1" not in last.ids and "c4" not in last.ids
    assert last.details_as(LDARBand).n_ranked == 9
    keep = [i for i, v in enumerate(s) if math.isfinite(v)]
    sub = sel.select("q", [chunks(11)[i] for i in keep], [s[i] for i in keep])
    assert last.ids == sub.ids
    none = LDAR(policy=fixed_policy(0.5, 0.5), nan_policy="last").select("q", chunks(2), [math.nan, math.nan])
    assert none.k == 1 and "no finite scores" in none.explanation


def test_n_larger_than_in_training(tmp_path: Path) -> None:
    path = save_policy(tmp_path / "policy", fixed_policy(0.9, 0.99), {"max_n": 40, "reward": {"name": "label"}})
    sel = LDAR(policy=path)
    s = sel.select("q", chunks(5000, tokens=1), np.random.default_rng(0).random(5000))
    assert s.details_as(LDARBand).beyond_training_n is True
    assert 1 <= band(s)[0] <= band(s)[1] <= 5000 and s.k == band(s)[1] - band(s)[0] + 1
    small = sel.select("q", chunks(30), np.random.default_rng(0).random(30))
    assert small.details_as(LDARBand).beyond_training_n is False


def test_min_k_widens_upward_first_and_max_tokens_cuts() -> None:
    p = fixed_policy(0.55, 0.01, concentration=1e4)  # a one-chunk band: ascending rank 5 of 10
    s = np.arange(10) / 10
    assert LDAR(policy=p).select("q", chunks(10), s).ids == ["c4"]
    assert LDAR(policy=p, min_k=3).select("q", chunks(10), s).ids == ["c6", "c5", "c4"]
    top = fixed_policy(0.95, 0.99, concentration=1e4)  # ranks 9..10: cannot widen upward past the top
    widened = LDAR(policy=top, min_k=4).select("q", chunks(10), s)
    assert widened.ids == ["c9", "c8", "c7", "c6"] and "widened to min_k=4" in widened.explanation
    wide = fixed_policy(0.2, 0.99, concentration=1e4)
    cut = LDAR(policy=wide, max_tokens=25).select("q", chunks(10), s)
    assert cut.ids == ["c9", "c8"] and "cut to 2 by max_tokens=25" in cut.explanation
    assert LDAR(policy=wide, max_tokens=5).select("q", chunks(10), s).k == 0


def test_bernoulli_head() -> None:
    torch.manual_seed(0)
    p = LDARPolicy(PolicyConfig(**SMALL, head="bernoulli"))
    with torch.no_grad():
        linear(p.token_head).weight.zero_()
        linear(p.token_head).bias.fill_(5.0)
    s = np.random.default_rng(0).random(12)
    every = LDAR(policy=p).select("q", chunks(12), s)
    assert every.k == 12 and every.details_as(LDARBand).l is None
    assert every.ids == [f"c{i}" for i in np.argsort(-s)]
    with torch.no_grad():
        linear(p.token_head).bias.fill_(-5.0)
    floor = LDAR(policy=p).select("q", chunks(12), s)
    assert floor.ids == [f"c{int(np.argmax(s))}"]  # nothing picked; min_k=1 keeps the most similar
    assert floor.trace[0]["picked"] == 0


class FixedPicks(LDAR):
    """LDAR whose Bernoulli head picks the given ascending positions (the widening is under test)."""

    def __init__(self, picks: list[int], n: int, **kw: Any) -> None:
        p = LDARPolicy(PolicyConfig(**SMALL, head="bernoulli"))
        super().__init__(policy=p, **kw)
        self.picks = np.isin(np.arange(n), picks)

    def act(self, ascending: np.ndarray) -> dict[str, Any]:
        return {"picks": self.picks, "p": self.picks.astype(float)}


def test_bernoulli_picks_short_of_min_k_take_the_best_unpicked() -> None:
    s = np.arange(10) / 10  # c9 most similar; ascending position j is chunk c{j}
    sel = FixedPicks([0, 9], 10, min_k=4).select("q", chunks(10), s)
    assert sel.ids == ["c9", "c8", "c7", "c0"]  # not a band from c0 to c9
    band = sel.details_as(LDARBand)
    assert (band.n_picked, band.l, band.widened_to_min_k) == (2, None, 4)


def test_band_details_keep_the_meta_keys_of_to_dict() -> None:
    s = np.arange(10) / 10
    sel = LDAR(policy=fixed_policy(0.55, 0.01, concentration=1e4), min_k=3).select("q", chunks(10), s)
    meta = sel.to_dict()["meta"]
    assert set(meta) == {
        *("n_ranked", "reward", "variant", "sample", "l", "u", "q_L", "q_D", "q_U"),
        *("alpha_L", "beta_L", "alpha_D", "beta_D", "widened_to_min_k"),
    }
    assert (meta["l"], meta["u"], meta["widened_to_min_k"]) == (5, 5, 3)
    with pytest.raises(TypeError, match="LDARBand details, not PickerDetails"):
        sel.details_as(PickerDetails)


def test_registry_and_missing_policy(tmp_path: Path) -> None:
    bundled = get_selector("ldar")
    assert isinstance(bundled, LDAR)
    assert bundled.policy_name is not None and bundled.policy_name.startswith(
        "bundled ldar policy sha256:"
    )  # no policy: the bundled one
    with pytest.raises(FileNotFoundError, match="no LDAR policy"):
        get_selector(f"ldar[policy={tmp_path / 'nope'}]")
    path = save_policy(tmp_path / "policy", fixed_policy(0.5, 0.5), {"reward": {"name": "label", "beta": 2.0}})
    sel = get_selector(f"ldar@{path}")
    assert isinstance(sel, LDAR)
    assert sel.config()["trained_with_reward"] == {"name": "label", "beta": 2.0}
    sampled = get_selector(f"ldar[policy={path},sample=true,seed=1]")
    assert isinstance(sampled, LDAR) and sampled.sample is True


# -- checkpoints ------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg", [{}, {"encoder": "mlp", "embedding": "linear"}, {"head": "bernoulli"}])
def test_checkpoint_round_trip_is_exact_and_never_unpickles(tmp_path: Path, monkeypatch, cfg) -> None:
    torch.manual_seed(1)
    p = LDARPolicy(PolicyConfig(**{**SMALL, **cfg})).eval()
    path = save_policy(tmp_path / "policy", p, {"reward": {"name": "label"}})
    assert sorted(x.name for x in path.iterdir()) == ["config.json", "model.safetensors"]
    config = json.loads((path / "config.json").read_text())
    assert config["format"] == "ctxsel-ldar-policy" and config["version"] == 1
    assert config["policy"] == PolicyConfig(**{**SMALL, **cfg}).to_dict()

    def boom(*a, **k):
        raise AssertionError("loading a policy must not unpickle")

    monkeypatch.setattr(pickle, "load", boom)
    monkeypatch.setattr(pickle, "loads", boom)
    monkeypatch.setattr(torch, "load", boom)
    q, info = load_policy(path)
    x, mask = pad_batch([np.random.default_rng(0).random(25), np.random.default_rng(1).random(9)])
    with torch.no_grad():
        a, b = p(x, mask), q(x, mask)
    for name in ("alpha_l", "beta_l", "alpha_d", "beta_d", "logits"):
        if getattr(a, name) is not None:
            assert torch.equal(getattr(a, name), getattr(b, name))
    assert info["training"]["reward"] == {"name": "label"}


def test_bad_checkpoints(tmp_path: Path) -> None:
    path = save_policy(tmp_path / "policy", LDARPolicy(PolicyConfig(**SMALL)))
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "version": 99}))
    with pytest.raises(ValueError, match="format version 99"):
        load_policy(path)
    (path / "config.json").write_text(json.dumps({**config, "policy": {**config["policy"], "d_model": 64}}))
    with pytest.raises(ValueError, match="shape"):
        load_policy(path)
    (path / "config.json").write_text(json.dumps(config))
    # a pickle in place of the weights is rejected, not executed
    (path / "model.safetensors").write_bytes(pickle.dumps({"x": 1}))
    with pytest.raises(Exception) as e:
        load_policy(path)
    assert not isinstance(e.value, AssertionError)
    (path / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="no model.safetensors"):
        load_policy(path)


def test_the_service_gives_ldar_its_policy_as_a_resource(tmp_path: Path, service_client: Any) -> None:
    """No method name is special-cased: the server's --ldar-policy goes to any method that takes a policy."""
    from ctxsel.service import ServiceSettings

    path = save_policy(tmp_path / "policy", fixed_policy(0.5, 0.5), {"reward": {"name": "label"}})
    body = {"question": "q?", "chunks": [f"c{i}" for i in range(20)], "method": "ldar", "scores": list(range(20))}
    client = service_client(ServiceSettings(scorer="keywords"))
    got = client.post("/select", json=body)  # no --ldar-policy: the bundled policy
    assert got.status_code == 200 and got.json()["config"]["policy"].startswith("bundled ldar policy sha256:")
    client = service_client(ServiceSettings(scorer="keywords", ldar_policy=str(path)))
    got = client.post("/select", json=body)
    assert got.status_code == 200 and got.json()["config"]["policy"] == str(path) and got.json()["k"] > 0
    got = client.post("/select", json={**body, "method": "ldar[policy=/elsewhere]"})
    assert got.status_code == 422 and "not an option a request can set" in got.json()["message"]


class _NamedScorer:
    """Scores by word overlap, under the name and model the bundled policy's card records."""

    name, model_id = "dense", "all-MiniLM-L6-v2"

    def score(self, question: str, chunks: Any) -> np.ndarray:
        words = set(question.lower().split())
        return np.array([len(words & set(c.text.lower().split())) / 10 for c in chunks])


def test_the_bundled_policy_warns_once_on_scores_it_was_not_trained_on(recwarn: pytest.WarningsRecorder) -> None:
    import ctxsel
    from ctxsel.errors import ScoresWarning
    from ctxsel.selectors.ldar import selector as ldar_selector

    ldar_selector._warned_scores.clear()
    texts = [f"chunk {i} about the licence of project {i}" for i in range(30)]
    ctxsel.select("which licence has project 3", texts, "ldar", scorer=_NamedScorer())
    ctxsel.select("which licence has project 3", texts, "ldar", scores=[i / 30 for i in range(30)])
    assert not [w for w in recwarn if w.category is ScoresWarning]  # its own scores, or scores given: silent
    for _ in range(2):
        ctxsel.select("which licence has project 3", texts, "ldar", scorer="bm25")
    got = [str(w.message) for w in recwarn if w.category is ScoresWarning]
    assert len(got) == 1, got
    assert "trained on dense:all-MiniLM-L6-v2 scores" in got[0] and "from bm25" in got[0]
    assert "no score map for" in got[0] and "scorer 'dense' gives the scores it knows" in got[0]


def test_a_scorer_with_a_score_map_is_read_through_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import ctxsel
    from ctxsel.ranking.chain import Ranking
    from ctxsel.selectors.ldar import score_maps
    from ctxsel.selectors.ldar.score_maps import ScoreMap, ScoreMaps, map_for

    # the bundle ships maps for model scorers only; a bm25 map in its place keeps this test fast
    bm25_map = ScoreMap("bm25", (0.0, 2.0, 8.0, 30.0), (0.0, 0.15, 0.4, 0.9))
    monkeypatch.setattr(score_maps, "bundled_maps", lambda: ScoreMaps("dense:all-MiniLM-L6-v2", {"bm25": bm25_map}))
    question = "which licence has project 3"
    texts = [f"chunk {i} about the licence of project {i % 7}" + " filler" * (i % 5) for i in range(40)]
    ranking = Ranking("bm25")
    raw = ranking.scorer.score(question, ctxsel.types.as_chunks(texts))
    score_map = map_for("dense:all-MiniLM-L6-v2", "bm25")
    assert score_map is not None and score_map.scorer == "bm25"
    via_chain = ctxsel.select(question, texts, "ldar", scorer=ranking)
    by_hand = ctxsel.select(question, texts, "ldar", scores=score_map(np.asarray(raw)))
    assert via_chain.details_as(LDARBand).score_map == "bm25" and by_hand.details_as(LDARBand).score_map is None
    assert via_chain.ids == by_hand.ids  # the policy saw the mapped scores ...
    assert via_chain.scores == [float(raw[int(i)]) for i in via_chain.ids]  # ... the selection keeps the raw ones
    assert "read bm25's scores through its score map" in via_chain.explanation
    assert map_for("some other scores", "bm25") is None
