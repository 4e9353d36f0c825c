"""Dense tool retrieval: a sentence-embedding encoder over a ``knowlyrcore.ToolLibrary`` and the
contrastive recipe that fine-tunes it on (request -> tool used) pairs (``knowlyr-trainer retriever``;
its config is ``agenttrainer.config.RetrieverConfig``), and reciprocal-rank fusion of it with BM25
(``FusedIndex``)."""

from agenttrainer.retrieval.contrastive import contrastive_loss, mine_pairs, train_retriever
from agenttrainer.retrieval.encoder import DEFAULT_ENCODER, DenseIndex, Encoder, tool_document
from agenttrainer.retrieval.fusion import FusedIndex

__all__ = [
    "DEFAULT_ENCODER",
    "DenseIndex",
    "Encoder",
    "FusedIndex",
    "contrastive_loss",
    "mine_pairs",
    "tool_document",
    "train_retriever",
]
