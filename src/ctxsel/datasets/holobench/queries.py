"""SQL query templates, their parameters and their natural-language questions.

A template is ``SELECT ... FROM {from} WHERE {where} ...``. Its ``where``
predicate (with the join condition in ``from_``) decides which rows the query
reads: the *relevant rows* of an instance are the rows of its tables that
take part in a result tuple of ``SELECT <t>._rid ... FROM {from} WHERE
{where}`` (for a join, both sides of each matching pair). The answer is the
query run by DuckDB on the rows that end up in the context.

Parameters come from fixed grids (thresholds, month and year ranges) or from
the data (origins, carriers, clarity grades ...), so the list of candidate
instances is the same for every seed; the generator picks among those that
have enough relevant text for the requested info amount.

Answer kinds: ``scalar`` (one value), ``list`` (one column, one item per
row) and ``pairs`` (two columns, rendered ``"key: value"``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ctxsel.datasets.holobench.tables import MONTHS

Kind = Literal["scalar", "list", "pairs"]
Frames = dict[str, Any]

MONTH_RANGES: tuple[tuple[int, int], ...] = (
    (1, 12),
    (1, 6),
    (7, 12),
    (1, 3),
    (4, 6),
    (7, 9),
    (10, 12),
    (3, 8),
    (5, 10),
    (2, 11),
    (1, 9),
    (4, 12),
)
ORIGINS = ("EWR", "JFK", "LGA")
FLIGHTS_AIRLINES = "flights JOIN airlines ON flights.carrier = airlines.carrier"
FLIGHTS_AIRPORTS = "flights JOIN airports ON flights.dest = airports.faa"


def sql_literal(v: Any) -> str:
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return repr(v)


def months_phrase(m1: int, m2: int) -> str:
    if (m1, m2) == (1, 12):
        return "in 2013"
    if m1 == m2:
        return f"in {MONTHS[m1 - 1]} 2013"
    return f"between {MONTHS[m1 - 1]} and {MONTHS[m2 - 1]} 2013"


@dataclass(frozen=True)
class QueryTemplate:
    id: str
    tables: tuple[str, ...]
    from_: str
    where: str
    sql: str  # with {from} and {where}
    question: str
    grid: Callable[[Frames], list[dict[str, Any]]]
    kind: Kind

    def _fields(self, params: dict[str, Any]) -> dict[str, Any]:
        f = dict(params)
        for k, v in params.items():
            f[f"{k}_sql"] = sql_literal(v)
        if "m1" in params:
            f["months"] = months_phrase(params["m1"], params["m2"])
        return f

    def render(self, params: dict[str, Any]) -> QueryInstance:
        f = self._fields(params)
        where = self.where.format(**f)
        return QueryInstance(
            template=self,
            params=dict(params),
            question=self.question.format(**f),
            where=where,
            sql=" ".join(self.sql.format(**{**f, "from": self.from_, "where": where}).split()),
            provenance_sql=(
                f"SELECT {', '.join(f'{t}._rid AS r{i}' for i, t in enumerate(self.tables))} "
                f"FROM {self.from_} WHERE {where}"
            ),
        )


@dataclass(frozen=True)
class QueryInstance:
    template: QueryTemplate
    params: dict[str, Any]
    question: str
    where: str
    sql: str
    provenance_sql: str

    @property
    def key(self) -> str:
        return f"{self.template.id}:{json.dumps(self.params, sort_keys=True)}"


def _grid(**axes: Any) -> list[dict[str, Any]]:
    """The product of named axes; an axis of tuples spreads over several keys
    when its name is 'a,b'."""
    out: list[dict[str, Any]] = [{}]
    for name, values in axes.items():
        keys = name.split(",") if "," in name else None
        nxt = []
        for base in out:
            for v in values:
                nxt.append({**base, **(dict(zip(keys, v)) if keys else {name: v})})
        out = nxt
    return out


def _month_grid(**axes: Any) -> Callable[[Frames], list[dict[str, Any]]]:
    return lambda t: _grid(**axes, **{"m1,m2": MONTH_RANGES})


def _airline_grid(t: Frames) -> list[dict[str, Any]]:
    counts = t["flights"]["carrier"].value_counts()
    big = t["airlines"][t["airlines"]["carrier"].isin(counts[counts >= 100].index)]["name"]
    return _grid(airline=sorted(big), **{"m1,m2": MONTH_RANGES})


def _tz_grid(t: Frames) -> list[dict[str, Any]]:
    used = t["airports"][t["airports"]["faa"].isin(set(t["flights"]["dest"]))]
    return _grid(tzone=sorted(set(used["tzone"])), **{"m1,m2": MONTH_RANGES})


def _carrier_origin_grid(t: Frames) -> list[dict[str, Any]]:
    return _grid(carrier=sorted(set(t["flights"]["carrier"])), origin=ORIGINS)


YEARS_GAP = ((1952, 2007), (1952, 1977), (1982, 2007), (1962, 1997), (1957, 2002), (1972, 2007), (1952, 1992))
YEARS_TX = ((2000, 2015), (2000, 2007), (2008, 2015), (2003, 2012), (2005, 2015), (2000, 2010), (2002, 2013))

TEMPLATES: tuple[QueryTemplate, ...] = (
    # ----------------------------------------------------------- flights
    QueryTemplate(
        "flights_count_origin",
        ("flights",),
        "flights",
        "origin = {origin_sql} AND month BETWEEN {m1} AND {m2}",
        "SELECT COUNT(*) AS n_flights FROM {from} WHERE {where}",
        "How many flights departed from {origin} {months}?",
        _month_grid(origin=ORIGINS),
        "scalar",
    ),
    QueryTemplate(
        "flights_avg_dep_delay_by_origin",
        ("flights",),
        "flights",
        "month BETWEEN {m1} AND {m2}",
        "SELECT origin, ROUND(AVG(dep_delay), 2) AS avg_dep_delay FROM {from} WHERE {where} "
        "GROUP BY origin ORDER BY origin",
        "What was the average departure delay in minutes (negative when flights left early) at each origin "
        "airport for flights {months}?",
        _month_grid(),
        "pairs",
    ),
    QueryTemplate(
        "flights_top_carriers_delayed",
        ("flights",),
        "flights",
        "dep_delay > {d} AND month BETWEEN {m1} AND {m2}",
        "SELECT carrier, COUNT(*) AS n_flights FROM {from} WHERE {where} "
        "GROUP BY carrier QUALIFY RANK() OVER (ORDER BY n_flights DESC) <= 5 ORDER BY n_flights DESC, carrier",
        "Which five carriers had the most flights that departed more than {d} minutes late {months} (with any "
        "ties for fifth place), and how many such flights did each have?",
        _month_grid(d=(5, 15, 30, 60)),
        "pairs",
    ),
    QueryTemplate(
        "flights_top_destinations",
        ("flights",),
        "flights",
        "origin = {origin_sql} AND month BETWEEN {m1} AND {m2}",
        "SELECT dest, COUNT(*) AS n_flights FROM {from} WHERE {where} "
        "GROUP BY dest QUALIFY RANK() OVER (ORDER BY n_flights DESC) <= 5 ORDER BY n_flights DESC, dest",
        "Which five destinations received the most flights from {origin} {months} (with any ties for fifth "
        "place), and how many flights did each receive?",
        _month_grid(origin=ORIGINS),
        "pairs",
    ),
    QueryTemplate(
        "flights_max_arr_delay_distance",
        ("flights",),
        "flights",
        "distance > {x}",
        "SELECT MAX(arr_delay) AS max_arr_delay FROM {from} WHERE {where}",
        "What was the longest arrival delay, in minutes, among flights that covered more than {x:,} miles?",
        lambda t: _grid(x=(300, 500, 750, 1000, 1500, 2000)),
        "scalar",
    ),
    QueryTemplate(
        "flights_avg_distance_airtime",
        ("flights",),
        "flights",
        "air_time > {t}",
        "SELECT ROUND(AVG(distance), 2) AS avg_distance FROM {from} WHERE {where}",
        "What was the average distance, in miles, of the flights that spent more than {t} minutes in the air?",
        lambda t: _grid(t=(45, 60, 90, 120, 180, 240)),
        "scalar",
    ),
    QueryTemplate(
        "flights_carrier_destinations",
        ("flights",),
        "flights",
        "carrier = {carrier_sql} AND origin = {origin_sql}",
        "SELECT DISTINCT dest FROM {from} WHERE {where} ORDER BY dest",
        "Which destinations did carrier {carrier} fly to from {origin}?",
        _carrier_origin_grid,
        "list",
    ),
    # ------------------------------------------------------------ joins
    QueryTemplate(
        "flights_airlines_top",
        ("flights", "airlines"),
        FLIGHTS_AIRLINES,
        "flights.origin = {origin_sql} AND flights.month BETWEEN {m1} AND {m2}",
        "SELECT airlines.name, COUNT(*) AS n_flights FROM {from} WHERE {where} "
        "GROUP BY airlines.name QUALIFY RANK() OVER (ORDER BY n_flights DESC) <= 5 "
        "ORDER BY n_flights DESC, airlines.name",
        "Which five airlines, by full name, operated the most flights from {origin} {months} (with any ties for "
        "fifth place), and how many flights did each operate?",
        _month_grid(origin=ORIGINS),
        "pairs",
    ),
    QueryTemplate(
        "flights_airline_avg_arr_delay",
        ("flights", "airlines"),
        FLIGHTS_AIRLINES,
        "airlines.name = {airline_sql} AND flights.month BETWEEN {m1} AND {m2}",
        "SELECT ROUND(AVG(flights.arr_delay), 2) AS avg_arr_delay FROM {from} WHERE {where}",
        "What was the average arrival delay, in minutes (negative when early), of the flights operated by "
        "{airline} {months}?",
        _airline_grid,
        "scalar",
    ),
    QueryTemplate(
        "flights_airports_tzone",
        ("flights", "airports"),
        FLIGHTS_AIRPORTS,
        "airports.tzone = {tzone_sql} AND flights.month BETWEEN {m1} AND {m2}",
        "SELECT COUNT(*) AS n_flights FROM {from} WHERE {where}",
        "How many flights {months} flew to an airport in the {tzone} time zone?",
        _tz_grid,
        "scalar",
    ),
    QueryTemplate(
        "flights_airports_altitude",
        ("flights", "airports"),
        FLIGHTS_AIRPORTS,
        "airports.alt > {alt} AND flights.origin = {origin_sql}",
        "SELECT airports.name, COUNT(*) AS n_flights FROM {from} WHERE {where} "
        "GROUP BY airports.name QUALIFY RANK() OVER (ORDER BY n_flights DESC) <= 5 "
        "ORDER BY n_flights DESC, airports.name",
        "Which five destination airports more than {alt:,} feet above sea level received the most flights from "
        "{origin}, by airport name (with any ties for fifth place), and how many flights did each receive?",
        lambda t: _grid(alt=(100, 500, 1000, 2000), origin=ORIGINS),
        "pairs",
    ),
    # -------------------------------------------------------------- mpg
    QueryTemplate(
        "mpg_avg_hwy_by_class",
        ("mpg",),
        "mpg",
        "cyl <= {cyl}",
        "SELECT class, ROUND(AVG(hwy), 2) AS avg_hwy FROM {from} WHERE {where} GROUP BY class ORDER BY class",
        "What is the average highway mileage (mpg) of each vehicle class among cars with at most {cyl} cylinders?",
        lambda t: _grid(cyl=(4, 6, 8)),
        "pairs",
    ),
    QueryTemplate(
        "mpg_manufacturers_hwy",
        ("mpg",),
        "mpg",
        "hwy >= {h}",
        "SELECT manufacturer, COUNT(*) AS n_cars FROM {from} WHERE {where} "
        "GROUP BY manufacturer ORDER BY n_cars DESC, manufacturer",
        "Which manufacturers make cars that get at least {h} mpg on the highway, and how many such cars does "
        "each have?",
        lambda t: _grid(h=(12, 16, 20, 24)),
        "pairs",
    ),
    # --------------------------------------------------------- diamonds
    QueryTemplate(
        "diamonds_avg_price_by_cut",
        ("diamonds",),
        "diamonds",
        "carat {op} {c}",
        "SELECT cut, ROUND(AVG(price), 2) AS avg_price FROM {from} WHERE {where} GROUP BY cut ORDER BY cut",
        "What is the average price, in dollars, of the diamonds of each cut among those weighing {op_words} "
        "{c} carats?",
        lambda t: [
            {**g, "op_words": "less than" if g["op"] == "<" else "at least"}
            for g in _grid(op=("<", ">="), c=(0.4, 0.5, 0.7, 1.0, 1.5))
        ],
        "pairs",
    ),
    QueryTemplate(
        "diamonds_count_by_color",
        ("diamonds",),
        "diamonds",
        "price > {p}",
        "SELECT color, COUNT(*) AS n_diamonds FROM {from} WHERE {where} GROUP BY color ORDER BY color",
        "How many diamonds of each color grade are priced above ${p:,}?",
        lambda t: _grid(p=(500, 1000, 2000, 4000, 8000)),
        "pairs",
    ),
    QueryTemplate(
        "diamonds_max_price_clarity",
        ("diamonds",),
        "diamonds",
        "clarity = {clarity_sql}",
        "SELECT MAX(price) AS max_price FROM {from} WHERE {where}",
        "What is the highest price, in dollars, of a diamond with clarity {clarity}?",
        lambda t: _grid(clarity=sorted(set(t["diamonds"]["clarity"]))),
        "scalar",
    ),
    QueryTemplate(
        "diamonds_min_carat_cut",
        ("diamonds",),
        "diamonds",
        "cut = {cut_sql} AND price > {p}",
        "SELECT MIN(carat) AS min_carat FROM {from} WHERE {where}",
        "What is the smallest carat weight of a diamond of {cut} cut priced above ${p:,}?",
        lambda t: _grid(cut=sorted(set(t["diamonds"]["cut"])), p=(1000, 3000, 5000)),
        "scalar",
    ),
    # --------------------------------------------------------- penguins
    QueryTemplate(
        "penguins_avg_mass_by_species",
        ("penguins",),
        "penguins",
        "year BETWEEN {y1} AND {y2}",
        "SELECT species, ROUND(AVG(body_mass_g), 2) AS avg_body_mass_g FROM {from} WHERE {where} "
        "GROUP BY species ORDER BY species",
        "What was the average body mass, in grams, of each penguin species observed between {y1} and {y2}?",
        lambda t: _grid(**{"y1,y2": ((2007, 2009), (2007, 2008), (2008, 2009))}),
        "pairs",
    ),
    QueryTemplate(
        "penguins_count_by_island",
        ("penguins",),
        "penguins",
        "flipper_length_mm > {f}",
        "SELECT island, COUNT(*) AS n_penguins FROM {from} WHERE {where} GROUP BY island ORDER BY island",
        "How many penguins with a flipper longer than {f} mm were observed on each island?",
        lambda t: _grid(f=(170, 180, 190, 200)),
        "pairs",
    ),
    # -------------------------------------------------------- gapminder
    QueryTemplate(
        "gapminder_avg_life_by_continent",
        ("gapminder",),
        "gapminder",
        "year BETWEEN {y1} AND {y2}",
        "SELECT continent, ROUND(AVG(lifeExp), 2) AS avg_life_exp FROM {from} WHERE {where} "
        "GROUP BY continent ORDER BY continent",
        "What was the average life expectancy on each continent over all country records from {y1} to {y2}?",
        lambda t: _grid(**{"y1,y2": YEARS_GAP}),
        "pairs",
    ),
    QueryTemplate(
        "gapminder_top_gdp",
        ("gapminder",),
        "gapminder",
        "year BETWEEN {y1} AND {y2}",
        "SELECT country, MAX(gdpPercap) AS max_gdp_per_capita FROM {from} WHERE {where} "
        "GROUP BY country QUALIFY RANK() OVER (ORDER BY max_gdp_per_capita DESC) <= 5 "
        "ORDER BY max_gdp_per_capita DESC, country",
        "Which five countries reached the highest GDP per capita between {y1} and {y2} (with any ties for fifth "
        "place), and what was the highest value for each?",
        lambda t: _grid(**{"y1,y2": YEARS_GAP}),
        "pairs",
    ),
    QueryTemplate(
        "gapminder_count_life",
        ("gapminder",),
        "gapminder",
        "continent = {continent_sql} AND lifeExp > {x}",
        "SELECT COUNT(*) AS n_records FROM {from} WHERE {where}",
        "In how many records (one country in one year) from {continent} was life expectancy above {x} years?",
        lambda t: _grid(continent=sorted(set(t["gapminder"]["continent"])), x=(40, 50, 60, 70)),
        "scalar",
    ),
    QueryTemplate(
        "gapminder_low_life_countries",
        ("gapminder",),
        "gapminder",
        "lifeExp < {x} AND year BETWEEN {y1} AND {y2}",
        "SELECT DISTINCT country FROM {from} WHERE {where} ORDER BY country",
        "Which countries had a life expectancy below {x} years in at least one year between {y1} and {y2}?",
        lambda t: _grid(x=(40, 45, 50, 55), **{"y1,y2": YEARS_GAP}),
        "list",
    ),
    # --------------------------------------------------------- fastfood
    QueryTemplate(
        "fastfood_avg_calories",
        ("fastfood",),
        "fastfood",
        "protein > {p}",
        "SELECT restaurant, ROUND(AVG(calories), 2) AS avg_calories FROM {from} WHERE {where} "
        "GROUP BY restaurant ORDER BY restaurant",
        "What is the average calorie count, per restaurant, of the menu items with more than {p} g of protein?",
        lambda t: _grid(p=(0, 10, 20, 30)),
        "pairs",
    ),
    QueryTemplate(
        "fastfood_sodium_count",
        ("fastfood",),
        "fastfood",
        "sodium > {s}",
        "SELECT restaurant, COUNT(*) AS n_items FROM {from} WHERE {where} GROUP BY restaurant ORDER BY restaurant",
        "How many menu items at each restaurant contain more than {s:,} mg of sodium?",
        lambda t: _grid(s=(500, 800, 1000, 1500)),
        "pairs",
    ),
    # -------------------------------------------------------- txhousing
    QueryTemplate(
        "txhousing_avg_median_by_year",
        ("txhousing",),
        "txhousing",
        "year BETWEEN {y1} AND {y2}",
        "SELECT year, ROUND(AVG(median), 2) AS avg_median_price FROM {from} WHERE {where} GROUP BY year ORDER BY year",
        "Over the Texas housing records, what was the average monthly median home price in each year from {y1} "
        "to {y2}?",
        lambda t: _grid(**{"y1,y2": YEARS_TX}),
        "pairs",
    ),
    QueryTemplate(
        "txhousing_top_sales_cities",
        ("txhousing",),
        "txhousing",
        "year BETWEEN {y1} AND {y2}",
        "SELECT city, SUM(sales) AS total_sales FROM {from} WHERE {where} "
        "GROUP BY city QUALIFY RANK() OVER (ORDER BY total_sales DESC) <= 5 ORDER BY total_sales DESC, city",
        "Which five Texas cities recorded the most home sales in total between {y1} and {y2} (with any ties "
        "for fifth place), and how many sales did each record?",
        lambda t: _grid(**{"y1,y2": YEARS_TX}),
        "pairs",
    ),
)
TEMPLATE_BY_ID = {t.id: t for t in TEMPLATES}


def candidates(tables: Frames) -> list[QueryInstance]:
    """Every instance of every template, in a fixed order."""
    return [tpl.render(p) for tpl in TEMPLATES for p in tpl.grid(tables)]
