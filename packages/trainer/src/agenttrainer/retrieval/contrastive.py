"""Fine-tune the tool encoder contrastively on (request -> tool used) pairs.

For a batch of B pairs the loss is InfoNCE: query i must score its own tool above every other
tool in the batch (in-batch negatives) and above the hard negatives — for each query the
library tools BM25 ranks highest that are not its tool, i.e. the confusable ones:

    loss = mean_i CE(softmax_j(q_i · c_j / temperature), own_i)

over candidates c = the batch's tools followed by the hard negatives. A candidate that *is*
query i's tool (the same tool twice in one batch) is masked out rather than counted as a
negative. Pairs come from a JSONL file of ``{"query", "tool"}``, from trajectories (each task's
description paired with every library tool its agent called: ``mine_pairs``), or from
``knowlyrcore.toolgen``'s generated training split.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import torch

from agenttrainer.config import RetrieverConfig
from agenttrainer.retrieval.encoder import DenseIndex, Encoder, RetrieverError, tool_document


def contrastive_loss(
    queries: torch.Tensor,
    candidates: torch.Tensor,
    own: torch.Tensor,
    same_tool: torch.Tensor | None = None,
    temperature: float = 0.05,
) -> torch.Tensor:
    """InfoNCE over ``candidates`` (N, d) for ``queries`` (B, d): ``own[i]`` is the index of
    query i's tool among the candidates; ``same_tool[i, j]`` (bool, B x N) marks candidates that
    are query i's tool too, left out of its negatives."""
    logits = queries @ candidates.T / temperature
    if same_tool is not None:
        others = same_tool.clone()
        others[torch.arange(len(own)), own] = False
        logits = logits.masked_fill(others, float("-inf"))
    return torch.nn.functional.cross_entropy(logits, own)


def mine_pairs(trajectories: Any, library: Any) -> list[tuple[str, str]]:
    """(task description, tool) for every library tool an agent called in a trajectory."""
    pairs: list[tuple[str, str]] = []
    for trajectory in trajectories:
        description = trajectory.task.description.strip()
        if not description:
            continue
        used = dict.fromkeys(step.tool_call.name for step in trajectory.steps if step.tool_call.name in library)
        pairs += [(description, tool) for tool in used]
    return pairs


def load_library(spec: str) -> Any:
    if spec == "generated":
        from knowlyrcore.toolgen import generate_library

        return generate_library()
    from knowlyrcore.tool_library import ToolLibrary

    return ToolLibrary.load(spec)


def load_pairs(config: RetrieverConfig, library: Any) -> list[tuple[str, str]]:
    if config.train_file == "generated":
        from knowlyrcore.toolgen import query_pairs

        return query_pairs(library, "train", n=config.generated_pairs, seed=config.seed)
    from knowlyrcore.jsonl import iter_json_lines

    records = list(iter_json_lines(config.train_file))
    if records and "steps" in records[0][1]:
        from knowlyrcore import read_trajectories

        pairs = mine_pairs(read_trajectories(config.train_file), library)
    else:
        pairs = []
        for number, record in records:
            query, tool = record.get("query"), record.get("tool")
            if not isinstance(query, str) or not query.strip():
                raise RetrieverError(f"{config.train_file}:{number}: query: missing or not a string")
            if not isinstance(tool, str) or tool not in library:
                raise RetrieverError(f"{config.train_file}:{number}: tool: {str(tool)[:80]!r} is not in the library")
            pairs.append((query, tool))
    if not pairs:
        raise RetrieverError(f"{config.train_file}: no (query, tool) pairs to train on")
    return pairs


def recall_at(index: Any, pairs: list[tuple[str, str]], k: int = 5, *, desc: str | None = None) -> dict[str, float]:
    """recall@k and MRR (within the top k) of a searchable index on (query, tool) pairs; ``desc``
    shows a progress bar so titled (when stderr is a TTY)."""
    from tqdm.auto import tqdm

    hits = reciprocal = 0.0
    for query, tool in tqdm(pairs, desc=desc, unit="query", leave=False, disable=None if desc else True):
        names = [t.name for t, _ in index.search(query, k=k)]
        if tool in names:
            hits += 1
            reciprocal += 1 / (names.index(tool) + 1)
    return {f"recall@{k}": round(hits / len(pairs), 4), "mrr": round(reciprocal / len(pairs), 4)}


