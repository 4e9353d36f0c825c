"""Tool retrieval at scale: recall@5 and MRR of BM25, base embeddings and fine-tuned embeddings
on held-out requests, and query latency, over a library of over 10,000 tools. One JSON line.

The library is ``knowlyrcore.toolgen.generate_library(16)`` (620 tools in 24 services, plus 16
vendor variants of each: 10,540 tools, many near-duplicates). The encoder (all-MiniLM-L6-v2) is
fine-tuned with ``knowlyr-trainer``'s contrastive recipe on pairs of the ``train`` split; recall
is measured on the held-out splits only: ``test`` (phrasings never used in training) and
``test-unseen`` (services none of whose tools appear in training pairs), half each.

``query_ms_p50`` is the median BM25 query (pure Python, knowlyr-core); ``dense_query_ms_p50``
the median dense query (embed the request with MiniLM on this CPU + one matrix product over
the library), measured one query at a time after a warm-up.

    python bench/retrieval.py [--vendors 16] [--steps 100] [--train-pairs 3200] [--eval-pairs 600]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

from agenttrainer.config import RetrieverConfig
from agenttrainer.retrieval import DenseIndex, Encoder, train_retriever
from agenttrainer.retrieval.contrastive import recall_at
from knowlyrcore.toolgen import generate_library, query_pairs


def latency_ms(index, queries: list[str]) -> float:
    index.search(queries[0], k=5)  # warm-up
    times = []
    for query in queries:
        start = time.perf_counter()
        index.search(query, k=5)
        times.append((time.perf_counter() - start) * 1000)
    return round(statistics.median(times), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vendors", type=int, default=16)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--train-pairs", type=int, default=3200)
    parser.add_argument("--eval-pairs", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    library = generate_library(args.vendors)
    held_out = (query_pairs(library, "test", n=args.eval_pairs // 2, seed=args.seed + 1)
                + query_pairs(library, "test-unseen", n=args.eval_pairs // 2, seed=args.seed + 1))  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        pairs_file = f"{tmp}/train.jsonl"
        with open(pairs_file, "w") as out:
            for query, tool in query_pairs(library, "train", n=args.train_pairs, seed=args.seed):
                out.write(json.dumps({"query": query, "tool": tool}) + "\n")
        library_file = f"{tmp}/library.jsonl"
        with open(library_file, "w") as out:
            for tool in library:
                out.write(tool.model_dump_json() + "\n")
        config = RetrieverConfig(library=library_file, train_file=pairs_file, output_dir=f"{tmp}/finetuned",
                                 max_optimizer_steps=args.steps, batch_size=args.batch_size, eval_split=None,
                                 seed=args.seed)  # fmt: skip
        report = train_retriever(config, progress=False)
        base = DenseIndex(library, Encoder())
        finetuned = DenseIndex(library, Encoder(f"{tmp}/finetuned"))
    scores = {"bm25": recall_at(library, held_out), "base": recall_at(base, held_out),
              "finetuned": recall_at(finetuned, held_out)}  # fmt: skip
    queries = [query for query, _ in held_out[:200]]
    print(json.dumps({
        "bench": "retrieval",
        "tools": len(library),
        "query_ms_p50": latency_ms(library, queries),
        "dense_query_ms_p50": latency_ms(finetuned, queries),
        "recall@5": {name: s["recall@5"] for name, s in scores.items()},
        "mrr": {name: s["mrr"] for name, s in scores.items()},
        "held_out_pairs": len(held_out),
        "train_pairs": report["pairs"],
        "train_steps": report["steps"],
        "train_seconds": report["seconds"],
        "final_loss": report["final_loss"],
    }))  # fmt: skip


if __name__ == "__main__":
    main()
