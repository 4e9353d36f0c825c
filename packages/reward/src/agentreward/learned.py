"""The learned layer: a small model that reads a trajectory up to a step and predicts whether the
task still succeeds from there.

``ProcessRewardModel`` is a pretrained text model (a BERT-style encoder such as all-MiniLM-L6-v2,
or a causal LM such as SmolLM2-135M) with one linear head on its pooled last hidden state: mean
pooling over the real tokens for an encoder, the last real token for a causal LM (the only one
that has seen the whole text). With ``signals`` the head also reads the prefix's process
signals (``agentreward.signals``: are the arguments grounded in what the agent saw, did calls
fail), relations between a run's parts that hold on templates the model never saw. Its output is
a logit; ``sigmoid(logit)`` is the predicted probability of success, trained on
``knowlyrcore.datasets.PRMRecord`` labels by ``knowlyr-trainer prm``.

A checkpoint is a directory: the text model as Hugging Face saves it (``config.json``, weights,
tokenizer files), the head in ``prm_head.safetensors`` and ``prm.json`` (the format marker,
pooling, the text length the scorer reads, the signals the head reads). ``LearnedScorer(path)``
loads one and gives each step of a trajectory its value, reading the texts of
``knowlyrcore.prefix_text.step_prefixes``, the renderer the training data came from.

Needs torch and transformers (the ``learned`` extra: ``pip install 'knowlyr-reward[learned]'``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentreward.errors import RewardError
from agentreward.signals import SIGNALS, prefix_signals
from knowlyrcore.errors import require_extra
from knowlyrcore.prefix_text import step_prefixes

#: ``prm.json``'s ``format`` value: tells a PRM checkpoint from any other model directory
CHECKPOINT_FORMAT = "knowlyr-prm"
CONFIG_FILE, HEAD_FILE = "prm.json", "prm_head.safetensors"
#: what every tokenizer's ``save_pretrained`` writes
TOKENIZER_FILE = "tokenizer_config.json"
#: model types whose hidden states see the whole text at every position (mean pooling fits)
ENCODER_TYPES = frozenset({"bert", "roberta", "xlm-roberta", "distilbert", "mpnet", "electra", "deberta-v2"})
#: how many tokens of a prefix the scorer reads by default (all-MiniLM-L6-v2 was trained on 256)
DEFAULT_MAX_LENGTH = 512


# importing this module needs torch: the engine imports it only when the learned layer is asked for
torch = require_extra("torch", "knowlyr-reward", "learned", "the learned reward layer")


def _transformers():
    return require_extra("transformers", "knowlyr-reward", "learned", "the learned reward layer")


def default_pooling(model_type: str) -> str:
    """``mean`` for an encoder, ``last`` for a causal LM."""
    return "mean" if model_type in ENCODER_TYPES else "last"


class ProcessRewardModel(torch.nn.Module):
    """A text model and a scalar head: ``forward(input_ids, attention_mask, signals)`` gives one
    logit per text (``signals``: ``signal_tensor(texts)``, when the model reads them)."""

    def __init__(
        self, encoder: Any, *, pooling: str = "mean", max_length: int = DEFAULT_MAX_LENGTH, signals: bool = False
    ):
        super().__init__()
        if pooling not in ("mean", "last"):
            raise RewardError(f"pooling must be 'mean' or 'last', got {pooling!r}")
        self.encoder = encoder
        self.pooling = pooling
        self.max_length = max_length
        self.signals = tuple(SIGNALS) if signals else ()
        self.head = torch.nn.Linear(encoder.config.hidden_size + len(self.signals), 1)
        torch.nn.init.zeros_(self.head.weight)  # every prefix starts at p = 0.5: no prior from the init
        torch.nn.init.zeros_(self.head.bias)

    @classmethod
    def from_pretrained_text_model(
        cls,
        path: str | Path,
        *,
        pooling: str | None = None,
        max_length: int = DEFAULT_MAX_LENGTH,
        signals: bool = False,
    ) -> ProcessRewardModel:
        """A new head on the text model in directory ``path`` (its pretrained weights)."""
        transformers = _transformers()
        try:
            encoder = transformers.AutoModel.from_pretrained(str(path))
        except (OSError, ValueError) as exc:
            raise RewardError(f"{path}: cannot load a text model to put a reward head on ({exc})") from None
        pooling = pooling or default_pooling(encoder.config.model_type)
        return cls(encoder, pooling=pooling, max_length=max_length, signals=signals)

    def forward(self, input_ids: Any, attention_mask: Any, signals: Any = None) -> Any:
        return self.score_pooled(self.pooled(input_ids, attention_mask), signals)

    def signal_tensor(self, texts: Sequence[str]) -> Any:
        """``(B, len(self.signals))`` process signals of ``texts``, or ``None`` when the head reads none."""
        if not self.signals:
            return None
        return torch.tensor([prefix_signals(text) for text in texts], dtype=torch.float32)

    def score_pooled(self, pooled: Any, signals: Any = None) -> Any:
        """``(B,)`` logits of ``(B, hidden)`` pooled states (and ``(B, n)`` signals): the head alone."""
        if self.signals:
            if signals is None or signals.shape != (pooled.shape[0], len(self.signals)):
                raise RewardError(f"this head reads {len(self.signals)} process signals per text beside its state")
            pooled = torch.cat([pooled, signals.to(pooled.device, pooled.dtype)], dim=-1)
        return self.head(pooled.to(self.head.weight.dtype)).squeeze(-1)

    def pooled(self, input_ids: Any, attention_mask: Any) -> Any:
        """``(B, hidden)``: the text model's last hidden states pooled per text, before the head."""
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.to(hidden.dtype)
        if self.pooling == "mean":
            pooled = (hidden * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True).clamp(min=1.0)
        else:  # the last real token, whichever side the padding is on
            positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
            last = (positions * mask.long()).argmax(1)
            pooled = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
        return pooled

    def save(self, directory: str | Path, tokenizer: Any = None) -> Path:
        """Write the checkpoint into ``directory`` (the text model, its tokenizer, the head)."""
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.encoder.save_pretrained(directory)
        if tokenizer is not None:
            tokenizer.save_pretrained(directory)
        save_file({k: v.detach().contiguous() for k, v in self.head.state_dict().items()}, directory / HEAD_FILE)
        config = {
            "format": CHECKPOINT_FORMAT,
            "version": 1,
            "pooling": self.pooling,
            "max_length": self.max_length,
            "signals": list(self.signals),
        }
        (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
        return directory

    @classmethod
    def load(cls, directory: str | Path) -> ProcessRewardModel:
        """The checkpoint ``save`` wrote into ``directory``."""
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        _transformers()  # a missing extra is named before the checkpoint is judged
        config = read_checkpoint_config(directory)
        model = cls.from_pretrained_text_model(
            directory, pooling=config["pooling"], max_length=config["max_length"], signals=bool(config["signals"])
        )
        head = Path(directory) / HEAD_FILE
        try:
            model.head.load_state_dict(load_file(str(head)))
        except (SafetensorError, RuntimeError, OSError) as exc:  # damaged, or another model's width
            raise RewardError(f"{head}: not this model's head ({' '.join(str(exc).split())})") from None
        return model


def read_checkpoint_config(directory: str | Path) -> dict[str, Any]:
    """``prm.json`` of a PRM checkpoint, checked; a one-line ``RewardError`` for anything else."""
    path = Path(directory) / CONFIG_FILE
    if not path.is_file():
        raise RewardError(
            f"{directory}: not a process reward model checkpoint (no {CONFIG_FILE}; train one with knowlyr-trainer prm)"
        )
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RewardError(f"{path}: unreadable ({exc})") from None
    if not isinstance(config, dict) or config.get("format") != CHECKPOINT_FORMAT:
        raise RewardError(f"{path}: format is not {CHECKPOINT_FORMAT!r}")
    if config.get("pooling") not in ("mean", "last"):
        raise RewardError(f"{path}: pooling: must be 'mean' or 'last', got {config.get('pooling')!r}")
    if not isinstance(config.get("max_length"), int) or config["max_length"] < 8:
        raise RewardError(f"{path}: max_length: must be a whole number of tokens >= 8")
    config.setdefault("signals", [])  # checkpoints written before the head read signals
    if config["signals"] not in ([], list(SIGNALS)):
        raise RewardError(
            f"{path}: signals: must be [] or {list(SIGNALS)} (this knowlyr-reward's), got {config['signals']!r}"
        )
    if not (Path(directory) / HEAD_FILE).is_file():
        raise RewardError(f"{directory}: {HEAD_FILE} is missing")
    return config


def load_tokenizer(path: str | Path) -> Any:
    """The tokenizer of the model directory ``path``, able to pad (the same meaning and signature
    as ``agenttrainer.models.load_tokenizer``, which knowlyr-reward cannot import)."""
    try:
        tokenizer = _transformers().AutoTokenizer.from_pretrained(str(path))
    except (OSError, ValueError) as exc:
        raise RewardError(f"{path}: cannot load its tokenizer ({' '.join(str(exc).split())})") from None
    if tokenizer.pad_token is None:  # a causal LM's tokenizer may have none; padding is masked anyway
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def encode(tokenizer: Any, texts: Sequence[str], max_length: int) -> dict[str, Any]:
    """Token ids of ``texts`` for the model: padded, cut to ``max_length`` keeping the end (the
    newest steps) when a text is longer. A lone surrogate (a JSON ``"\\ud800"`` escape read from a
    log) becomes ``?``: the tokenizer accepts only text that is valid Unicode."""
    side = tokenizer.truncation_side
    tokenizer.truncation_side = "left"
    texts = [text.encode("utf-8", "replace").decode("utf-8") for text in texts]
    try:
        return tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    finally:
        tokenizer.truncation_side = side


class LearnedScorer:
    """A trained ``ProcessRewardModel`` that scores trajectories: ``step_values(record)`` is each
    step's predicted probability that the task succeeds from there."""

    def __init__(self, path: str | Path, *, batch_size: int = 16, device: str | None = None):
        self.path = Path(path)
        self.model = ProcessRewardModel.load(self.path)
        # without the tokenizer's files transformers builds one without the model's vocabulary
        if not (self.path / TOKENIZER_FILE).is_file():
            raise RewardError(f"{path}: {TOKENIZER_FILE} is missing (save the checkpoint with its tokenizer)")
        self.tokenizer = load_tokenizer(self.path)
        self.device = torch.device(device or "cpu")
        self.model.to(self.device).eval()
        self.batch_size = batch_size

    def values(self, texts: Sequence[str]) -> list[float]:
        """``sigmoid(logit)`` of each text."""
        out: list[float] = []
        with torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                chunk = texts[start : start + self.batch_size]
                batch = encode(self.tokenizer, chunk, self.model.max_length)
                logits = self.model(
                    batch["input_ids"].to(self.device),
                    batch["attention_mask"].to(self.device),
                    self.model.signal_tensor(chunk),
                )
                out.extend(torch.sigmoid(logits.float()).tolist())
        return out

    def step_values(self, record: Any) -> list[float]:
        """One value per step of ``record`` (a trajectory record or a ``Trajectory``)."""
        texts = step_prefixes(record)
        return self.values(texts) if texts else []
