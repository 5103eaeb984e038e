"""SAGE's ``Disturb(E, lambda)``: character-level noise for the importance score.

The paper (App. B.1.4) perturbs the retrieved text with the string-noise
library: substitutions, insertions, deletions, transpositions, keyboard
slips, look-alike characters and OCR confusions, with each word swapped for
a noisy one with a probability that grows with lambda. That library is not
installable here, so this is a dependency-free equivalent with one rule a
test can check: **each word is perturbed independently with probability
lambda**, and a perturbed word always differs from the original (one edit,
drawn uniformly from the kinds above; a kind that cannot change the word,
e.g. a transposition of "aa", is redrawn). Edits never add or remove
whitespace, so the text keeps its word count and a reader can line the
words up again.
"""

from __future__ import annotations

import re

import numpy as np

from ctxsel.errors import InputError

_ROWS = ("1234567890", "qwertyuiop", "asdfghjkl", "zxcvbnm")


def _keyboard_neighbours() -> dict[str, str]:
    pos = {ch: (r, c) for r, row in enumerate(_ROWS) for c, ch in enumerate(row)}
    out: dict[str, str] = {}
    for ch, (r, c) in pos.items():
        near = [o for o, (r2, c2) in pos.items() if o != ch and abs(r - r2) <= 1 and abs(c - c2) <= 1]
        out[ch] = "".join(near)
    return out


KEYBOARD = _keyboard_neighbours()
#: Homoglyphs and digit/letter look-alikes (one character for one).
LOOKALIKE = {
    "a": "@4",
    "b": "68",
    "e": "3",
    "g": "9q",
    "i": "1l!",
    "l": "1I|",
    "o": "0",
    "s": "5$",
    "t": "7+",
    "z": "2",
    "0": "oO",
    "1": "lI",
    "5": "S",
    "8": "B",
    "O": "0Q",
    "I": "l1",
    "S": "5",
    "B": "8",
}
#: OCR confusions: character groups a scanner reads as one another.
OCR = (
    ("rn", "m"),
    ("m", "rn"),
    ("cl", "d"),
    ("d", "cl"),
    ("vv", "w"),
    ("w", "vv"),
    ("li", "h"),
    ("h", "li"),
    ("nn", "m"),
    ("ii", "u"),
    ("c", "e"),
    ("e", "c"),
)
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
KINDS = ("substitute", "insert", "delete", "transpose", "keyboard", "lookalike", "ocr")
_WORD = re.compile(r"\S+")


def _edit(word: str, kind: str, rng: np.random.Generator) -> str:
    n = len(word)
    i = int(rng.integers(n))
    if kind == "substitute":
        return word[:i] + _LETTERS[int(rng.integers(26))] + word[i + 1 :]
    if kind == "insert":
        return word[:i] + _LETTERS[int(rng.integers(26))] + word[i:]
    if kind == "delete":
        return word[:i] + word[i + 1 :] if n > 1 else word
    if kind == "transpose":
        if n < 2:
            return word
        i = int(rng.integers(n - 1))
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    if kind == "keyboard":
        near = KEYBOARD.get(word[i].lower(), "")
        return word[:i] + near[int(rng.integers(len(near)))] + word[i + 1 :] if near else word
    if kind == "lookalike":
        alts = LOOKALIKE.get(word[i], "")
        return word[:i] + alts[int(rng.integers(len(alts)))] + word[i + 1 :] if alts else word
    # ocr: replace one occurrence of a confusable group
    found = [(a, b) for a, b in OCR if a in word]
    if not found:
        return word
    a, b = found[int(rng.integers(len(found)))]
    starts = [m.start() for m in re.finditer(re.escape(a), word)]
    s = starts[int(rng.integers(len(starts)))]
    return word[:s] + b + word[s + len(a) :]


def perturb_word(word: str, rng: np.random.Generator) -> str:
    """One random edit that changes ``word`` (a substitution if nothing else does)."""
    for kind in rng.permutation(KINDS):
        out = _edit(word, str(kind), rng)
        if out != word and out:
            return out
    c = word[-1]
    return word[:-1] + ("x" if c != "x" else "y")


def disturb(text: str, lam: float, rng: np.random.Generator | int | None = None) -> str:
    """``text`` with each whitespace-separated word perturbed with probability ``lam``."""
    if not 0.0 <= lam <= 1.0:
        raise InputError(f"noise strength lambda must be in [0, 1], got {lam}")
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    return _WORD.sub(lambda m: perturb_word(m.group(0), gen) if gen.random() < lam else m.group(0), text)


def draw_lambda(rng: np.random.Generator, low: float = 0.3) -> float:
    """lambda ~ U(low, 1] (the paper's U(0.3, 1])."""
    return float(1.0 - rng.random() * (1.0 - low))


__all__ = ["KINDS", "disturb", "draw_lambda", "perturb_word"]
