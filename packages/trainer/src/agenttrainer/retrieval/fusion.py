"""Hybrid tool retrieval: reciprocal-rank fusion of several indexes (BM25 and a dense encoder).

Lexical and dense retrieval fail on different queries: BM25 misses a paraphrase that shares no
word with the tool's text, an encoder misses a rare identifier the query spells out. Fusing their
rankings by reciprocal rank (each index adds ``1 / (constant + rank)`` for every tool in its top
``depth``) needs no score calibration between them, which raw BM25 and cosine scores lack.
"""

from __future__ import annotations

from typing import Any

from agenttrainer.retrieval.encoder import RetrieverError

# The rank offset of reciprocal-rank fusion; 60 is the value the method was introduced with and
# keeps one index's first place from outweighing agreement further down the lists.
RRF_CONSTANT = 60


class FusedIndex:
    """Ranks tools by reciprocal-rank fusion of ``indexes`` (anything with ``search(query, k)``
    returning ``(tool, score)`` best first, such as ``knowlyrcore.ToolLibrary`` and ``DenseIndex``).

    ``weights`` scale each index's contribution (default: equal); ``depth`` is how far down each
    index's ranking counts. Scores returned are the fused ones.
    """

    def __init__(
        self, *indexes: Any, weights: list[float] | None = None, depth: int = 50, constant: int = RRF_CONSTANT
    ):
        if len(indexes) < 2:
            raise RetrieverError("fusion needs at least two indexes")
        if weights is not None and (len(weights) != len(indexes) or any(w < 0 for w in weights)):
            raise RetrieverError(f"weights: {len(indexes)} non-negative numbers expected, got {weights!r}")
        if depth < 1 or constant < 0:
            raise RetrieverError(f"depth must be >= 1 and constant >= 0, got {depth} and {constant}")
        self.indexes = indexes
        self.weights = list(weights) if weights is not None else [1.0] * len(indexes)
        self.depth, self.constant = depth, constant

    def search(self, query: str, k: int = 5) -> list[tuple[Any, float]]:
        if k < 1:
            raise RetrieverError(f"k must be >= 1, got {k}")
        fused: dict[str, float] = {}
        tools: dict[str, Any] = {}
        for index, weight in zip(self.indexes, self.weights):
            for rank, (tool, _) in enumerate(index.search(query, k=max(k, self.depth)), start=1):
                tools.setdefault(tool.name, tool)
                fused[tool.name] = fused.get(tool.name, 0.0) + weight / (self.constant + rank)
        # ties (a tool at the same ranks everywhere) fall back to the name, so results are stable
        best = sorted(fused, key=lambda name: (-fused[name], name))[:k]
        return [(tools[name], fused[name]) for name in best]
