"""`ctxsel answer --method sage` against an OpenAI-compatible endpoint (a fake
server on loopback) that answers every prompt with nonsense: SAGE still
answers, and says what failed."""

from __future__ import annotations

import json
from pathlib import Path

from fake_server import FakeOpenAIServer, completion_reply

from ctxsel.cli.main import main

EXAMPLE = Path(__file__).resolve().parents[3] / "src" / "ctxsel" / "data" / "example.md"


def test_sage_answers_through_an_http_endpoint_even_when_every_reply_is_nonsense(capsys) -> None:
    with FakeOpenAIServer() as server:
        # is-counting; then twice: keys, the clean answer (importance off), the verdict
        server.push(*[completion_reply("%%% ### !!!", prompt_tokens=50 + i) for i in range(7)])
        code = main(["answer", "--document", str(EXAMPLE), "--question", "Who built the main telescope?",
                     "--method", "sage[n_perturb=0]", "--reader", server.base_url, "--reader-model", "fake",
                     "--reader-mode", "completions", "--json"])
        # round 2 gathers nothing new, so its answer and verdict prompts repeat round 1's and
        # the CLI's response cache serves them: 7 calls made, 5 reach the server
        assert code == 0 and server.calls == 5
        prompts = [r.json["prompt"] for r in server.requests]
    out = json.loads(capsys.readouterr().out)
    sel = out["selection"]
    assert out["answer"] == "%%% ### !!!"
    assert out["usage"]["calls"] == 7 and out["usage"]["tokens_in"] == sum(50 + i for i in range(5)) + 52 + 53
    assert sel["method"] == "sage" and sel["meta"]["route"] == "explore"
    assert [s["keys_from"] for s in sel["trace"] if s["step"] == "round"] == ["question (fallback)"] * 2
    assert len(sel["meta"]["failures"]) == 5  # counting verdict, 2 x keys, 2 x verdict
    assert all("#s" in c["id"] for c in sel["chunks"]) and sel["chunks"]
    assert "telescope" in prompts[-1].lower()  # the verdict prompt shows the gathered sentences
