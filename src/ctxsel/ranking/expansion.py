"""The expansion stages (second hop, mention links) and their spec, ``hop[m=1,weight=0.7]+links``."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ctxsel.errors import InputError, SpecError
from ctxsel.ranking.links import KEY_SOURCES
from ctxsel.specs import parse_options, split_spec, split_top

# The defaults are the settings chosen on hotpotqa-long's 80 training questions
# (experiments/recall_hotpotqa.py); none was chosen on the 20 test questions.


@dataclass(frozen=True)
class SecondHop:
    """Re-score with the question plus the top ``m`` chunks' text; merge with ``weight``."""

    m: int = 1
    weight: float = 0.7

    def __post_init__(self) -> None:
        _check_m(self.m, "hop")
        if not 0 <= self.weight <= 1:
            raise InputError(f"hop weight must be in [0, 1], got {self.weight!r}")


@dataclass(frozen=True)
class MentionLinks:
    """Boost the chunks that the top ``m`` chunks (and the question) name."""

    m: int = 1
    boost: float = 0.3
    question: bool = True
    keys: str = "titles"

    def __post_init__(self) -> None:
        _check_m(self.m, "links")
        if not (isinstance(self.boost, (int, float)) and 0 <= self.boost < 1e6):
            raise InputError(f"links boost must be a number >= 0 and below 1e6, got {self.boost!r}")
        if self.keys not in KEY_SOURCES:
            raise InputError(f"links keys must be one of {', '.join(KEY_SOURCES)}, got {self.keys!r}")


def _check_m(m: object, stage: str) -> None:
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise InputError(f"{stage} m must be an integer >= 1, got {m!r}")


@dataclass(frozen=True)
class Expansion:
    """One or both stages, applied hop first."""

    hop: SecondHop | None = None
    links: MentionLinks | None = None

    @property
    def pinned(self) -> int:
        """How many of the first hop's best chunks stay on top."""
        return max((s.m for s in (self.hop, self.links) if s is not None), default=0)

    def spec(self) -> str:
        parts = []
        for name, stage in (("hop", self.hop), ("links", self.links)):
            if stage is not None:
                parts.append(f"{name}[" + ",".join(f"{k}={_fmt(v)}" for k, v in asdict(stage).items()) + "]")
        return "+".join(parts)


def _fmt(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else f"{v:g}" if isinstance(v, float) else str(v)


def parse_expansion(spec: str | Expansion | None) -> Expansion | None:
    """An :class:`Expansion` from a spec (see the module docstring); None or ``""``/``"none"`` for none."""
    if spec is None or isinstance(spec, Expansion):
        return spec
    if not spec.strip() or spec.strip().lower() == "none":
        return None
    stages: dict[str, Any] = {}
    for part in split_top(spec, "+", f"expansion {spec!r}"):
        try:
            name, main, body = split_spec(part, "expansion stage")
        except SpecError:
            name, main, body = "", None, None
        if name not in ("hop", "links") or main is not None:
            raise SpecError(
                f"bad expansion stage {part.strip()!r} in {spec!r}: use hop, links, hop[m=1,weight=0.7] "
                "or links[m=1,boost=0.3], joined by +"
            )
        if name in stages:
            raise SpecError(f"expansion {spec!r} names {name} twice")
        options = parse_options(body, f"expansion {spec!r}")
        cls = SecondHop if name == "hop" else MentionLinks
        try:
            stages[name] = cls(**options)
        except TypeError as e:
            allowed = ", ".join(cls.__dataclass_fields__)
            raise SpecError(f"bad option for expansion stage {name} in {spec!r} ({e}); it takes {allowed}") from None
    return Expansion(hop=stages.get("hop"), links=stages.get("links"))


__all__ = ["Expansion", "MentionLinks", "SecondHop", "parse_expansion"]
