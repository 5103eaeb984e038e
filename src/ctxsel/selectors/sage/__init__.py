"""SAGE (paper 004): embedding-free, sufficiency-aware exploration of a document's sentences.

- :mod:`.graph`: sentence vertices, keyword retrieval, neighbour expansion, counting by enumeration;
- :mod:`.noise`: the character-level perturbation behind the importance score;
- :mod:`.selector`: the method (Algorithms 1-3) as a ctxsel Selector.
"""

from ctxsel.selectors.sage.selector import SAGE

__all__ = ["SAGE"]
