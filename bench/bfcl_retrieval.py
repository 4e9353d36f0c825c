"""Tool retrieval over BFCL's real functions: recall@5 and MRR of BM25, base embeddings,
fine-tuned embeddings and the fine-tuned encoder fused with BM25 on held-out BFCL questions. One
JSON line.

The library is ``agentsandbox.bfcl.library.bfcl_library()``: every distinct function of BFCL's
single-turn categories (2,573 with bfcl-eval 2026.3.23, user-contributed and curated). The
encoder (all-MiniLM-L6-v2) is fine-tuned with ``knowlyr-trainer``'s contrastive recipe on the
``train`` pairs (questions of the live categories -> the functions their ground truth calls) and
measured on the ``test`` pairs (the curated non-live categories), whose functions no train pair
names. ``hybrid`` is reciprocal-rank fusion of BM25 and the fine-tuned encoder
(``agenttrainer.retrieval.FusedIndex``); ``hybrid_base`` the same with the encoder untrained.
Needs bfcl-eval (docs/bfcl.md) and ``knowlyr-trainer[retriever]``. The defaults are the best of
the configurations tried (docs/bfcl.md lists them).

    python bench/bfcl_retrieval.py [--steps 100] [--batch-size 32] [--learning-rate 1e-4]
                                   [--hard-negatives 0] [--max-length 256] [--seed 0] [--max-train-pairs N]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile

from agentsandbox.bfcl.library import bfcl_library, bfcl_query_pairs
from agenttrainer.config import RetrieverConfig
from agenttrainer.retrieval import DenseIndex, Encoder, FusedIndex, train_retriever
from agenttrainer.retrieval.contrastive import recall_at
from knowlyrcore.tool_library import ToolLibrary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--hard-negatives", type=int, default=0, help="BM25-mined confusable tools per query")
    parser.add_argument("--max-length", type=int, default=256, help="tokens of a query or tool text")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-train-pairs", type=int, default=None, help="a random subset (default: all)")
    args = parser.parse_args()

    library = ToolLibrary(bfcl_library())
    train, test = bfcl_query_pairs("train"), bfcl_query_pairs("test")
    if args.max_train_pairs is not None and args.max_train_pairs < len(train):
        chosen = sorted(random.Random(args.seed).sample(range(len(train)), args.max_train_pairs))
        train = [train[i] for i in chosen]
    with tempfile.TemporaryDirectory() as tmp:
        pairs_file = f"{tmp}/train.jsonl"
        with open(pairs_file, "w") as out:
            for query, tool in train:
                out.write(json.dumps({"query": query, "tool": tool}) + "\n")
        library_file = f"{tmp}/library.jsonl"
        with open(library_file, "w") as out:
            for tool in library:
                out.write(tool.model_dump_json() + "\n")
        # train_retriever stops at num_epochs passes even before max_optimizer_steps: allow enough of them
        epochs = -(-args.steps // -(-len(train) // args.batch_size))
        config = RetrieverConfig(library=library_file, train_file=pairs_file, output_dir=f"{tmp}/finetuned",
                                 max_optimizer_steps=args.steps, num_epochs=epochs, batch_size=args.batch_size,
                                 learning_rate=args.learning_rate, hard_negatives=args.hard_negatives,
                                 max_length=args.max_length, eval_split=None, seed=args.seed)  # fmt: skip
        report = train_retriever(config, progress=False)
        base = DenseIndex(library, Encoder(max_length=args.max_length))
        finetuned = DenseIndex(library, Encoder(f"{tmp}/finetuned", max_length=args.max_length))
    indexes = {"bm25": library, "base": base, "finetuned": finetuned,
               "hybrid_base": FusedIndex(library, base), "hybrid": FusedIndex(library, finetuned)}  # fmt: skip
    scores = {name: recall_at(index, test, desc=name) for name, index in indexes.items()}
    print(json.dumps({
        "bench": "bfcl_retrieval",
        "tools": len(library),
        "train_pairs": report["pairs"],
        "test_pairs": len(test),
        "recall@5": {name: s["recall@5"] for name, s in scores.items()},
        "mrr": {name: s["mrr"] for name, s in scores.items()},
        "train_steps": report["steps"],
        "train_seconds": report["seconds"],
        "final_loss": report["final_loss"],
    }))  # fmt: skip


if __name__ == "__main__":
    main()
