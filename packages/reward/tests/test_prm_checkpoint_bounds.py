"""A PRM checkpoint's declared sizes are checked before any model is built: a crafted ``prm.json``
or ``config.json`` (a 2**34-token vocabulary in a 1 KB file) is one line naming the file and the
field, not a tensor-size crash while scoring or an attempt to allocate terabytes.

Every tampered copy is loaded with model building forbidden (``AutoModel.from_pretrained`` raises):
a loader that checked too late would fail on that, not with the ``RewardError``.
"""

import json
import shutil

import pytest

from agentreward import RewardEngine, RewardError


@pytest.fixture(scope="module")
def checkpoint(build_prm, tmp_path_factory):
    """conftest's real tiny PRM: a one-layer BERT (hidden 32, 2 heads, 512 positions, 141 tokens), max_length 256."""
    return build_prm(tmp_path_factory.mktemp("prm") / "ck")


@pytest.fixture
def no_model_building(monkeypatch):
    transformers = pytest.importorskip("transformers")

    def refuse(*args, **kwargs):
        raise AssertionError("a model was built before the checkpoint's sizes were checked")

    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", refuse)
    monkeypatch.setattr(transformers.AutoModel, "from_config", refuse)


def tampered(checkpoint, tmp_path, file, **changes):
    copy = tmp_path / "tampered"
    shutil.copytree(checkpoint, copy)
    data = json.loads((copy / file).read_text())
    data.update(changes)
    (copy / file).write_text(json.dumps(data))
    return copy


def refused(path):
    with pytest.raises(RewardError) as caught:
        RewardEngine(layers=("learned",), prm=path)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_the_untampered_checkpoint_loads(checkpoint):
    assert RewardEngine(layers=("learned",), prm=checkpoint).layers == ("learned",)


def test_max_length_beyond_the_encoders_positions(checkpoint, tmp_path, no_model_building):
    """prm.json max_length 4096 on a 512-position encoder: scoring a long text would crash."""
    path = tampered(checkpoint, tmp_path, "prm.json", max_length=4096)
    message = refused(path)
    assert message.startswith(f"{path / 'prm.json'}: max_length: ")
    assert "4096" in message and "max_position_embeddings" in message and "512" in message


@pytest.mark.parametrize("vocab_size", [2**34, 2**25], ids=["2**34", "2**25"])
def test_a_huge_vocabulary_is_refused_without_allocating(checkpoint, tmp_path, no_model_building, vocab_size):
    """2**34 x 32 floats is 2 TB; 2**25 is 4 GiB, which an OOM killer ends in a 2 GiB cgroup."""
    path = tampered(checkpoint, tmp_path, "config.json", vocab_size=vocab_size)
    message = refused(path)
    assert message.startswith(f"{path / 'config.json'}: vocab_size: ")
    assert str(vocab_size) in message and "1000000" in message


@pytest.mark.parametrize(
    ("changes", "numbers"),
    [({"num_attention_heads": 3}, ["32", "3"]), ({"hidden_size": 33}, ["33", "2"])],
    ids=["heads-3", "hidden-33"],
)
def test_a_hidden_size_the_heads_do_not_divide(checkpoint, tmp_path, no_model_building, changes, numbers):
    path = tampered(checkpoint, tmp_path, "config.json", **changes)
    message = refused(path)
    assert message.startswith(f"{path / 'config.json'}: hidden_size: ")
    assert "num_attention_heads" in message and all(n in message for n in numbers)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("hidden_size", 2**20),
        ("num_hidden_layers", 10**6),
        ("num_attention_heads", 0),
        ("intermediate_size", 2**40),
        ("max_position_embeddings", 2**31),
        ("type_vocab_size", 2**34),
        ("vocab_size", -1),
        ("vocab_size", "70"),
        ("vocab_size", True),
        ("num_hidden_layers", 1.5),
    ],
)
def test_a_size_beyond_its_maximum_or_not_a_count(checkpoint, tmp_path, no_model_building, field, value):
    path = tampered(checkpoint, tmp_path, "config.json", **{field: value})
    assert refused(path).startswith(f"{path / 'config.json'}: {field}: ")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("vocab_size", 1000),
        ("vocab_size", 140),
        ("num_hidden_layers", 200),
        ("intermediate_size", 4096),
        ("max_position_embeddings", 8192),
    ],
)
def test_a_size_the_weights_file_does_not_hold(checkpoint, tmp_path, no_model_building, field, value):
    """Within the maxima but not what model.safetensors holds (its header read, no tensor loaded):
    200 layers of a 32-wide model are small, 200 of a 16,384-wide one would be terabytes."""
    path = tampered(checkpoint, tmp_path, "config.json", **{field: value})
    message = refused(path)
    assert message.startswith(f"{path / 'config.json'}: {field}: ")
    assert str(value) in message and "model.safetensors" in message


def test_a_tokenizer_larger_than_the_vocabulary(checkpoint, tmp_path):
    """Token ids past the embedding table would be an IndexError while scoring."""
    path = tmp_path / "tampered"
    shutil.copytree(checkpoint, path)
    tokenizer = json.loads((path / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    while len(vocab) < 146:  # five more than the model's 141 token embeddings
        vocab[f"zz{len(vocab)}"] = len(vocab)
    (path / "tokenizer.json").write_text(json.dumps(tokenizer))
    message = refused(path)
    assert str(path) in message and "vocab_size" in message and "146" in message and "141" in message
