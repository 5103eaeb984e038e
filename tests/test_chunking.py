"""Chunking: paragraphs, sentences, token windows, semantic segments."""

from __future__ import annotations

import numpy as np
import pytest

from ctxsel.chunking import (
    chunk_text,
    split_paragraphs,
    split_semantic,
    split_sentences,
    split_token_windows,
)
from ctxsel.tokens import count_tokens, decode, encode
from ctxsel.types import Chunk


class TestParagraphs:
    def test_blank_lines_separate(self) -> None:
        text = "First para\nstill first.\n\n  Second para.  \n \n\n\nThird.\n"
        assert split_paragraphs(text) == ["First para\nstill first.", "Second para.", "Third."]

    def test_empty_and_whitespace(self) -> None:
        assert split_paragraphs("") == []
        assert split_paragraphs(" \n\n \t\n") == []

    def test_chunk_ids_positions_tokens(self) -> None:
        chunks = chunk_text("Alpha one.\n\nBeta two.\n\nGamma three.")
        assert [c.id for c in chunks] == ["0", "1", "2"]
        assert [c.position for c in chunks] == [0, 1, 2]
        assert {c.doc_id for c in chunks} == {"doc"}
        assert [c.text for c in chunks] == ["Alpha one.", "Beta two.", "Gamma three."]
        assert [c.n_tokens for c in chunks] == [count_tokens(c.text) for c in chunks]

    def test_named_document_ids(self) -> None:
        chunks = chunk_text("Alpha.\n\nBeta.", doc_id="handbook")
        assert [c.id for c in chunks] == ["handbook#0", "handbook#1"]
        assert {c.doc_id for c in chunks} == {"handbook"}


class TestSentences:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("Dr. Smith arrived. He sat down.", ["Dr. Smith arrived.", "He sat down."]),
            ("J. R. R. Tolkien wrote it. It is long.", ["J. R. R. Tolkien wrote it.", "It is long."]),
            ("Is it? Yes! It is.", ["Is it?", "Yes!", "It is."]),
            ("Mr. and Mrs. Brown met Prof. Green.", ["Mr. and Mrs. Brown met Prof. Green."]),
            ("See e.g. Smith and Jones. The end.", ["See e.g. Smith and Jones.", "The end."]),
            ("The U.S. Army came. It left.", ["The U.S. Army came.", "It left."]),
            ("It weighs 3.5 kg. Then 4 more.", ["It weighs 3.5 kg.", "Then 4 more."]),
            ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
            ("It ended (finally.) Next one.", ["It ended (finally.)", "Next one."]),
            ("lower case after. does not split", ["lower case after. does not split"]),
            ("Wait... What happened?", ["Wait...", "What happened?"]),
            ("Built in 1923. 1958 was later.", ["Built in 1923.", "1958 was later."]),
            ("No end punctuation", ["No end punctuation"]),
        ],
    )
    def test_rules(self, text: str, expected: list[str]) -> None:
        assert split_sentences(text) == expected

    def test_newlines_always_split(self) -> None:
        assert split_sentences("- item one\n- item two\n\nPara two. Next.") == [
            "- item one",
            "- item two",
            "Para two.",
            "Next.",
        ]

    def test_chunk_text_sentences(self) -> None:
        chunks = chunk_text("A cat sat. A dog ran!", "sentences", doc_id="story")
        assert [(c.id, c.text, c.position) for c in chunks] == [
            ("story#0", "A cat sat.", 0),
            ("story#1", "A dog ran!", 1),
        ]


