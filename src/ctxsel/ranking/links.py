"""The mention graph of a pool: chunk i links to chunk j when i's text names j.

What "names j" means, per chunk j (its *keys*), by ``keys``:

- ``"titles"`` (the default): its title or heading: ``chunk.meta["title"]`` or
  ``chunk.meta["heading"]``; else, when at least half the pool has one, a
  leading label -- the text before the first ``": "`` when it is short (at
  most 8 words and 80 characters, no sentence end in it), as in HotpotQA's
  ``"Title: paragraph"`` chunks. A parenthesised disambiguator is dropped
  (``"Kiss and Tell (1945 film)"`` is named as ``"Kiss and Tell"``). A pool
  without titles gets no links, so expansion by links changes nothing there;
- ``"entities"``: its salient names -- runs of capitalised words
  (``"Edith Marlowe"``, ``"Kestrel Optical Works"``) found in at most
  ``max(2, 2%)`` of the chunks, so a name shared by everything links nothing.
  Opt-in, because rows that share common names (airports, cities in the
  HoloBench-style tables) would link to each other without naming each other;
- ``"auto"``: titles when at least half the chunks have one, else entities.

Matching is word-exact and case-insensitive over ``\\w+`` tokens. All keys go
into one word trie (a dict from first word to the keys starting with it,
longest first), and each chunk's text is scanned once, so building the graph
is linear in the pool's words -- not one regular expression per (chunk,
title) pair. A graph is kept in memory for the last few pools (keyed by the
chunks' ids, texts and titles), so a pool queried many times builds it once.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ctxsel.errors import InputError
from ctxsel.scoring.keywords import STOPWORDS
from ctxsel.types import Chunk

KeySource = Literal["auto", "titles", "entities"]
KEY_SOURCES: tuple[str, ...] = ("auto", "titles", "entities")

_WORD = re.compile(r"\w+", re.UNICODE)
_LABEL = re.compile(r"^\s*#*\s*(?P<label>[^:\n]{1,80}?)\s*:\s")
_PAREN = re.compile(r"\s*\([^()]*\)\s*$")
# a run of capitalised words, allowing "of", "the", "and", "de" between them ("Bank of England")
_NAME = re.compile(r"\b[A-Z][\w'\-]*(?:\s+(?:(?:of|the|and|de|da|von|van|del|la|le)\s+)?[A-Z][\w'\-]*)*")
_SENTENCE_END = re.compile(r"[.!?]\s")
_MAX_LABEL_WORDS = 8
_CACHE_SIZE = 8


def words(text: str) -> list[str]:
    """Lower-cased word tokens, the unit mentions are matched on."""
    return _WORD.findall(text.lower())


def title_of(chunk: Chunk) -> str | None:
    """The chunk's title or heading: its meta's, else its leading label (see the module docstring), or None."""
    return meta_title(chunk) or leading_label(chunk)


def meta_title(chunk: Chunk) -> str | None:
    for key in ("title", "heading"):
        value = chunk.meta.get(key) if chunk.meta else None
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def leading_label(chunk: Chunk) -> str | None:
    m = _LABEL.match(chunk.text)
    if m is None:
        return None
    label = m.group("label").strip()
    if len(label.split()) > _MAX_LABEL_WORDS or _SENTENCE_END.search(label):
        return None
    return label


def _key_tokens(phrase: str) -> tuple[str, ...] | None:
    """A phrase as a match key, or None when it is too weak to name anything
    (only stopwords, or one word shorter than 3 characters)."""
    toks = tuple(words(_PAREN.sub("", phrase)))
    if not toks or all(t in STOPWORDS for t in toks):
        return None
    if len(toks) == 1 and len(toks[0]) < 3:
        return None
    return toks


def _salient_names(chunks: Sequence[Chunk]) -> list[set[tuple[str, ...]]]:
    """Per chunk, its capitalised names that occur in few chunks of the pool."""
    names: list[set[tuple[str, ...]]] = []
    df: dict[tuple[str, ...], int] = defaultdict(int)
    for c in chunks:
        found: set[tuple[str, ...]] = set()
        for m in _NAME.finditer(c.text):
            phrase = m.group(0)
            toks = _key_tokens(phrase)
            if toks is None:
                continue
            # a single capitalised word at a sentence start is usually just a sentence start
            at_start = m.start() == 0 or c.text[: m.start()].rstrip()[-1:] in (".", "!", "?", ":", "\n")
            if len(toks) == 1 and (at_start or toks[0] in STOPWORDS):
                continue
            found.add(toks)
        names.append(found)
        for toks in found:
            df[toks] += 1
    limit = max(2, int(0.02 * len(chunks)))
    return [{t for t in found if df[t] <= limit} for found in names]


class PhraseIndex:
    """A word trie over key phrases: which keys occur in a text, in one pass."""

    def __init__(self, keys: Iterable[tuple[tuple[str, ...], int]]) -> None:
        by_first: dict[str, list[tuple[tuple[str, ...], int]]] = defaultdict(list)
        for toks, owner in keys:
            by_first[toks[0]].append((toks, owner))
        for entries in by_first.values():
            entries.sort(key=lambda e: -len(e[0]))
        self._by_first = dict(by_first)

    def owners_in(self, text: str) -> set[int]:
        """The owners of every key that occurs in ``text`` as whole words."""
        toks = words(text)
        found: set[int] = set()
        by_first = self._by_first
        for i, t in enumerate(toks):
            entries = by_first.get(t)
            if entries is None:
                continue
            for key, owner in entries:
                if tuple(toks[i : i + len(key)]) == key:
                    found.add(owner)
        return found


@dataclass
class MentionGraph:
    """``links[i]``: the chunks (indices) that chunk i names, itself excluded."""

    links: list[frozenset[int]]
    key_source: str
    n_keys: int
    index: PhraseIndex = field(repr=False)

    def mentioned_in(self, text: str) -> set[int]:
        """The chunks a free text (a question) names."""
        return self.index.owners_in(text)

    @property
    def n_links(self) -> int:
        return sum(len(s) for s in self.links)


def build_graph(chunks: Sequence[Chunk], keys: KeySource = "titles") -> MentionGraph:
    """The mention graph of ``chunks`` (uncached; :func:`mention_graph` caches)."""
    if keys not in KEY_SOURCES:
        raise InputError(f"link keys must be one of {', '.join(KEY_SOURCES)}, got {keys!r}")
    titles = [meta_title(c) for c in chunks]
    labels = [leading_label(c) for c in chunks]
    if sum(lb is not None for lb in labels) * 2 >= len(chunks):  # a labelled pool: labels are titles
        titles = [t or lb for t, lb in zip(titles, labels)]
    source = keys
    if keys == "auto":
        source = "titles" if sum(t is not None for t in titles) * 2 >= len(chunks) else "entities"
    owned: list[tuple[tuple[str, ...], int]] = []
    if source == "titles":
        for j, t in enumerate(titles):
            toks = _key_tokens(t) if t else None
            if toks:
                owned.append((toks, j))
    else:
        for j, names in enumerate(_salient_names(chunks)):
            owned.extend((toks, j) for toks in names)
    index = PhraseIndex(owned)
    links = [frozenset(index.owners_in(c.text) - {i}) for i, c in enumerate(chunks)]
    return MentionGraph(links, source, len(owned), index)


_GRAPHS: OrderedDict[str, MentionGraph] = OrderedDict()
_LOCK = threading.Lock()  # the service expands in worker threads
# the same list object asked again (one pool, many questions): no hashing at all
_LAST: list[tuple[Sequence[Chunk], str, int, MentionGraph]] = []


def pool_key(chunks: Sequence[Chunk], keys: str) -> str:
    h = hashlib.sha256(keys.encode())
    for c in chunks:
        title = c.meta.get("title") or c.meta.get("heading") or "" if c.meta else ""
        h.update(f"{c.id}\0{title}\0".encode("utf-8", "surrogatepass"))
        h.update(c.text.encode("utf-8", "surrogatepass"))
        h.update(b"\1")
    return h.hexdigest()


def mention_graph(chunks: Sequence[Chunk], keys: KeySource = "titles") -> MentionGraph:
    """The pool's mention graph, built once and kept for the last few pools.

    The list asked for last is recognised by identity and length (Chunks are
    frozen; a list changed in place without changing its length is not
    supported), any other by a hash of its content.
    """
    with _LOCK:
        for pool, pool_keys, n, graph in _LAST:
            if pool is chunks and pool_keys == keys and n == len(chunks):
                return graph
    key = pool_key(chunks, keys)
    with _LOCK:
        cached = _GRAPHS.get(key)
        if cached is not None:
            _GRAPHS.move_to_end(key)
    if cached is not None:
        graph = cached
    else:
        graph = build_graph(chunks, keys)
        with _LOCK:
            _GRAPHS[key] = graph
            if len(_GRAPHS) > _CACHE_SIZE:
                _GRAPHS.popitem(last=False)
    if isinstance(chunks, (list, tuple)):
        with _LOCK:
            _LAST[:] = [(chunks, keys, len(chunks), graph)]
    return graph
