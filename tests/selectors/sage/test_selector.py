"""SAGE: noise, sentence graph, counting by enumeration, the exploration loop, robustness.

The LLM is a scripted client (the boundary); everything SAGE does with its
replies is the real code.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from ctxsel import select
from ctxsel.errors import InputError, LLMContextLengthError
from ctxsel.llm.base import Completion
from ctxsel.selectors import get_selector
from ctxsel.selectors.llm_calls import Reply
from ctxsel.selectors.sage.graph import SentenceGraph, sentence_vertices
from ctxsel.selectors.sage.noise import KINDS, disturb, draw_lambda, perturb_word
from ctxsel.selectors.sage.replies import (
    KEYS_FORMAT,
    SUFFICIENT_FORMAT,
    Run,
    key_list,
    option_number,
    parse_keys,
    parse_verdict,
)
from ctxsel.selectors.sage.selector import SAGE
from ctxsel.types import Chunk, LLMUsage
from tests.support.answers import answer_of
from tests.support.sage import DOC, ScriptedLLM, kind_of


def const_embed(texts: list[str]) -> np.ndarray:
    """Answers embed by their letters (identical text -> cosine 1)."""
    out = np.zeros((len(texts), 26))
    for i, t in enumerate(texts):
        for ch in t.lower():
            if "a" <= ch <= "z":
                out[i, ord(ch) - 97] += 1
        out[i, 0] += 1e-3
    return out


def sage(llm: Any, **kw: Any) -> SAGE:
    return SAGE(llm, embed=const_embed, **kw)


# -- noise ------------------------------------------------------------------------


def _changed_share(lam: float, n: int = 4000, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    vocab = ["river", "stone", "market", "keeper", "lamp", "rope", "a", "is", "velmora", "1911"]
    original = [vocab[int(i)] for i in rng.integers(len(vocab), size=n)]
    noisy = disturb(" ".join(original), lam, np.random.default_rng(seed + 1)).split(" ")
    assert len(noisy) == n  # edits never add or remove whitespace
    return sum(a != b for a, b in zip(original, noisy)) / n


@pytest.mark.parametrize("lam", [0.3, 0.31, 0.65, 0.99, 1.0])
def test_disturb_changes_a_lambda_share_of_words(lam: float) -> None:
    share = _changed_share(lam)
    assert abs(share - lam) < 0.03, (lam, share)


def test_disturb_extremes_and_bad_lambda() -> None:
    text = "the keeper climbs the stairs"
    assert disturb(text, 0.0, 1) == text
    assert all(a != b for a, b in zip(text.split(), disturb(text, 1.0, 1).split()))
    with pytest.raises(ValueError, match="lambda"):
        disturb(text, 1.5)


def test_every_noise_kind_changes_words_and_lambda_range() -> None:
    rng = np.random.default_rng(0)
    for word in ["a", "aa", "I", "rn", "lighthouse", "1911", "mm"]:
        for _ in range(50):
            out = perturb_word(word, rng)
            assert out and out != word and " " not in out
    assert len(KINDS) == 7
    lams = [draw_lambda(rng) for _ in range(2000)]
    assert min(lams) >= 0.3 and max(lams) <= 1.0 and abs(np.mean(lams) - 0.65) < 0.02


# -- the sentence graph -----------------------------------------------------------


def test_sentence_vertices_keep_parents_and_document_order() -> None:
    shuffled = [DOC[2], DOC[0], DOC[3], DOC[1]]
    vs = sentence_vertices(shuffled)
    assert [v.id for v in vs[:4]] == ["p0#s0", "p0#s1", "p0#s2", "p1#s0"]
    assert [v.position for v in vs] == list(range(11))
    assert vs[5].meta["parent"] == "p1" and vs[5].text == "The guild meets in the old chapel."


def test_keyword_relevance_counts_distinct_non_stopwords() -> None:
    g = SentenceGraph(DOC)
    rel = g.relevance(["lighthouse keepers", "the guild", "Keepers"])
    by_id = {v.id: int(r) for v, r in zip(g.vertices, rel)}
    assert by_id["p1#s0"] == 2  # lighthouse, guild ("the" is a stopword)
    assert by_id["p1#s1"] == 1  # "keepers"
    assert by_id["p2#s2"] == 1  # "Keepers" (case-insensitive, counted once)
    assert by_id["p0#s0"] == 0
    hits, _ = g.retrieve(["lighthouse keepers", "guild"], k=3)
    assert [g.vertices[i].id for i in hits] == ["p1#s0", "p1#s1", "p1#s2"]  # ties by position
    assert g.retrieve(["zebra"], k=5)[0] == []  # relevance 0 is never retrieved


def test_neighbour_expansion_shares_the_budget_and_stays_in_the_document() -> None:
    g = SentenceGraph(DOC)  # 11 sentences, one document
    assert g.neighbours([5], 4) == [4, 6, 3, 7]
    assert g.neighbours([0], 4) == [1, 2]  # -1 and -2 leave the document: skipped
    assert g.neighbours([5, 9], 5) == [4, 6, 3, 8, 10]  # 3 for the first seed, 2 for the second
    two_docs = SentenceGraph([Chunk("a", "One. Two.", doc_id="A"), Chunk("b", "Three. Four.", doc_id="B")])
    assert two_docs.neighbours([1], 2) == [0]  # sentence 2 belongs to document B
    assert g.neighbours([], 20) == [] and g.neighbours([3], 0) == []


def test_count_mentions_merges_overlapping_variants() -> None:
    g = SentenceGraph([Chunk("c", "Tom Sawyer met Tom. Tommy is not Tom. Toms? No. Tom Sawyer again.")])
    n, where = g.count_mentions(["Tom", "Tom Sawyer"])
    assert n == 4 and where == [0, 1, 3]


# -- parsing helpers --------------------------------------------------------------


def test_parse_keys_verdict_and_numbers() -> None:
    assert parse_keys("1. lighthouse\n2. Orla Brandt; the; guild, guild") == ["lighthouse", "Orla Brandt", "guild"]
    assert parse_keys("%%% ### the of") == []
    assert parse_verdict("  Yes, it is enough.") is True and parse_verdict("NO.") is False
    assert parse_verdict("Noted; yes") is True and parse_verdict("maybe") is None
    assert option_number("about 12 keepers") == 12 and option_number("Twelve") == 12 and option_number("none") is None


def test_a_runs_verdicts_are_counted_and_an_unreadable_one_is_none() -> None:
    run = Run()
    assert run.verdict(Reply('{"verdict": "YES"}', LLMUsage(), True), SUFFICIENT_FORMAT) is True
    assert run.verdict(Reply("No, not yet.", LLMUsage(), False), SUFFICIENT_FORMAT) is False
    assert run.verdict(Reply('{"verdict": "PERHAPS"}', LLMUsage(), True), SUFFICIENT_FORMAT) is None
    assert run.verdict(Reply("I cannot tell", LLMUsage(), False), SUFFICIENT_FORMAT) is None
    assert (run.verdicts, run.unreadable_verdicts) == (4, 2)


def test_key_lists_from_strict_and_free_replies() -> None:
    strict = Reply('{"keys": ["1. lighthouse", "Guild", "guild", "the"]}', LLMUsage(), True)
    assert key_list(strict, KEYS_FORMAT, 32) == ["lighthouse", "Guild"]
    assert key_list(Reply("lighthouse; Orla Brandt, keepers", LLMUsage(), False), KEYS_FORMAT, 2) == [
        "lighthouse",
        "Orla Brandt",
    ]
    assert key_list(Reply('{"keys": "not a list"}', LLMUsage(), True), KEYS_FORMAT, 32) == []
    assert key_list(None, KEYS_FORMAT, 32) == []


# -- the loop ---------------------------------------------------------------------


def loop_llm(verdicts: list[str], keys: str = "lighthouse, guild") -> ScriptedLLM:
    state = {"v": 0}

    def respond(prompt: str, **kw: Any) -> str:
        kind = kind_of(prompt)
        if kind == "is-counting":
            return " NO"
        if kind == "keys":
            return " " + keys
        if kind == "sufficient":
            state["v"] += 1
            return verdicts[state["v"] - 1]
        return " Orla Brandt"

    return ScriptedLLM(respond)


def test_loop_stops_on_yes_and_records_each_round() -> None:
    llm = loop_llm([" NO", " YES"])
    sel = sage(llm, iter_max=5, recall_index=2, neighbor_num=2, n_seeds=1, n_perturb=2).select(
        "Who founded the lighthouse guild?", DOC
    )
    rounds = [s for s in sel.trace if s["step"] == "round"]
    assert [r["sufficient"] for r in rounds] == [False, True]
    assert rounds[0]["keys"] == ["lighthouse", "guild"] and rounds[0]["retrieved"] == ["p1#s0", "p1#s2"]
    assert rounds[0]["neighbours"] == ["p0#s2", "p1#s1"]
    assert rounds[0]["importance"] == pytest.approx(0.0) and len(rounds[0]["lambdas"]) == 2
    assert sel.explanation.startswith("sufficient (YES) after round 2 of 5")
    assert sel.ids == ["p0#s2", "p1#s0", "p1#s1", "p1#s2"]  # document order
    assert sel.scores == [None, 2.0, None, 1.0]
    assert answer_of(sel).text == "Orla Brandt" and sel.meta["failures"] == []
    # is-counting, then per round: keys, 1 + 2 importance answers, verdict; the last clean answer is reused
    assert llm.kinds() == ["is-counting"] + ["keys", "answer", "answer", "answer", "sufficient"] * 2
    assert sel.usage.calls == len(llm.calls) == 11
    assert answer_of(sel).tokens_in > 0


def test_loop_stops_at_iter_max_without_yes() -> None:
    llm = loop_llm([" NO"] * 10)
    sel = sage(llm, iter_max=2, n_perturb=0).select("Who founded the lighthouse guild?", DOC)
    rounds = [s for s in sel.trace if s["step"] == "round"]
    assert rounds[0]["sufficient"] is False and "sufficient" not in rounds[1]  # the last round asks none
    assert sel.explanation.startswith("no YES verdict within iter_max=2 rounds")
    assert llm.kinds().count("keys") == 2


@pytest.mark.parametrize("choices", [None, ["Orla Brandt", "Jory"]])
def test_the_last_rounds_verdict_is_skipped_and_nothing_else_changes(choices: list[str] | None) -> None:
    """Algorithm 1 ends after round iter_max whatever its verdict: asking it (final_verdict=true) adds
    the importance's answers and the verdict at the end and changes no other call, nor the answer."""
    runs = {}
    for final_verdict in (False, True):
        llm = loop_llm([" NO"] * 10)
        sel = sage(llm, iter_max=2, n_perturb=2, voter_num=3, final_verdict=final_verdict).select(
            "Who founded the lighthouse guild?", DOC, choices=choices
        )
        runs[final_verdict] = (llm, sel)
    (short, fast), (literal, slow) = runs[False], runs[True]
    per_round = ["keys", "answer", "answer", "answer", "sufficient"]
    if choices is None:  # the last round's clean answer is the final answer
        assert literal.kinds() == ["is-counting", *per_round, *per_round]
        assert short.kinds() == ["is-counting", *per_round, "keys", "answer"]
    else:  # a multiple-choice question is voted on (3 voters): the last round needs no clean answer
        assert literal.kinds() == ["is-counting", *per_round, *per_round, *["answer"] * 3]
        assert short.kinds() == ["is-counting", *per_round, "keys", *["answer"] * 3]
        assert short.calls[-3:] == literal.calls[-3:]  # the same votes
    n = len(short.calls) - (3 if choices else 0)
    assert short.calls[:n] == literal.calls[:n]  # every call before the skipped ones, unchanged
    assert (fast.ids, answer_of(fast).text) == (slow.ids, answer_of(slow).text)
    assert sum(s.get("prompt_tokens", 0) for s in fast.trace) < sum(s.get("prompt_tokens", 0) for s in slow.trace)
    assert fast.usage.calls == len(short.calls) and fast.config["final_verdict"] is False


