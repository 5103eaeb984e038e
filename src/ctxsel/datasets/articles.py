"""Generated long-article QA, shaped unlike HotpotQA: fictional encyclopedia articles (towns,
companies, species, people), each a heading and 15-40 paragraphs in several sections, and questions
whose answers sit in one or two labelled gold paragraphs.

    from ctxsel.datasets.articles import make_examples, write_jsonl
    examples = make_examples(seed=0, sets=2, articles=16)
    write_jsonl(examples, "articles.jsonl")   # ctxsel's generic JSONL

or ``ctxsel eval --dataset 'articles[seed=0,sets=2,articles=16]'`` (``load_dataset`` builds it).

Why it is hard in other ways than HotpotQA: the articles of one kind share their templates, so each
question has confusable distractors (another town's charter year, another firm's founder); names are
built from shared stems (Wexbridge, Wexmoor) and recur across articles (a person born in a town, a
firm based in it); questions paraphrase the fact ("obtain the right to run a weekly market" for "a
charter ... allowed its merchants to hold a weekly market"), so word overlap alone does not find it;
about a third of the paragraphs say "the town" or "the chemist" instead of the name; filler sentences
name other entities of the same kind ("often compared with Wexmoor"); and a fact sits among filler
sentences, in paragraphs of varied length that talk about the same entity without holding the answer.

One *set* is ``articles`` articles in a shuffled order, one chunk per paragraph (a section heading is
a short chunk of its own); every question of the set gets the whole set as its context (its article
plus the others, some 300-600 paragraphs). Each article asks three one-paragraph questions and one
two-paragraph question (two facts, one answer string per gold paragraph). Answer strings are unique
within an article. Deterministic from ``seed`` (``random.Random``, no salted hash); no network.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxsel.errors import InputError
from ctxsel.types import Chunk, Example

KINDS = ("town", "company", "species", "person")

STEMS = ("Wex", "Dun", "Orv", "Brae", "Tal", "Kest", "Marl", "Ash", "Fen", "Hollin", "Cor", "Lind")
TOWN_ENDS = ("bridge", "moor", "ford", "ham", "wick", "stead", "mere", "holt")
FIRM_ENDS = (" Tools", " Foods", " Motors", " Textiles", " Optics", " Mills")
FIRST = ("Mira", "Tomas", "Elin", "Jonas", "Ida", "Pavel", "Rosa", "Anton", "Greta", "Lukas", "Nora", "Emil")
LAST = ("Castel", "Verhoef", "Lindqvist", "Moreau", "Halloran", "Brandt", "Okafor", "Sandoval", "Kerr", "Ivanov")
GENUS = ("Tarsel", "Quill", "Marsh", "Lantern", "Copper", "Ridge", "Veil", "Ember")
ANIMAL = ("warbler", "newt", "beetle", "vole", "moth", "finch", "skink", "shrew")
RIVERS = ("Aln", "Dee", "Ouse", "Tarn", "Leven", "Wyre", "Calder", "Esk")
MONTHS = ("March", "April", "May", "June", "July", "August", "September", "October")
PRODUCTS = ("pressure cookers", "bicycle gears", "wool blankets", "reading lamps", "seed drills", "canned herring")
FOODS = ("mayflies", "fallen acorns", "snails", "lichen", "aphids", "grass seeds")
REGIONS = ("the Serrat uplands", "the Kolvan delta", "the Ormen coast", "the Tessel basin", "the Vardo hills")
STATUSES = ("vulnerable", "endangered", "near threatened", "critically endangered", "least concern")
SUBJECTS = {
    "chemistry": "the chemist",
    "naval architecture": "the naval architect",
    "botany": "the botanist",
    "economics": "the economist",
    "medieval history": "the historian",
    "hydrology": "the hydrologist",
}
# How a paragraph refers to its subject when it does not name it (a person: by the trade studied)
REFER = {"town": "the town", "company": "the company", "species": "species"}  # "the {name}" -> "the species"
ANONYMOUS = 1 / 3  # share of paragraphs that do not name their subject
UNIS = ("the University of Calder", "Marlow Polytechnic", "the Royal College of Tessel", "Esk Institute")
PRIZES = ("the Halvard Medal", "the Orsini Prize", "the Calder Award", "the Lumen Fellowship")

# Per kind: section -> fact templates (paragraph, question). ``{ans}`` marks the answer slot; the
# question paraphrases the paragraph rather than copying its words.
FACTS: dict[str, dict[str, list[tuple[str, str, str]]]] = {
    "town": {
        "History": [
            (
                "{name} grew up around a river crossing. A charter granted in {ans} allowed its merchants "
                "to hold a weekly market, and the number of households doubled within a generation.",
                "When did {name} obtain the right to run a weekly market?",
                "year",
            ),
            (
                "A fire swept through the timber houses near the square of {name}, and the rebuilding in stone "
                "was paid for by {ans}, a wool trader who later served as mayor.",
                "Who funded the reconstruction of {name} after its great blaze?",
                "person",
            ),
        ],
        "Geography": [
            (
                "{name} sits on a limestone plateau roughly {ans} above sea level, and winters there are "
                "noticeably colder than in the valley towns below.",
                "How high up is {name} located?",
                "metres",
            ),
            (
                "The {ans} crosses {name} from north to south, and three stone bridges link the old quarter "
                "with the newer districts on the far bank.",
                "What watercourse runs through {name}?",
                "river",
            ),
        ],
        "Economy": [
            (
                "Today the largest employer in {name} is {ans}, whose works on the eastern edge of town make "
                "{product} for export.",
                "Which firm provides the most jobs in {name}?",
                "firm",
            ),
            (
                "At the most recent census {name} counted {ans} residents, a figure that has risen slowly "
                "since the closure of the old quarries.",
                "What is the population of {name}?",
                "count",
            ),
        ],
        "Culture": [
            (
                "Each year in {ans} {name} holds a lantern procession along the river, followed by three days "
                "of music in the market square.",
                "During which month does {name} celebrate its yearly festival?",
                "month",
            ),
        ],
        "Transport": [
            (
                "The railway reached {name} in {ans}, when a branch line was opened to carry stone to the coast; "
                "passenger trains followed a few months later.",
                "In what year did trains first arrive in {name}?",
                "year",
            ),
        ],
    },
    "company": {
        "History": [
            (
                "{name} was set up by {ans} as a small workshop repairing farm machinery, and it took on its "
                "first apprentices two years later.",
                "Who started {name}?",
                "person",
            ),
            (
                "In {ans} {name} moved its head office out of its original premises into a converted "
                "warehouse by the harbour.",
                "When did {name} relocate its headquarters?",
                "year",
            ),
        ],
        "Products": [
            (
                "The line that made {name} famous is its range of {ans}, sold under the same name for decades "
                "and still assembled by hand.",
                "What goods is {name} best known for?",
                "product",
            ),
        ],
        "Operations": [
            (
                "{name} employs about {ans} people, most of them at its main plant in {town} and the rest at "
                "two regional depots.",
                "How large is the workforce of {name}?",
                "count",
            ),
            (
                "Sales at {name} reached {ans} million euros in the last financial year, helped by new orders "
                "from abroad.",
                "What was the annual turnover of {name}?",
                "money",
            ),
        ],
        "Leadership": [
            (
                "Since the founder retired, {name} has been run by {ans}, a former engineer who rose through "
                "the firm's own workshops.",
                "Who is the current chief executive of {name}?",
                "person",
            ),
        ],
    },
    "species": {
        "Description": [
            (
                "Adults of the {name} measure about {ans} from head to tail, and females are slightly larger "
                "than males.",
                "How long is an adult {name}?",
                "length",
            ),
        ],
        "Distribution": [
            (
                "The {name} is found only in {ans}, where it keeps to damp ground near slow streams.",
                "Where does the {name} live in the wild?",
                "region",
            ),
        ],
        "Behaviour": [
            (
                "The {name} feeds mostly on {ans}, foraging at dusk and resting under bark during the day.",
                "What does the {name} eat?",
                "food",
            ),
            (
                "In spring the females of the {name} lay a clutch of {ans} eggs, which hatch after about three weeks.",
                "How many eggs does a {name} produce in one breeding?",
                "small",
            ),
        ],
        "Taxonomy": [
            (
                "The {name} was first given a scientific description by {ans}, who collected specimens on an "
                "expedition along the coast.",
                "Which naturalist first formally described the {name}?",
                "person",
            ),
        ],
        "Conservation": [
            (
                "Conservation bodies currently list the {name} as {ans}, mainly because the wetlands it "
                "depends on are being drained.",
                "What is the threat category of the {name}?",
                "status",
            ),
        ],
    },
    "person": {
        "Early life": [
            (
                "{name} was born in {ans}, the youngest of four children of a schoolteacher and a printer.",
                "What is the birthplace of {name}?",
                "town",
            ),
            (
                "{name} went on to read {subject} at {ans}, graduating with honours.",
                "Which institution did {name} attend?",
                "uni",
            ),
        ],
        "Career": [
            (
                "After some years abroad {name} joined {ans}, where the work on new designs won the firm its "
                "largest contracts.",
                "Which company hired {name} after the years abroad?",
                "firm",
            ),
            (
                "The work of {name} was recognised with {ans}, presented at a ceremony in the capital.",
                "What honour was {name} given?",
                "prize",
            ),
        ],
        "Later life": [
            (
                "{name} married {ans}, a violinist, and the couple settled in a house overlooking the harbour.",
                "Who was the spouse of {name}?",
                "person",
            ),
            (
                "{name} died in {ans} after a short illness and was buried in the family plot.",
                "In which year did {name} pass away?",
                "year",
            ),
        ],
    },
}

# Filler sentences per kind: about the entity (``{name}``) or another of its kind (``{other}``),
# never holding an answer (no numbers, no other names).
FILLER: dict[str, list[str]] = {
    "town": [
        "Visitors often remark on the narrow lanes of {name} and the painted shutters of its older houses.",
        "The parish church has been restored several times, most recently with money raised by residents.",
        "Local historians disagree about the origin of the name, and several competing stories are told.",
        "A weekly newspaper covers the affairs of {name} and the surrounding villages.",
        "Farmland surrounds the town on three sides, with orchards on the gentler slopes.",
        "The council has discussed a bypass for years, but no plan has yet been approved.",
        "Several footpaths lead from the square up to the old watchtower and the viewpoint beyond it.",
        "Schools in {name} serve children from a wide area, and many pupils arrive by bus.",
        "Guidebooks often compare {name} with {other}, though residents of both insist they have little in common.",
        "Many families in {other} trace their roots to {name}, and the two towns share a football league.",
        "The old coaching inn still stands, though it now serves as a library and meeting hall.",
        "In summer the meadows along the water fill with walkers, anglers and grazing sheep.",
    ],
    "company": [
        "{name} has long described itself as a family business, even after outside investors arrived.",
        "Trade journals have praised the firm's attention to quality and its reluctance to cut corners.",
        "The company sponsors a youth football team and an annual science fair for local schools.",
        "Critics have argued that the firm was slow to adopt new production methods.",
        "Its catalogue has grown steadily, though a few early designs remain in production.",
        "Staff turnover at {name} is low, and many employees have worked there for their whole careers.",
        "The firm's archive, kept in the basement of the head office, is open to researchers by request.",
        "Analysts often set {name} beside {other}, its closest rival, though the two serve different customers.",
        "A planned merger with {other} was called off after long talks, and both firms stayed independent.",
        "Its delivery vans, painted in the company colours, are a familiar sight on regional roads.",
        "Apprentices spend their first year moving between departments before choosing a trade.",
    ],
    "species": [
        "The {name} is rarely seen, and much of what is known comes from a handful of field studies.",
        "The {name} is easily confused with the {other}, which shares part of its range.",
        "Some authors once treated the {name} and the {other} as a single species.",
        "Surveys are hampered by the dense vegetation and the animal's secretive habits.",
        "Its colouring offers good camouflage against leaf litter and wet stones.",
        "Local people have several names for the animal, and it appears in a number of folk tales.",
        "Predators include owls, snakes and, near villages, domestic cats.",
        "Like many of its relatives, the {name} is sensitive to changes in water quality.",
        "Young animals disperse in late summer, often travelling surprisingly far from where they hatched.",
        "Researchers have fitted small tags to a few individuals to follow their movements.",
        "Its call is a thin, repeated note that is easy to miss among other sounds of the marsh.",
    ],
    "person": [
        "Friends described {name} as reserved in public but warm and talkative among colleagues.",
        "Letters kept in a private collection show a lively interest in politics and music.",
        "Several biographies have appeared, though they differ on the details of the early years.",
        "{name} was known for long walks and for keeping detailed notebooks on every project.",
        "Colleagues recalled a habit of working late and arriving early the next morning.",
        "A portrait painted in middle age now hangs in a regional gallery.",
        "Students remembered the lectures as demanding but generous with time and advice.",
        "{name} corresponded for years with {other}, and the letters show a friendly rivalry.",
        "Comparisons with {other} were common in the press, though {name} disliked them.",
        "A small museum now keeps the desk, the instruments and a collection of photographs.",
    ],
}


@dataclass
class Article:
    id: str
    kind: str
    name: str
    paragraphs: list[str]  # the heading of each section is a paragraph of its own
    facts: list[tuple[int, str, str]]  # (paragraph index, question, answer)


class _Names:
    """Unique names drawn from shared stems, so articles of one kind have confusable names."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def pick(self, make: Any) -> str:
        for _ in range(1000):
            name = str(make(self.rng))
            if name not in self.used:
                self.used.add(name)
                return name
        raise InputError("ran out of generated names: ask for fewer articles")

    def town(self) -> str:
        return self.pick(lambda r: r.choice(STEMS) + r.choice(TOWN_ENDS))

    def firm(self) -> str:
        return self.pick(
            lambda r: r.choice(STEMS) + r.choice(("ane", "ell", "ico", "ford", "ix")) + r.choice(FIRM_ENDS)
        )

    def person(self) -> str:
        return self.pick(lambda r: f"{r.choice(FIRST)} {r.choice(LAST)}")

    def species(self) -> str:
        return self.pick(lambda r: f"{r.choice(GENUS)} {r.choice(ANIMAL)}")


