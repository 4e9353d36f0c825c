import string
from pathlib import Path

import pytest

from knowlyrcore.testing import require_module

CHARS = string.ascii_lowercase + string.digits + string.punctuation


def step(name, params=None, output="", exit_code=None, error=None, **extra):
    return {
        "tool_call": {"name": name, "parameters": params or {}},
        "observation": {"output": output, "exit_code": exit_code, "error": error},
        **extra,
    }


@pytest.fixture
def make_step():
    return step


@pytest.fixture(scope="session")
def build_prm():
    """``build_prm(directory, bias=0.0, weight_std=0.0, signal_weights=None)``: write a tiny process
    reward model checkpoint (a random one-layer BERT with a 32-wide hidden state and a character
    vocabulary) into ``directory``. Its head's weights on the text state are drawn with
    ``weight_std`` (0: every text gets ``sigmoid(bias)``, a value derived by hand) from a fixed
    seed; ``signal_weights`` (``{signal name: weight}``) makes a head that reads the process
    signals too, with those weights and 0 for the others."""
    require_module("torch", "the learned layer needs torch (knowlyr-reward[learned])")
    require_module("transformers", "the learned layer needs transformers (knowlyr-reward[learned])")
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    from agentreward.learned import ProcessRewardModel

    def build(directory, *, bias=0.0, weight_std=0.0, signal_weights=None):
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        # every ASCII word splits into known characters, so two texts differ in their tokens
        vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *CHARS, *("##" + c for c in CHARS)]
        (directory / "vocab.txt").write_text("\n".join(vocab) + "\n")
        tokenizer = BertTokenizerFast(vocab_file=str(directory / "vocab.txt"))
        torch.manual_seed(0)
        config = BertConfig(
            vocab_size=len(vocab), hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
        )
        model = ProcessRewardModel(BertModel(config), max_length=256, signals=signal_weights is not None)
        with torch.no_grad():  # the head starts at zero: only what is asked for is set
            if weight_std:
                model.head.weight[:, : config.hidden_size].normal_(0.0, weight_std)
            for name, weight in (signal_weights or {}).items():
                model.head.weight[0, config.hidden_size + model.signals.index(name)] = weight
            model.head.bias.fill_(bias)
        model.save(directory, tokenizer)
        (directory / "vocab.txt").unlink()  # the tokenizer is saved as tokenizer.json
        return directory

    return build