def test_final_verdict_must_be_a_bool() -> None:
    with pytest.raises(InputError, match="final_verdict"):
        sage(loop_llm([]), final_verdict="yes")


def test_importance_is_one_minus_mean_cosine_of_clean_and_perturbed_answers() -> None:
    def respond(prompt: str, **kw: Any) -> str:
        kind = kind_of(prompt)
        if kind in ("is-counting", "sufficient"):
            return "YES" if kind == "sufficient" else "NO"
        if kind == "keys":
            return "lighthouse"
        # the clean context answers "abc"; a perturbed one (no intact "lighthouse") answers "xyz"
        return "abc" if "lighthouse was rebuilt" in prompt else "xyz"

    sel = sage(ScriptedLLM(respond), n_perturb=3, lambda_low=1.0).select("When was the lighthouse rebuilt?", DOC)
    rnd = sel.trace[-1]
    assert rnd["lambdas"] == [1.0, 1.0, 1.0]
    e = const_embed(["abc", "xyz"])
    cos = e[0] @ e[1] / np.linalg.norm(e[0]) / np.linalg.norm(e[1])
    assert rnd["importance"] == pytest.approx(1 - cos, abs=1e-4)
    assert rnd["importance"] > 0.99


# -- counting ---------------------------------------------------------------------