class TestTokenWindows:
    TEXT = " ".join(f"word{i} is here." for i in range(400))

    def test_step_and_overlap_600_100(self) -> None:
        ids = encode(self.TEXT)
        assert len(ids) > 1500  # several windows
        windows = split_token_windows(self.TEXT, 600, 100)
        step = 500
        # window j is exactly tokens [j*step, j*step + 600) of the document
        for j, w in enumerate(windows):
            assert w == decode(ids[j * step : j * step + 600])
        # consecutive windows share exactly 100 tokens
        for a, b in zip(windows, windows[1:]):
            ta, tb = encode(a), encode(b)
            assert ta[-100:] == tb[:100]
        # the last window reaches the end, and none but the last is short
        assert windows[-1].endswith(self.TEXT[-20:])
        assert all(len(encode(w)) == 600 for w in windows[:-1])
        n = len(ids)
        expected_count = 1 + max(0, -(-(n - 600) // step))
        assert len(windows) == expected_count

    @pytest.mark.parametrize(("n_tokens", "expected"), [(1, 1), (600, 1), (601, 2), (1100, 2), (1101, 3)])
    def test_window_count_at_boundaries(self, n_tokens: int, expected: int) -> None:
        ids = encode(self.TEXT)[:n_tokens]
        text = decode(ids)
        assert encode(text) == ids
        assert len(split_token_windows(text, 600, 100)) == expected

    def test_no_overlap(self) -> None:
        ids = encode(self.TEXT)[:250]
        windows = split_token_windows(decode(ids), 100, 0)
        assert windows == [decode(ids[0:100]), decode(ids[100:200]), decode(ids[200:250])]

    def test_empty(self) -> None:
        assert split_token_windows("", 600, 100) == []
        assert chunk_text("", "tokens") == []

    @pytest.mark.parametrize(("size", "overlap"), [(0, 0), (-5, 0), (10, 10), (10, 11), (10, -1)])
    def test_bad_sizes(self, size: int, overlap: int) -> None:
        with pytest.raises(ValueError):
            split_token_windows("text", size, overlap)

    def test_windows_never_split_characters(self) -> None:
        text = "龘靐齉爩 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 " * 300
        assert len(encode(text)) > 1200  # characters here take several tokens each
        windows = split_token_windows(text, 600, 100)
        assert len(windows) >= 2
        assert not any("\ufffd" in w for w in windows)
        assert all(w in text for w in windows)

    def test_chunk_text_tokens(self) -> None:
        chunks = chunk_text(self.TEXT, "tokens", size=600, overlap=100, doc_id="long")
        assert chunks[0].id == "long#0"
        assert chunks[0].n_tokens == 600
        assert [c.position for c in chunks] == list(range(len(chunks)))


def _topic_embed(calls: list[list[str]]):
    """Deterministic embedding: a unit vector per topic word found in the sentence."""
    topics = {
        "cat": [1.0, 0.0, 0.0],
        "dog": [0.0, 1.0, 0.0],
        "fish": [0.0, 0.0, 1.0],
        "kitten": [0.75, float(np.sqrt(1 - 0.75**2)), 0.0],
    }

    def embed(sentences: list[str]) -> np.ndarray:
        calls.append(list(sentences))
        rows = []
        for s in sentences:
            low = s.lower()
            key = next(k for k in ("kitten", "cat", "dog", "fish") if k in low)
            rows.append(topics[key])
        return np.asarray(rows, dtype=np.float32)

    return embed


class TestSemantic:
    def test_splits_where_similarity_drops(self) -> None:
        calls: list[list[str]] = []
        text = "The cat purrs. A cat naps. The dog barks. Dogs run. A fish swims."
        parts = split_semantic(text, _topic_embed(calls), threshold=0.75)
        assert parts == ["The cat purrs. A cat naps.", "The dog barks. Dogs run.", "A fish swims."]
        assert calls == [["The cat purrs.", "A cat naps.", "The dog barks.", "Dogs run.", "A fish swims."]]

    def test_similarity_equal_to_threshold_does_not_split(self) -> None:
        # cat . kitten = 0.75 exactly (float32): not below the threshold
        parts = split_semantic("A cat sat. A kitten sat.", _topic_embed([]), threshold=0.75)
        assert parts == ["A cat sat. A kitten sat."]
        parts = split_semantic("A cat sat. A kitten sat.", _topic_embed([]), threshold=0.76)
        assert parts == ["A cat sat.", "A kitten sat."]

    def test_single_sentence_never_embeds(self) -> None:
        def boom(_: list[str]) -> np.ndarray:
            raise AssertionError("embed must not be called")

        assert split_semantic("Only one cat sentence.", boom) == ["Only one cat sentence."]
        assert split_semantic("", boom) == []

    def test_chunk_text_semantic_uses_given_embed(self) -> None:
        chunks = chunk_text("The cat purrs. The dog barks.", "semantic", doc_id="pets", embed=_topic_embed([]))
        assert [(c.id, c.text, c.doc_id, c.position) for c in chunks] == [
            ("pets#0", "The cat purrs.", "pets", 0),
            ("pets#1", "The dog barks.", "pets", 1),
        ]


def test_unknown_method() -> None:
    with pytest.raises(ValueError, match="unknown chunking method 'lines'"):
        chunk_text("text", "lines")  # type: ignore[arg-type]


def test_text_must_be_str() -> None:
    with pytest.raises(TypeError, match="text must be str"):
        chunk_text(b"bytes")  # type: ignore[arg-type]


# -- Markdown headings ------------------------------------------------------------------------------------------

MARKDOWN = """Intro text.

# Title

## A

para a1

para a2

## B
## C
Text c
```
# not a heading
```

Setext
======

x

# Last"""


def _rows(chunks: list[Chunk]) -> list[tuple[str, str, dict[str, object]]]:
    return [(c.id, c.text, c.meta) for c in chunks]


class TestHeadings:
    def test_headings_join_the_text_after_them(self) -> None:
        assert _rows(chunk_text(MARKDOWN)) == [
            ("0", "Intro text.", {}),
            ("1", "# Title\n## A\npara a1", {"heading": "A", "headings": ["Title", "A"]}),
            ("2", "para a2", {"heading": "A", "headings": ["Title", "A"]}),
            ("3", "## B", {"heading": "B", "headings": ["Title", "B"]}),  # no text of its own
            ("4", "## C\nText c\n```\n# not a heading\n```", {"heading": "C", "headings": ["Title", "C"]}),
            ("5", "Setext\n======\nx", {"heading": "Setext", "headings": ["Setext"]}),
            ("6", "# Last", {"heading": "Last", "headings": ["Last"]}),  # the document ends
        ]
        assert [c.position for c in chunk_text(MARKDOWN)] == list(range(7))

    def test_separate_splits_as_plain_text(self) -> None:
        chunks = chunk_text(MARKDOWN, headings="separate")
        assert [c.text for c in chunks] == split_paragraphs(MARKDOWN)
        assert [c.text for c in chunks][:4] == ["Intro text.", "# Title", "## A", "para a1"]
        assert all(c.meta == {} for c in chunks)

    def test_sentences_named_document(self) -> None:
        chunks = chunk_text("# Tickets\n\nAdults pay 8 euros. Children pay 4.", "sentences", doc_id="h")
        assert _rows(chunks) == [
            ("h#0", "# Tickets\nAdults pay 8 euros.", {"heading": "Tickets", "headings": ["Tickets"]}),
            ("h#1", "Children pay 4.", {"heading": "Tickets", "headings": ["Tickets"]}),
        ]

    def test_semantic_segments_do_not_cross_a_heading(self) -> None:
        text = "# Cats\n\nThe cat purrs. A kitten sat.\n\n# More cats\n\nThe cat naps."
        chunks = chunk_text(text, "semantic", embed=_topic_embed([]))
        assert [c.text for c in chunks] == ["# Cats\nThe cat purrs. A kitten sat.", "# More cats\nThe cat naps."]
        assert [c.meta["heading"] for c in chunks] == ["Cats", "More cats"]

    @pytest.mark.parametrize(
        ("line", "title"),
        [
            ("# Title", "Title"),
            ("###### Six", "Six"),
            ("## Closed ##", "Closed"),
            ("   # Indented three", "Indented three"),
            ("# C#", "C#"),
        ],
    )
    def test_atx_titles(self, line: str, title: str) -> None:
        (chunk,) = chunk_text(f"{line}\n\nBody.")
        assert chunk.text == f"{line.strip()}\nBody."
        assert chunk.meta == {"heading": title, "headings": [title]}

    @pytest.mark.parametrize(
        "text", ["#hashtag\n\nBody.", "####### seven\n\nBody.", "    # code\n\nBody.", "- item\n---\n\nBody."]
    )
    def test_not_headings(self, text: str) -> None:
        chunks = chunk_text(text)
        assert [c.text for c in chunks] == split_paragraphs(text)
        assert all(c.meta == {} for c in chunks)

    def test_a_heading_mid_paragraph_starts_a_section(self) -> None:
        assert _rows(chunk_text("Before.\n## Tickets\nAfter.")) == [
            ("0", "Before.", {}),
            ("1", "## Tickets\nAfter.", {"heading": "Tickets", "headings": ["Tickets"]}),
        ]

    def test_a_long_section_keeps_its_heading_on_every_piece(self) -> None:
        body = " ".join(f"Sentence number {i} is here." for i in range(40))
        chunks = chunk_text(f"# Long\n\n{body}", max_chunk_tokens=50)
        assert len(chunks) > 2
        assert chunks[0].text.startswith("# Long\nSentence number 0 is here.")
        assert all(c.n_tokens <= 50 for c in chunks)
        assert all(c.meta == {"heading": "Long", "headings": ["Long"]} for c in chunks)
        assert " ".join(c.text for c in chunks) == f"# Long\n{body}"

    def test_token_windows_ignore_headings(self) -> None:
        text = "# Title\n\nBody text."
        assert [c.text for c in chunk_text(text, "tokens")] == [text]

    def test_unknown_headings_option(self) -> None:
        with pytest.raises(ValueError, match="unknown headings option 'drop'"):
            chunk_text("text", headings="drop")  # type: ignore[arg-type]
