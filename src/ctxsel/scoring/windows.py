"""Texts longer than an embedding model's window: count them, and cut them into windows that fit.

A sentence-transformers model reads at most ``max_seq_length`` tokens
(all-MiniLM-L6-v2: 256, special tokens included) and silently drops the
rest, so a chunk whose relevant sentence lies past the window scores as if
the sentence were not there. The dense scorer uses :class:`ModelWindow` to
say how many texts were cut (a warning and ``Selection.meta["truncated"]``)
and, with ``long_chunks="max_window"``, to score such a chunk by its best
window (max-pooling over overlapping windows).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from ctxsel.errors import TruncationWarning

#: What the dense scorer does with a chunk longer than the model's window.
LONG_CHUNKS = ("truncate", "max_window")

#: Consecutive windows share this fraction of their tokens, so a sentence that straddles one
#: window's end lies whole in the next (for sentences up to a quarter of the window).
WINDOW_OVERLAP = 0.25


class ModelWindow:
    """The model's tokenizer without truncation, and the window it is truncated to."""

    def __init__(self, tokenizer: Any, max_seq_length: int) -> None:
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_str(tokenizer.to_str())  # a copy: the backend's keeps truncating
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        n_special = len(self.tokenizer.encode("", add_special_tokens=True).ids)
        #: text tokens that fit beside the special tokens ([CLS] ... [SEP])
        self.capacity = max(1, int(max_seq_length) - n_special)
        self.max_seq_length = int(max_seq_length)

    @classmethod
    def of(cls, backend: Any) -> ModelWindow | None:
        """The window of a backend that exposes ``tokenizer`` (a ``tokenizers.Tokenizer``) and
        ``max_seq_length``; None for one that does not (then nothing is checked). A backend with a
        window of its own (``model_window``: the llama.cpp one) gives that."""
        if isinstance(own := getattr(backend, "model_window", None), ModelWindow):
            return own
        tok, length = getattr(backend, "tokenizer", None), getattr(backend, "max_seq_length", None)
        if tok is None or not length or not hasattr(tok, "to_str"):
            return None
        return cls(tok, length)

    @classmethod
    def from_folder(cls, path: str) -> ModelWindow | None:
        """The window of a sentence-transformers folder (``tokenizer.json`` and the
        ``max_seq_length`` of ``sentence_bert_config.json``) without loading the model."""
        import json
        from pathlib import Path

        folder = Path(path)
        tok_file, config = folder / "tokenizer.json", folder / "sentence_bert_config.json"
        if not (tok_file.is_file() and config.is_file()):
            return None
        try:
            from tokenizers import Tokenizer

            length = json.loads(config.read_text(encoding="utf-8")).get("max_seq_length")
            return cls(Tokenizer.from_file(str(tok_file)), int(length)) if length else None
        except (ImportError, OSError, ValueError, TypeError):  # an unusual folder: no checks, as with no folder
            return None

    def n_tokens(self, texts: Sequence[str]) -> list[int]:
        """Text tokens of each text (special tokens not counted)."""
        return [len(e.ids) for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]

    def windows(self, text: str) -> list[str]:
        """Overlapping pieces of ``text`` that each fit the window, cut where a word starts
        (a cut inside a word would re-tokenise differently and could overflow)."""
        offsets = self.tokenizer.encode(text, add_special_tokens=False).offsets
        n = len(offsets)
        size = max(1, self.capacity - 2)  # two tokens of slack for re-tokenisation at the edges
        step = max(1, int(size * (1 - WINDOW_OVERLAP)))
        out: list[str] = []
        start = 0
        while start < n:
            end = min(n, start + size)
            if end < n:  # back off to a word start, unless the window is one long word
                cut = end
                while cut > start + step and offsets[cut][0] == offsets[cut - 1][1]:
                    cut -= 1
                end = cut if cut > start + step else end
            out.append(text[offsets[start][0] : offsets[end - 1][1]])
            if end >= n:
                break
            nxt = start + step
            while nxt < end and offsets[nxt][0] == offsets[nxt - 1][1]:  # start the next window at a word
                nxt += 1
            start = nxt if nxt < end else start + step
        return out


def truncation_note(question: bool, n_truncated: int, n_windowed: int, window: ModelWindow) -> dict[str, Any]:
    """The ``Selection.meta["truncated"]`` record."""
    return {
        "question": question,
        "chunks": n_truncated,
        "windowed_chunks": n_windowed,
        "window_tokens": window.max_seq_length,
    }


def _caller_stacklevel() -> int:
    """The stacklevel of the first frame outside ctxsel, so the warning points at the user's call."""
    import sys
    from pathlib import Path

    package = str(Path(__file__).resolve().parents[1])
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level


def warn_truncation(note: dict[str, Any], model_id: str, already: set[str]) -> None:
    """Warn about what the window cut, saying how to avoid it: once per kind (question, chunks) and
    scorer, recorded in ``already``, so an eval over 100 questions warns once, not 100 times (each
    Selection's ``meta["truncated"]`` still counts every call)."""
    parts = []
    if note["question"] and "question" not in already:
        parts.append("the question")
    if note["chunks"] and "chunks" not in already:
        parts.append(f"{note['chunks']} chunk(s)")
    if not parts:
        return
    already.update(k for k in ("question", "chunks") if note[k])
    advice = ("shorten the question; " if note["question"] else "") + (
        "score long chunks by their best window with dense[long_chunks=max_window] (CLI: --long-chunks max_window) "
        "or chunk smaller"
        if note["chunks"]
        else ""
    )
    warnings.warn(
        f"{' and '.join(parts)} longer than {model_id}'s {note['window_tokens']}-token window: only the start was "
        f"read ({advice.rstrip('; ')}; this scorer warns once, Selection.meta['truncated'] counts every call)",
        TruncationWarning,
        stacklevel=_caller_stacklevel(),
    )