def held_out(eval_pairs: list[tuple[str, str]], train_pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``eval_pairs`` whose request is not one trained on (a train file may hold toolgen's test requests)."""
    seen = {query for query, _ in train_pairs}
    kept = [pair for pair in eval_pairs if pair[0] not in seen]
    if not kept:
        raise RetrieverError("every held-out request is also a training request; nothing is left to evaluate on")
    return kept


def _evaluate(library: Any, encoder: Encoder, pairs: list[tuple[str, str]], stage: str | None) -> dict[str, float]:
    desc = None if stage is None else f"recall@5 {stage}"
    return recall_at(DenseIndex(library, encoder, progress=stage is not None), pairs, desc=desc)


def train_retriever(config: RetrieverConfig, *, progress: bool = True) -> dict[str, Any]:
    """Fine-tune, save to ``config.output_dir``, and report the loss and (with ``eval_split``)
    recall@5 / MRR of the encoder before and after on held-out pairs."""
    from tqdm.auto import tqdm

    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    library = load_library(config.library)
    pairs = load_pairs(config, library)
    tools = list(library)
    position = {t.name: i for i, t in enumerate(tools)}
    documents = [tool_document(t) for t in tools]
    negatives = {}
    for query, tool in set(pairs):  # the confusable tools: BM25's best that are not the answer
        ranked = [t.name for t, _ in library.search(query, k=config.hard_negatives + 1)]
        negatives[(query, tool)] = [name for name in ranked if name != tool][: config.hard_negatives]

    encoder = Encoder(config.model_name_or_path, max_length=config.max_length)
    report: dict[str, Any] = {"pairs": len(pairs), "tools": len(tools)}
    eval_pairs = None
    if config.eval_split and config.library == "generated":
        from knowlyrcore.toolgen import query_pairs

        eval_pairs = query_pairs(library, config.eval_split, n=config.eval_pairs, seed=config.seed + 1)
        eval_pairs = held_out(eval_pairs, pairs)
        report["eval_pairs"] = len(eval_pairs)
        report["before"] = _evaluate(library, encoder, eval_pairs, "before" if progress else None)

    optimizer = torch.optim.AdamW(encoder.model.parameters(), lr=config.learning_rate)
    steps_per_epoch = (len(pairs) + config.batch_size - 1) // config.batch_size
    total = steps_per_epoch * config.num_epochs
    if config.max_optimizer_steps > 0:
        total = min(total, config.max_optimizer_steps)
    losses: list[float] = []
    started = time.perf_counter()
    bar = tqdm(total=total, desc="retriever", unit="step", disable=not progress)
    encoder.model.train()
    step = 0
    while step < total:
        order = pairs[:]
        rng.shuffle(order)
        for start in range(0, len(order), config.batch_size):
            if step >= total:
                break
            batch = order[start : start + config.batch_size]
            candidates = list(
                dict.fromkeys([tool for _, tool in batch] + [n for pair in batch for n in negatives[pair]])
            )
            index_of = {name: i for i, name in enumerate(candidates)}
            own = torch.tensor([index_of[tool] for _, tool in batch], device=encoder.device)
            same = torch.tensor([[name == tool for name in candidates] for _, tool in batch], device=encoder.device)
            queries = encoder.embed([query for query, _ in batch])
            embedded = encoder.embed([documents[position[name]] for name in candidates])
            loss = contrastive_loss(queries, embedded, own, same, config.temperature)
            if not torch.isfinite(loss):
                raise RetrieverError(f"step {step}: the loss is {loss.item()}; lower learning_rate")
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(encoder.model.parameters(), 1.0)
            optimizer.step()
            losses.append(loss.item())
            step += 1
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}")
    bar.close()
    encoder.model.eval()
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    encoder.save(out)
    report.update(
        {
            "steps": step,
            "first_loss": round(losses[0], 4),
            "final_loss": round(losses[-1], 4),
            "seconds": round(time.perf_counter() - started, 1),
            "output_dir": str(out),
        }
    )
    if eval_pairs is not None:
        report["after"] = _evaluate(library, encoder, eval_pairs, "after" if progress else None)
    (out / "retriever_report.json").write_text(json.dumps({"config": config.to_dict(), **report}, indent=2))
    return report