COUNT_DOC = [
    Chunk("c0", "The keeper lit the lamp. Another keeper slept.", position=0),
    Chunk("c1", "Keepers rotate weekly. The head keeper, called Old Jory, keeps a log.", position=1),
    Chunk("c2", "Nobody else climbs the tower.", position=2),
]


def counting_llm(answer: str = "7") -> ScriptedLLM:
    def respond(prompt: str, **kw: Any) -> str:
        kind = kind_of(prompt)
        if kind == "is-counting":
            return " YES"
        if kind == "targets":
            return " keeper, keepers, Old Jory"
        return answer  # an LLM guess, never used for counting

    return ScriptedLLM(respond)


def test_counting_question_is_answered_by_enumeration_not_the_llm() -> None:
    llm = counting_llm("7")
    sel = sage(llm).select("How many times is a keeper mentioned?", COUNT_DOC)
    assert answer_of(sel).text == "5"  # keeper x3, Keepers, Old Jory; the LLM would have said 7
    assert answer_of(sel).route == "counting" and llm.kinds() == ["is-counting", "targets"]
    assert sel.ids == ["c0#s0", "c0#s1", "c1#s0", "c1#s1"]
    assert sel.trace[-1]["count"] == 5 and sel.trace[-1]["variants"] == ["keeper", "keepers", "Old Jory"]


