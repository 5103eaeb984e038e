"""Ranking: the chain from scores to the ranking a cut reads (:mod:`ctxsel.ranking.chain`):
the scorer, an optional rerank (:mod:`ctxsel.ranking.rerank`), then an optional multi-hop expansion.

Multi-hop expansion, the last link of the chain:

A similarity pass finds the chunks that look like the question. In a bridge
question ("Which city was the director of Film X born in?") the second
chunk is about an entity the question never names, so it ranks low. Two
stages bring it up, and any score-based selector can then cut the new
ranking:

- ``hop`` (second-hop re-scoring, pseudo-relevance feedback): the question
  plus the text of the first hop's top ``m`` chunks is scored again by the
  same scorer, and merged: ``(1 - weight) * first + weight * second``.
- ``links`` (mention links, :mod:`ctxsel.ranking.links`): chunks that the
  first hop's top ``m`` chunks name by title get ``+ boost``; with ``question=true``
  (default) so do the chunks the question itself names. A pool without
  titles gets no links unless ``keys=entities`` (salient capitalised names;
  opt-in, as it cost recall on tables of rows) or ``keys=auto`` asks for them.

Spec: stages joined by ``+``, each ``NAME`` or ``NAME[key=value,...]``::

    hop                     hop[m=1,weight=0.7]
    links                   links[m=1,boost=0.3,question=true,keys=titles]
    hop+links[m=3]          both, hop first

How the scores are formed, so a cut still reads them sensibly: the first
hop's scores are min-max normalised to [0, 1] over the pool; the second hop's
too before the merge, over the chunks other than the ``m`` it was widened
with (their own text is in the widened question: left in, their
self-match would squeeze everyone else's range and flatten the curve a cut
reads), clipped to [0, 1]; a boost is added once per chunk however many
chunks link to it. The first hop's top ``m`` (the largest ``m`` of the stages) stay
*pinned*, in their first-hop order: each is raised, if needed, 1e-6 above
the chunk ranked after it (the last pinned one 1e-6 above every unpinned
chunk), so expansion reorders only the rest, and a cut that keeps ``k <= m``
chunks keeps exactly what it kept without expansion. Selections
made on expanded scores carry ``meta["expansion"]``: the stages, the pinned
ids and, per selected chunk that came in by expansion (first-hop rank beyond
the selection's size), how: ``linked from`` which chunks (or the question),
or ``second hop``. The explanation ends with a short form of the same.
"""

from __future__ import annotations

from ctxsel.ranking.chain import Ranking, Scored, as_ranking
from ctxsel.ranking.expand import Expanded, expand
from ctxsel.ranking.expansion import Expansion, MentionLinks, SecondHop, parse_expansion
from ctxsel.ranking.explain import annotate

__all__ = [
    "Expanded",
    "Expansion",
    "MentionLinks",
    "Ranking",
    "Scored",
    "SecondHop",
    "annotate",
    "as_ranking",
    "expand",
    "parse_expansion",
]
