"""The expansion stages (second hop, mention links) and their spec, ``hop[m=1,weight=0.7]+links``."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ctxsel.errors import InputError, InputTypeError, SpecError
from ctxsel.options import Options, build_options, check_value, declared, option
from ctxsel.ranking.links import KEY_SOURCES
from ctxsel.specs import check_spec_length, parse_options, split_spec, split_top

# The defaults are the settings chosen on hotpotqa-long's 80 training questions
# (experiments/recall_hotpotqa.py); none was chosen on the 20 test questions.


def _checked(stage: Options, name: str) -> None:
    """Each option of an expansion stage built directly (``SecondHop(m=2.0)``) by its declaration, the
    rule every method and stage option follows (:mod:`ctxsel.options`): 2.0 is 2, 2.5 and "yes" are errors."""
    for info in declared(type(stage)).values():
        try:
            value = check_value(info, getattr(stage, info.attr))
        except InputError as e:
            raise type(e)(f"{name} {e}") from None
        object.__setattr__(stage, info.attr, value)


@dataclass(frozen=True)
class SecondHop(Options):
    """Re-score with the question plus the top ``m`` chunks' text; merge with ``weight``."""

    m: int = option(1, minimum=1, doc="how many of the first hop's best chunks widen the question")
    weight: float = option(0.7, minimum=0, maximum=1, doc="the second hop's share of the merged score")

    def __post_init__(self) -> None:
        _checked(self, "hop")


@dataclass(frozen=True)
class MentionLinks(Options):
    """Boost the chunks that the top ``m`` chunks (and the question) name."""

    m: int = option(1, minimum=1, doc="how many of the best chunks' mentions count")
    boost: float = option(0.3, minimum=0, below=1e6, doc="added to a named chunk's score")
    question: bool = option(True, doc="the question's mentions count too")
    keys: str = option("titles", doc=f"what names a chunk: one of {', '.join(KEY_SOURCES)}")

    def __post_init__(self) -> None:
        _checked(self, "links")
        if self.keys not in KEY_SOURCES:
            raise InputError(f"links keys must be one of {', '.join(KEY_SOURCES)}, got {self.keys!r}")


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
    if not isinstance(spec, str):
        raise InputTypeError(f"expand must be a spec string such as 'hop' or 'hop+links', got {type(spec).__name__}")
    if not spec.strip() or spec.strip().lower() == "none":
        return None
    check_spec_length(spec, "expansion spec")
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
        cls: type[SecondHop | MentionLinks] = SecondHop if name == "hop" else MentionLinks
        try:  # the one check of an option's value (ctxsel.options), as for methods and stages
            stages[name] = build_options(cls, options, kind="expansion stage", owner=name)
        except SpecError:
            raise
        except InputError as e:
            raise SpecError(f"bad options for expansion stage {name!r}: {e}") from None
    return Expansion(hop=stages.get("hop"), links=stages.get("links"))


__all__ = ["Expansion", "MentionLinks", "SecondHop", "parse_expansion"]