def test_counting_multiple_choice_picks_the_nearest_number() -> None:
    sel = sage(counting_llm()).select(
        "How many times is a keeper mentioned?", COUNT_DOC, choices=["Two", "4 times", "six", "10"]
    )
    assert answer_of(sel).text == "B. 4 times"  # |4-5| = |6-5|: the first wins


def test_counting_with_no_numeric_option_explores_instead() -> None:
    llm = counting_llm("B")
    sel = sage(llm, voter_num=3, n_perturb=0).select("How many keepers?", COUNT_DOC, choices=["few", "many"])
    assert answer_of(sel).route == "explore" and "no option holds a number" in sel.meta["failures"][0]


# -- multiple choice voting -------------------------------------------------------


def test_voters_sample_with_distinct_seeds_and_the_majority_wins() -> None:
    replies = iter(["B. because", "(c)", "B", "A", "I think"])

    def respond(prompt: str, **kw: Any) -> str:
        kind = kind_of(prompt)
        if kind in ("is-counting", "sufficient"):
            return "NO" if kind == "is-counting" else "YES"
        if kind == "keys":
            return "lighthouse"
        return next(replies) if kw.get("temperature") else "A"

    llm = ScriptedLLM(respond)
    sel = sage(llm, voter_num=5, n_perturb=0).select("Who?", DOC, choices=["Orla", "Jory", "Velm"])
    assert answer_of(sel).text == "B. Jory"
    votes = [kw for p, kw in llm.calls if kw.get("temperature")]
    assert [kw["seed"] for kw in votes] == [1, 2, 3, 4, 5] and all(kw["temperature"] == 0.8 for kw in votes)
    assert sel.trace[-1] == {"step": "vote", "votes": ["B", "C", "B", "A"], "voters": 5}