def _answer(kind: str, rng: random.Random, names: _Names, towns: list[str], firms: list[str], used: set[str]) -> str:
    """A value of ``kind`` not yet used in this article (so an answer string is in one paragraph only)."""
    draws: dict[str, Callable[[], str]] = {
        "year": lambda: str(rng.randint(1450, 1990)),
        "person": names.person,
        "metres": lambda: f"{rng.randint(120, 990)} metres",
        "river": lambda: f"river {rng.choice(RIVERS)}",
        "firm": lambda: rng.choice(firms),
        "count": lambda: f"{rng.randint(1200, 48000):,}",
        "month": lambda: rng.choice(MONTHS),
        "product": lambda: rng.choice(PRODUCTS),
        "money": lambda: f"{rng.randint(12, 950)}",
        "length": lambda: f"{rng.randint(4, 60)} centimetres",
        "region": lambda: rng.choice(REGIONS),
        "food": lambda: rng.choice(FOODS),
        "small": lambda: rng.choice(("three", "four", "five", "six", "seven", "eight")),
        "status": lambda: rng.choice(STATUSES),
        "town": lambda: rng.choice(towns),
        "uni": lambda: rng.choice(UNIS),
        "prize": lambda: rng.choice(PRIZES),
    }
    for _ in range(200):
        value = draws[kind]()
        if value not in used and all(value not in u and u not in value for u in used):
            used.add(value)
            return value
    raise InputError(f"could not draw a distinct {kind} answer")


