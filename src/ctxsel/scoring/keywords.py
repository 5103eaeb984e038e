"""SAGE's lexical relevance: how many distinct non-stopword words a chunk
shares with a key set, ``|WordsOf(c) & keys|`` (SAGE, Sec. 3)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np

from ctxsel.types import Chunk

# A compact English stopword list (NLTK's, lower-cased); kept in code so the
# scorer needs no data download.
STOPWORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "s",
        "t",
        "don",
        "shouldn",
        "wasn",
        "weren",
        "won",
        "wouldn",
        "isn",
        "aren",
        "couldn",
        "didn",
        "doesn",
        "hadn",
        "hasn",
        "haven",
        "mustn",
        "needn",
    ]
)

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def words(text: str) -> set[str]:
    """Lower-cased non-stopword word set of a text."""
    return {w for w in _WORD.findall(text.lower()) if w not in STOPWORDS}


def key_words(keys: Iterable[str]) -> set[str]:
    """The non-stopword words of the keys (a key may be a phrase)."""
    return set().union(*(words(k) for k in keys))


def keyword_relevance(text: str, keys: Iterable[str]) -> int:
    return len(words(text) & key_words(keys))


class KeywordScorer:
    """Scores chunks by keyword overlap with the question (or given keys)."""

    name = "keywords"

    def score(self, question: str, chunks: Sequence[Chunk], keys: Iterable[str] | None = None) -> np.ndarray:
        keyset = key_words(keys) if keys is not None else words(question)
        return np.fromiter((len(words(c.text) & keyset) for c in chunks), dtype=np.float32, count=len(chunks))
