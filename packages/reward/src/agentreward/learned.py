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
import re
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

# The largest sizes a checkpoint's ``config.json`` may declare: ``ProcessRewardModel.load`` checks
# them (and them against the weights file's header and ``prm.json``) before any tensor is allocated,
# so a crafted 1 KB checkpoint cannot ask for terabytes. Generous: far beyond a reward model's needs.
MAX_VOCAB_SIZE = 1_000_000  #: tokens (the largest common vocabularies are ~260k)
MAX_HIDDEN_SIZE = 16_384  #: width of the hidden state (also bounds ``embedding_size``, ``head_dim``)
MAX_LAYERS = 256  #: ``num_hidden_layers``
MAX_ATTENTION_HEADS = 1_024  #: ``num_attention_heads``
MAX_INTERMEDIATE_SIZE = 131_072  #: width of the feed-forward layers
MAX_POSITIONS = 1_048_576  #: ``max_position_embeddings``, and ``prm.json``'s ``max_length``
#: ``config.json`` field -> (least, most) it may declare, checked in this order
SIZE_BOUNDS = {
    "vocab_size": (1, MAX_VOCAB_SIZE),
    "hidden_size": (1, MAX_HIDDEN_SIZE),
    "num_hidden_layers": (1, MAX_LAYERS),
    "num_attention_heads": (1, MAX_ATTENTION_HEADS),
    "intermediate_size": (1, MAX_INTERMEDIATE_SIZE),
    "max_position_embeddings": (1, MAX_POSITIONS),
    "type_vocab_size": (0, MAX_VOCAB_SIZE),
    "embedding_size": (1, MAX_HIDDEN_SIZE),
    "head_dim": (1, MAX_HIDDEN_SIZE),
}
WEIGHTS_FILE, WEIGHTS_INDEX = "model.safetensors", "model.safetensors.index.json"
# tensor names (as ``save_pretrained`` writes a bare text model) of the token and position
# embeddings and of the numbered layers: BERT-likes, Llama-likes, GPT-2, GPT-NeoX
_TOKEN_EMBEDDINGS = re.compile(r"(?:^|\.)(?:word_embeddings|embed_tokens|wte|embed_in)\.weight$")
_POSITION_EMBEDDINGS = re.compile(r"(?:^|\.)(?:position_embeddings|wpe)\.weight$")
_LAYER_INDEX = re.compile(r"(?:^|\.)(?:layer|layers|h|block|blocks)\.(\d+)\.")


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
        check_model_sizes(directory, config["max_length"])  # before anything is allocated
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


def check_model_sizes(directory: str | Path, max_length: int | None = None) -> None:
    """Refuse a text model whose ``config.json`` declares sizes beyond ``SIZE_BOUNDS``, a
    ``hidden_size`` its attention heads do not divide, sizes the weights file's tensors do not have
    (read from the safetensors header, no tensor loaded), or (``max_length``, ``prm.json``'s) more
    tokens than its positions: a one-line ``RewardError`` naming the file and the field.

    Runs before the model is built, so a crafted checkpoint cannot make the loader allocate more
    than its weights file holds. A directory without ``config.json`` is left to the loader."""
    directory = Path(directory)
    path = directory / "config.json"
    if not path.is_file():
        return
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RewardError(f"{path}: unreadable ({' '.join(str(exc).split())})") from None
    if not isinstance(raw, dict):
        raise RewardError(f"{path}: not a JSON object")
    config_class = (
        _transformers().CONFIG_MAPPING.get(raw.get("model_type")) if isinstance(raw.get("model_type"), str) else None
    )
    aliases = dict(getattr(config_class, "attribute_map", None) or {})  # GPT-2 writes n_embd for hidden_size
    try:
        defaults = config_class() if config_class is not None else None  # what a field left out means
    except Exception:  # an odd config class: only the declared fields are checked
        defaults = None

    sizes: dict[str, int] = {}  # field -> the size the model will have
    keys: dict[str, str] = {}  # field -> its name in config.json
    for field, (least, most) in SIZE_BOUNDS.items():
        key = aliases.get(field, field)
        keys[field] = key
        value = raw[key] if key in raw else getattr(defaults, field, None)
        if value is None:  # not this architecture's, or null (GPT-2's n_inner: 4 * hidden)
            continue
        if type(value) is not int or not least <= value <= most:
            raise RewardError(f"{path}: {key}: must be a whole number in [{least}, {most}], got {value!r}")
        sizes[field] = value

    hidden, heads = sizes.get("hidden_size"), sizes.get("num_attention_heads")
    if hidden and heads and "head_dim" not in raw and hidden % heads:
        raise RewardError(
            f"{path}: {keys['hidden_size']}: {hidden} is not divisible by {keys['num_attention_heads']} {heads}"
        )
    positions = sizes.get("max_position_embeddings")
    if max_length is not None and max_length > (positions or MAX_POSITIONS):
        where = f"{keys['max_position_embeddings']} ({positions} tokens) in {path}" if positions else MAX_POSITIONS
        raise RewardError(f"{directory / CONFIG_FILE}: max_length: {max_length} is more than {where}")
    _check_weight_shapes(directory, path, sizes, keys)