def _sentence_case(text: str) -> str:
    return re.sub(r"(^|[.!?]\s+)([a-z])", lambda m: m.group(1) + m.group(2).upper(), text)


def build_article(
    aid: str,
    kind: str,
    name: str,
    rng: random.Random,
    names: _Names,
    towns: list[str],
    firms: list[str],
    peers: list[str],
) -> Article:
    """One article: a title line, then per section a heading, its fact paragraphs and filler, in a random
    order, padded with filler to a random length of 15-40 paragraphs. A fact paragraph is its fact among
    zero to three filler sentences on each side; a filler paragraph has three to seven sentences. About a third
    of the paragraphs do not name their subject ("the town"); ``peers`` (others of its kind) are named in
    some filler sentences."""
    target = rng.randint(15, 40)
    sections = FACTS[kind]
    n_filler = max(0, target - 1 - sum(1 + len(f) for f in sections.values()))
    per_section = [n_filler // len(sections) + (1 if i < n_filler % len(sections) else 0) for i in range(len(sections))]
    used: set[str] = {name}
    subject = rng.choice(sorted(SUBJECTS))
    refer = SUBJECTS[subject] if kind == "person" else REFER[kind]
    context = {"product": rng.choice(PRODUCTS), "subject": subject}
    context["town"] = rng.choice([t for t in towns if t != name] or towns)
    bank = [f for f in FILLER[kind] if peers or "{other}" not in f]

    def filler(k: int) -> list[str]:
        return [f.replace("{other}", rng.choice(peers)) if peers else f for f in rng.sample(bank, k)]

    def named(text: str, **slots: str) -> str:
        subject_name = refer if rng.random() < ANONYMOUS else name
        return _sentence_case(text.format(name=subject_name, **slots))

    paragraphs = [f"{name} ({kind})"]
    facts: list[tuple[int, str, str]] = []
    for (section, templates), n in zip(sections.items(), per_section):
        paragraphs.append(f"{name}: {section}")
        body: list[tuple[str, str, str] | None] = [*templates, *([None] * n)]
        rng.shuffle(body)
        for item in body:
            if item is None:
                paragraphs.append(named(" ".join(filler(rng.randint(3, 7)))))
                continue
            para, question, slot = item
            ans = _answer(slot, rng, names, towns, [f for f in firms if f != name] or firms, used)
            around = filler(rng.randint(0, 3) + rng.randint(0, 3))
            cut = rng.randint(0, len(around))
            fact = para.replace("{name}", "{subject_name}").format(**context, ans=ans, subject_name="{name}")
            paragraphs.append(named(" ".join([*around[:cut], fact, *around[cut:]])))
            facts.append((len(paragraphs) - 1, question.format(name=name), ans))
    return Article(aid, kind, name, paragraphs, facts)


def make_set(seed: int, set_index: int, n_articles: int, questions: int = 4) -> list[Example]:
    """One set: ``n_articles`` articles (kinds in turn), shuffled, and ``questions`` per article."""
    if n_articles < 2:
        raise InputError(f"articles must be >= 2, got {n_articles}")
    if questions < 1:
        raise InputError(f"questions must be >= 1, got {questions}")
    rng = random.Random(f"ctxsel-articles:{seed}:{set_index}")
    names = _Names(rng)
    kinds = [KINDS[i % len(KINDS)] for i in range(n_articles)]
    towns = [names.town() for k in kinds if k == "town"] or [names.town()]
    firms = [names.firm() for k in kinds if k == "company"] or [names.firm()]
    own = {"town": iter(towns), "company": iter(firms)}
    subjects = [next(own[k]) if k in own else (names.person() if k == "person" else names.species()) for k in kinds]
    articles = []
    for i, (kind, name) in enumerate(zip(kinds, subjects)):
        peers = [n for k, n in zip(kinds, subjects) if k == kind and n != name]
        articles.append(build_article(f"s{set_index}a{i:02d}", kind, name, rng, names, towns, firms, peers))
    rng.shuffle(articles)
    chunks: list[Chunk] = []
    first: dict[str, int] = {}
    doc = f"articles-{seed}-{set_index}"
    for a in articles:
        first[a.id] = len(chunks)
        for j, text in enumerate(a.paragraphs):
            chunks.append(Chunk(id=f"{a.id}p{j:02d}", text=text, doc_id=doc, position=len(chunks)))
    examples = []
    for a in sorted(articles, key=lambda a: a.id):
        facts = list(a.facts)
        rng.shuffle(facts)
        asked: list[list[tuple[int, str, str]]] = [[f] for f in facts[: max(1, questions - 1)]]
        if questions > 1 and len(facts) >= len(asked) + 2:  # one question on two facts
            asked.append(facts[len(asked) : len(asked) + 2])
        for q, group in enumerate(asked):
            if len(group) == 1:
                question = group[0][1]
            else:
                second = group[1][1][0].lower() + group[1][1][1:]
                question = f"{group[0][1].rstrip('?')}, and {second}"
            examples.append(
                Example(
                    id=f"{a.id}q{q}",
                    question=question,
                    chunks=chunks,
                    gold_ids=[f"{a.id}p{i:02d}" for i, _, _ in group],
                    answers=[ans for _, _, ans in group],
                    meta={
                        "article": a.name,
                        "kind": a.kind,
                        "set": set_index,
                        "gold_paragraphs": len(group),
                        # whether every gold paragraph names its subject (else it says "the town" and the like)
                        "gold_named": all(a.name in a.paragraphs[i] for i, _, _ in group),
                    },
                )
            )
    return examples


def make_examples(seed: int = 0, sets: int = 2, articles: int = 16, questions: int = 4) -> list[Example]:
    """``sets`` independent sets of ``articles`` articles each (module doc)."""
    if sets < 1:
        raise InputError(f"sets must be >= 1, got {sets}")
    return [e for s in range(sets) for e in make_set(seed, s, articles, questions)]


def to_json(e: Example) -> dict[str, Any]:
    """An example as a line of ctxsel's generic JSONL (``ctxsel.datasets.jsonl``)."""
    return {
        "id": e.id,
        "question": e.question,
        "chunks": [{"id": c.id, "text": c.text, "doc_id": c.doc_id, "position": c.position} for c in e.chunks],
        "gold_ids": list(e.gold_ids),
        "answers": list(e.answers),
        "meta": dict(e.meta),
    }


def write_jsonl(examples: list[Example], path: str | Path) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("".join(json.dumps(to_json(e), ensure_ascii=False) + "\n" for e in examples), encoding="utf-8")


def load_articles(options: dict[str, Any], limit: int | None = None) -> list[Example]:
    """``articles`` or ``articles[seed=0,sets=2,articles=16,questions=4]``, as :func:`load_dataset` reads it."""
    valid = ("seed", "sets", "articles", "questions")
    for key, value in options.items():
        if key not in valid:
            raise InputError(f"dataset 'articles' has no option {key!r}; it takes {', '.join(valid)}")
        if not isinstance(value, int) or isinstance(value, bool):
            raise InputError(f"dataset 'articles': {key} must be an integer, got {value!r}")
    examples = make_examples(**options)
    return examples if limit is None else examples[:limit]


__all__ = ["KINDS", "Article", "build_article", "load_articles", "make_examples", "make_set", "to_json", "write_jsonl"]