# -- robustness -------------------------------------------------------------------


def test_nonsense_llm_still_yields_an_answer_and_recorded_failures() -> None:
    llm = ScriptedLLM(lambda prompt, **kw: "%%% ### !!!")
    sel = sage(llm).select("Who founded the lighthouse guild?", DOC)
    assert answer_of(sel).text == "%%% ### !!!"
    fails = sel.meta["failures"]
    assert any("counting verdict unreadable" in f for f in fails)
    assert sum("used the question's words" in f for f in fails) == 2
    assert sum("sufficiency verdict unreadable" in f for f in fails) == 1  # the last round asks none
    assert sel.trace[1]["keys_from"] == "question (fallback)" and "p1#s0" in sel.ids
    mc = sage(llm, voter_num=3).select("Who?", DOC, choices=["Orla", "Jory"])
    assert answer_of(mc).text == "A. Orla" and any("no voter named an option" in f for f in mc.meta["failures"])


def test_a_prompt_past_the_window_ends_exploration_without_crashing() -> None:
    class Small(ScriptedLLM):
        def complete(self, prompt: Any, **kw: Any) -> Completion:
            if kind_of(prompt) == "sufficient":  # the longest prompt: evidence plus instructions
                raise LLMContextLengthError("too long", status_code=400)
            return super().complete(prompt, **kw)

    llm = Small(lambda p, **kw: {"is-counting": "NO", "keys": "lighthouse"}.get(kind_of(p), "Orla"))
    sel = sage(llm, n_perturb=0, iter_max=3).select("lighthouse guild keepers?", DOC)
    assert sel.explanation.startswith("stopped in round 1: the evidence exceeds the model's window")
    assert any("sage-sufficient: prompt exceeds the model's window" in f for f in sel.meta["failures"])
    assert answer_of(sel).text == "Orla" and llm.kinds() == ["is-counting", "keys", "answer"]


def test_registry_spec_config_and_bad_parameters() -> None:
    llm = loop_llm(["YES"])
    s = get_selector("sage@3", llm=llm)
    assert isinstance(s, SAGE) and s.iter_max == 3
    cfg = s.config()
    assert (cfg["recall_index"], cfg["neighbor_num"], cfg["voter_num"], cfg["iter_max"]) == (25, 20, 10, 3)
    with pytest.raises(ValueError, match="needs an LLM"):
        get_selector("sage")
    with pytest.raises(ValueError, match="recall_index must be >= 1"):
        SAGE(llm, recall_index=0)
    # ctxsel.select passes multiple-choice options through, and never scores (no embedder needed)
    sel = select("Who founded the guild?", DOC, "sage[n_perturb=0,voter_num=1]", llm=llm, choices=["Orla", "Jory"])
    assert re.match(r"^[AB]\. ", answer_of(sel).text)


def test_empty_document_answers_without_evidence() -> None:
    llm = ScriptedLLM(lambda p, **kw: "unknown")
    sel = sage(llm).select("Who?", [])
    assert sel.ids == [] and answer_of(sel).text == "unknown" and sel.explanation.startswith("empty context")