def _check_weight_shapes(directory: Path, path: Path, sizes: dict[str, int], keys: dict[str, str]) -> None:
    """``check_model_sizes``'s sizes against the tensors of the weights file (its header only)."""
    found = _weight_shapes(directory)
    if found is None:
        return
    label, shapes = found

    def refuse(field: str, held: str) -> None:
        raise RewardError(f"{path}: {keys[field]}: {sizes[field]}, but {label} holds {held}")

    width = sizes.get("embedding_size", sizes.get("hidden_size"))
    for name, shape in shapes.items():
        if _TOKEN_EMBEDDINGS.search(name) and len(shape) == 2:
            if "vocab_size" in sizes and shape[0] != sizes["vocab_size"]:
                refuse("vocab_size", f"{shape[0]} token embeddings ({name})")
            if width is not None and shape[1] != width:
                refuse("embedding_size" if "embedding_size" in sizes else "hidden_size", f"{name} of width {shape[1]}")
        positions = sizes.get("max_position_embeddings")
        if _POSITION_EMBEDDINGS.search(name) and len(shape) == 2 and positions is not None and shape[0] != positions:
            refuse("max_position_embeddings", f"{shape[0]} position embeddings ({name})")
    dims = {d for shape in shapes.values() for d in shape}
    if "hidden_size" in sizes and sizes["hidden_size"] not in dims:
        refuse("hidden_size", "no tensor of that width")
    layers = {int(m.group(1)) for m in map(_LAYER_INDEX.search, shapes) if m}
    if layers and "num_hidden_layers" in sizes and sizes["num_hidden_layers"] != max(layers) + 1:
        refuse("num_hidden_layers", f"{max(layers) + 1} layers")
    if layers and "intermediate_size" in sizes and sizes["intermediate_size"] not in dims:
        refuse("intermediate_size", "no tensor of that width")


def _weight_shapes(directory: Path) -> tuple[str, dict[str, list[int]]] | None:
    """``(file name, {tensor: shape})`` of the model's safetensors weights (one file or the shards
    of an index) from their headers, or ``None`` when it has none (the loader then says so)."""
    from safetensors import SafetensorError, safe_open

    single, index = directory / WEIGHTS_FILE, directory / WEIGHTS_INDEX
    if single.is_file():
        label, files = WEIGHTS_FILE, [single]
    elif index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            names = sorted(set(weight_map.values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RewardError(f"{index}: weight_map: unreadable ({' '.join(str(exc).split())})") from None
        if not all(isinstance(n, str) and n and Path(n).name == n for n in names):
            raise RewardError(f"{index}: weight_map: shard names must be file names in {directory}")
        label, files = WEIGHTS_INDEX, [directory / n for n in names]
    else:
        return None
    shapes: dict[str, list[int]] = {}
    for file in files:
        try:
            with safe_open(str(file), framework="pt") as weights:  # maps the file, reads the header only
                for name in weights.keys():  # noqa: SIM118 - a safe_open handle is not a mapping
                    shapes[name] = list(weights.get_slice(name).get_shape())
        except (SafetensorError, OSError) as exc:
            raise RewardError(f"{file}: unreadable weights ({' '.join(str(exc).split())})") from None
    return label, shapes


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
        vocab = self.model.encoder.config.vocab_size
        if len(self.tokenizer) > vocab:  # its last ids would index past the token embeddings
            raise RewardError(
                f"{path}: the tokenizer has {len(self.tokenizer)} tokens, more than config.json's vocab_size {vocab}"
            )
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
