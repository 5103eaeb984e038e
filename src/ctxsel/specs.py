"""The value of one ``key=value`` option in a method, scorer or expansion spec, read the same way
everywhere: booleans, None, ``5k``/``2M`` counts, integers and floats; anything else stays a string."""

from __future__ import annotations

import re
from typing import Any


def spec_value(value: str) -> Any:
    v = value.strip()
    low = v.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmM])", v)
    if m:
        return int(float(m.group(1)) * (1000 if m.group(2) in "kK" else 1_000_000))
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return v
