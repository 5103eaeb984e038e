"""SAGE (paper 004): embedding-free, sufficiency-aware exploration of a document's sentences.

- :mod:`.graph`: sentence vertices, keyword retrieval, neighbour expansion, counting by enumeration;
- :mod:`.noise`: the character-level perturbation behind the importance score;
- :mod:`.replies`: the reply formats, their parsers, and what one select() call records;
- :mod:`.asking`: how SAGE asks its LLM (its prompts, the answers, the votes, the window);
- :mod:`.importance`: Algorithm 2; :mod:`.counting`: Algorithm 3;
- :mod:`.trace`: the trace's steps, typed;
- :mod:`.selector`: the method (Algorithm 1, the exploration loop) as a ctxsel Selector.
"""

from ctxsel.selectors.sage.selector import SAGE

__all__ = ["SAGE"]
