"""``ctxsel train ldar`` and ``ctxsel eval --policy/--split`` on the bundled example (keyword scorer: no model)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from ctxsel.cli.main import main  # noqa: E402
from ctxsel.datasets import load_dataset  # noqa: E402
from ctxsel.datasets.splits import split_examples, split_ids  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ldar") / "run"
    rc = main(
        [
            "train",
            "ldar",
            "--dataset",
            "example",
            "--scorer",
            "keywords",
            "--output",
            str(out),
            "--steps",
            "2",
            "--batch-size",
            "2",
            "--no-progress",
            "--threads",
            "1",
        ]
    )
    assert rc == 0
    return out


def test_split_is_fixed_and_seeded() -> None:
    ids = [f"hotpotqa-{i:03d}" for i in range(100)]
    train, test = split_ids(ids)
    assert (len(train), len(test)) == (80, 20) and not set(train) & set(test)
    assert split_ids(list(reversed(ids))) == (train, test)  # depends on the ids, not their order
    assert split_ids(ids, seed=1) != (train, test)
    ex = load_dataset("example")
    assert [e.id for e in split_examples(ex, "test")] == split_ids([e.id for e in ex])[1]
    with pytest.raises(ValueError, match="train fraction"):
        split_ids(ids, 1.0)


def test_train_writes_policy_curve_split_and_held_out_eval(trained: Path, capsys) -> None:
    for name in (
        "policy/config.json",
        "policy/model.safetensors",
        "checkpoint/state.json",
        "reward_curve.json",
        "reward_curve.png",
        "split.json",
        "eval/summary.json",
        "train_summary.json",
    ):
        assert (trained / name).is_file(), name
    config = json.loads((trained / "policy/config.json").read_text())
    assert config["training"]["reward"]["name"] == "label" and config["training"]["steps_done"] == 2
    split = json.loads((trained / "split.json").read_text())
    assert config["training"]["train_ids"] == split["train"]
    summary = json.loads((trained / "eval/summary.json").read_text())
    n_test = len(split["test"])
    ldar = [m for m in summary["methods"] if m.startswith("ldar")]
    assert len(ldar) == 1 and summary["methods"][ldar[0]]["n"] == n_test
    assert {"adaptive-k", "top-k@5", "top-k@10", "full"} <= set(summary["methods"])
    assert summary["config"]["method_configs"][ldar[0]]["trained_with_reward"]["name"] == "label"


def test_eval_uses_a_trained_policy_on_the_test_split(trained: Path, tmp_path: Path, capsys) -> None:
    rc = main(
        [
            "eval",
            "--dataset",
            "example",
            "--scorer",
            "keywords",
            "--split",
            "test",
            "--method",
            "ldar,top-k@1",
            "--policy",
            str(trained / "policy"),
            "--output",
            str(tmp_path / "ev"),
            "--no-progress",
        ]
    )
    out, err = capsys.readouterr()
    assert rc == 0, err
    summary = json.loads((tmp_path / "ev/summary.json").read_text())
    assert list(summary["methods"]) == ["ldar", "top-k@1"]  # --policy is a resource: the label stays
    assert Path(summary["config"]["method_configs"]["ldar"]["policy"]).resolve() == (trained / "policy").resolve()
    assert summary["config"]["dataset"].startswith("example (test split")
    rows = [json.loads(x) for x in (tmp_path / "ev/results.jsonl").read_text().splitlines()]
    assert {r["example_id"] for r in rows} == set(json.loads((trained / "split.json").read_text())["test"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "ldar", "--dataset", "example", "--scorer", "keywords", "--reward", "llm"], "needs a reader"),
        (
            ["eval", "--dataset", "example", "--scorer", "keywords", "--method", "ldar", "--policy", "/nonexistent"],
            "no LDAR policy",
        ),
    ],
)
def test_errors_are_one_line(argv: list[str], message: str, tmp_path: Path, capsys) -> None:
    rc = main([*argv, "--output", str(tmp_path / "o")])
    _, err = capsys.readouterr()
    assert rc == 2 and message in err and "Traceback" not in err
