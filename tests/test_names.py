"""One meaning per name (#28 item 5): renamed names keep working, and the source keeps names apart.

1. Every old name, keyword, config field, config-file key and flag still works and warns exactly
   once, naming its new name, though it is used twice (``knowlyrcore.deprecation`` gives each
   message once per process; each test starts with none given).
2. No top-level public function name is defined in two packages with different parameters
   (``max_steps``-style clashes: one name, two meanings), and no module imports another module's
   private (``_name``) name: a name another module uses is public.
"""

from __future__ import annotations

import ast
import importlib
import warnings
from collections import defaultdict
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import agenttrainer.cli
import agenttrainer.retrieval
from agenttrainer.config import DPOConfig, GRPOConfig, OnlineRLConfig, SFTConfig
from agenttrainer.models import overfit_tiny_model
from agenttrainer.online import collect_rollouts
from agenttrainer.retrieval import RetrieverConfig
from knowlyrcore import AgentEnv, TimeStep, deprecation
from knowlyrcore.policy import as_batch_policy
from knowlyrcore.rollout import play_episodes, wrap_episode_env

ROOT = Path(__file__).resolve().parent.parent
SRC_FOLDERS = sorted(ROOT.glob("packages/*/src"))


@pytest.fixture(autouse=True)
def no_deprecation_given_yet(monkeypatch):
    """Each test sees every deprecation as not given yet in this process."""
    monkeypatch.setattr(deprecation, "given", set())


def twice_warned(use):
    """``use()`` called twice: both results and the messages of the DeprecationWarnings given."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = use(), use()
    return results, [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]


# --- 1. old names still work, warning once -------------------------------------------------------


class Coin(AgentEnv):
    def reset(self, *, task=None, seed=None):
        return TimeStep("flip?")

    def step(self, action):
        return TimeStep("heads", reward=1.0, terminated=True)


def _collect_rollouts_old():
    # max_turns=0 reaches collect_rollouts as max_steps=0, which it refuses before playing anything
    with pytest.raises(ValueError, match="max_steps"):
        collect_rollouts("unused", [], None, None, max_turns=0)
    return "max_steps=0 refused"


KEYWORDS = {  # the old keyword (or attribute) -> (a use of it, what the use gives, the new name)
    "SFTConfig(max_steps=)": (
        lambda: SFTConfig(train_file="t", max_steps=3).max_optimizer_steps,
        3,
        "max_optimizer_steps",
    ),
    "DPOConfig(max_steps=)": (
        lambda: DPOConfig(train_file="t", max_steps=3).max_optimizer_steps,
        3,
        "max_optimizer_steps",
    ),
    "GRPOConfig(max_steps=)": (
        lambda: GRPOConfig(train_file="t", max_steps=3).max_optimizer_steps,
        3,
        "max_optimizer_steps",
    ),
    "SFTConfig.max_steps": (
        lambda: SFTConfig(train_file="t", max_optimizer_steps=4).max_steps,
        4,
        "max_optimizer_steps",
    ),
    "SFTConfig.from_dict({max_steps})": (
        lambda: SFTConfig.from_dict({"train_file": "t", "max_steps": 5}).max_optimizer_steps,
        5,
        "max_optimizer_steps",
    ),
    "OnlineRLConfig(max_turns=)": (
        lambda: OnlineRLConfig(env_id="e", tasks_file="t", max_turns=3).max_steps,
        3,
        "max_steps",
    ),
    "OnlineRLConfig.max_turns": (
        lambda: OnlineRLConfig(env_id="e", tasks_file="t", max_steps=6).max_turns,
        6,
        "max_steps",
    ),
    "RetrieverConfig(max_steps=)": (lambda: RetrieverConfig(max_steps=7).max_optimizer_steps, 7, "max_optimizer_steps"),
    "overfit_tiny_model(max_steps=)": (
        lambda: overfit_tiny_model(torch.nn.Linear(1, 1), None, [], max_steps=1).training,
        False,  # nothing to fit: returned at once, in eval mode
        "max_optimizer_steps",
    ),
    "play_episodes(max_turns=)": (
        lambda: [
            (e.end, e.turns)
            for e in play_episodes(
                [wrap_episode_env(Coin())],
                as_batch_policy(lambda: lambda observation: {"tool": "flip", "params": {}}),
                [None],
                max_turns=0,
            )
        ],
        [("max_steps", 0)],
        "max_steps",
    ),
    "collect_rollouts(max_turns=)": (_collect_rollouts_old, "max_steps=0 refused", "max_steps"),
}


@pytest.mark.parametrize("case", sorted(KEYWORDS))
def test_an_old_keyword_or_field_works_and_warns_once_naming_the_new_one(case):
    use, expected, new = KEYWORDS[case]
    results, messages = twice_warned(use)
    assert results == (expected, expected)
    assert len(messages) == 1, messages
    assert f"use {new}" in messages[0]


MOVED = [  # (module, old name, module of the new name, new name)
    ("agenttrainer.inference", "parse_action", "agenttrainer.inference", "action_from_answer"),
    ("agenttrainer.inference", "tool_schemas", "agenttrainer.inference", "chat_template_tools"),
    ("agenttrainer.algorithms", "get", "agenttrainer.algorithms", "get_algorithm"),
    ("agenttrainer.algorithms", "names", "agenttrainer.algorithms", "algorithm_names"),
    ("agenttrainer.algorithms", "register", "agenttrainer.algorithms", "register_algorithm"),
    ("agenttrainer.algorithms.registry", "get", "agenttrainer.algorithms", "get_algorithm"),
    ("agenttrainer.algorithms.registry", "names", "agenttrainer.algorithms", "algorithm_names"),
    ("agenttrainer.algorithms.registry", "register", "agenttrainer.algorithms", "register_algorithm"),
    ("agenttrainer.data", "read_jsonl", "agenttrainer.data", "read_located_records"),
    ("agenttrainer.data.readers", "read_jsonl", "agenttrainer.data", "read_located_records"),
    ("agentsandbox.bfcl.library", "query_pairs", "agentsandbox.bfcl.library", "bfcl_query_pairs"),
    ("agentreward", "read_trajectories", "agentreward", "read_trajectory_dicts"),
    ("agentreward.trajectories", "read_trajectories", "agentreward", "read_trajectory_dicts"),
    ("agentreward.trajectories", "iter_json_lines", "agentreward.trajectories", "read_json_lines"),
    ("agentreward.trajectories", "write_jsonl", "knowlyrcore.jsonl", "write_jsonl"),
    *(
        ("agenttrainer.trainers.common", name, owner, name)
        for owner, name in [
            ("agenttrainer.trainers.setup", "load_policy"),
            ("agenttrainer.trainers.setup", "make_accelerator"),
            ("agenttrainer.trainers.setup", "make_optimizer_and_scheduler"),
            ("agenttrainer.trainers.plan", "epoch_windows"),
            ("agenttrainer.trainers.plan", "global_batches"),
            ("agenttrainer.trainers.plan", "shard"),
            ("agenttrainer.trainers.guards", "NonFiniteLossError"),
            ("agenttrainer.trainers.guards", "check_finite"),
            ("agenttrainer.checkpoints", "CHECKPOINT_PREFIX"),
            ("agenttrainer.checkpoints", "list_checkpoints"),
            ("agenttrainer.checkpoints", "load_checkpoint"),
            ("agenttrainer.checkpoints", "resolve_checkpoint"),
            ("agenttrainer.checkpoints", "save_checkpoint"),
            ("agenttrainer.checkpoints", "trainable_state"),
            ("agenttrainer.models.attention", "PACKED_ATTENTION"),
            ("agenttrainer.models.attention", "HiddenStates"),
            ("agenttrainer.packed", "sequence_sums"),
            ("agenttrainer.packed", "to_device"),
            ("agenttrainer.packed", "unpack_tokens"),
        ]
    ),
]


@pytest.mark.parametrize(("module", "old", "owner", "new"), MOVED, ids=[f"{m}.{o}" for m, o, _, _ in MOVED])
def test_an_old_module_name_is_the_new_object_and_warns_once_naming_it(module, old, owner, new):
    old_module, new_module = importlib.import_module(module), importlib.import_module(owner)
    results, messages = twice_warned(lambda: getattr(old_module, old))
    assert results[0] is results[1] is getattr(new_module, new)
    assert len(messages) == 1, messages
    assert f"{owner}.{new}" in messages[0]


def test_the_private_kernel_names_left_trainers_common():
    from agenttrainer.trainers import common

    for name in ("_EXPLICIT_ATTENTION_MAX_LEN", "_base", "_causal_attention", "_packed_sdpa"):
        with pytest.raises(AttributeError):
            getattr(common, name)


@pytest.fixture
def captured(monkeypatch):
    """The configs the training commands would run, without running them."""
    seen = []
    monkeypatch.setattr(agenttrainer.cli, "_run", lambda trainer_cls, config: seen.append(config))
    monkeypatch.setattr(agenttrainer.retrieval, "train_retriever", lambda config: seen.append(config) or {})
    return seen


FLAGS = [  # (the command with an old flag, the field it sets, the value, the new flag)
    (["sft", "--train-file", "t.jsonl", "--max-steps", "3"], "max_optimizer_steps", 3, "--max-optimizer-steps"),
    (["dpo", "--train-file", "t.jsonl", "--max-steps", "3"], "max_optimizer_steps", 3, "--max-optimizer-steps"),
    (["grpo", "--train-file", "t.jsonl", "--max-steps", "3"], "max_optimizer_steps", 3, "--max-optimizer-steps"),
    (["grpo", "--online", "--env", "e", "--tasks", "t.jsonl", "--max-turns", "3"], "max_steps", 3, "--max-steps"),
    (["retriever", "--max-steps", "3"], "max_optimizer_steps", 3, "--max-optimizer-steps"),
]


@pytest.mark.parametrize(("args", "field", "value", "new_flag"), FLAGS, ids=[" ".join(a[:2]) for a, *_ in FLAGS])
def test_an_old_flag_works_and_warns_once_naming_the_new_one(captured, args, field, value, new_flag):
    runs = [CliRunner().invoke(agenttrainer.cli.cli, args) for _ in range(2)]
    assert [r.exit_code for r in runs] == [0, 0], runs[0].output
    assert [getattr(config, field) for config in captured] == [value, value]
    warned = [line for r in runs for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert warned == [f"warning: {args[-2]} is deprecated: use {new_flag}"]


def test_an_old_config_file_key_works_warns_once_with_its_line_and_a_new_flag_wins(captured, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("train_file: t.jsonl\nmax_steps: 4\n")
    runs = [CliRunner().invoke(agenttrainer.cli.cli, ["sft", "--config", str(config)]) for _ in range(2)]
    runs.append(
        CliRunner().invoke(agenttrainer.cli.cli, ["sft", "--config", str(config), "--max-optimizer-steps", "9"])
    )
    assert [r.exit_code for r in runs] == [0, 0, 0], runs[0].output
    assert [c.max_optimizer_steps for c in captured] == [4, 4, 9]
    warned = [line for r in runs for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert warned == [f"warning: {config}:2: max_steps is deprecated: use max_optimizer_steps"]


def test_an_old_and_a_new_name_together_are_refused():
    with pytest.raises(TypeError, match="give only max_optimizer_steps"):
        SFTConfig(train_file="t", max_steps=1, max_optimizer_steps=2)
    result = CliRunner().invoke(agenttrainer.cli.cli, ["sft", "--max-steps", "1", "--max-optimizer-steps", "2"])
    assert result.exit_code == 2 and "give only --max-optimizer-steps" in result.stderr


# --- 2. the source keeps names apart ------------------------------------------------------------

#: Public functions that several packages define on purpose, with what they share.
SHARED_NAMES = {
    "build_server": "each package's mcp_server module builds its MCP server; the options are the "
    "package's own (the sandbox's backend, config and roots)",
}


def _interface_named(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A click command or an MCP tool: what callers use is the command's or the tool's name (each
    package's ``export`` command, ``evaluate`` tool), not the Python function's."""
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and target.attr in ("command", "tool", "group"):
            return True
    return False


def _parameters(args: ast.arguments) -> tuple[tuple[str, str], ...]:
    """The parameters as a caller sees them: kind and name, in order (annotations aside)."""
    return (
        *(("positional", a.arg) for a in args.posonlyargs),
        *(("positional_or_keyword", a.arg) for a in args.args),
        *((("*", args.vararg.arg),) if args.vararg else ()),
        *(("keyword", a.arg) for a in args.kwonlyargs),
        *((("**", args.kwarg.arg),) if args.kwarg else ()),
    )


def public_functions(tree: ast.Module) -> dict[str, tuple[tuple[str, str], ...]]:
    """A module's top-level public functions (commands and MCP tools aside) and their parameters."""
    return {
        node.name: _parameters(node.args)
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and not node.name.startswith("_")
        and not _interface_named(node)
    }


def private_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """``(line, what)`` of each import of another module's private name; only the imported name
    counts, not the alias (``from importlib import metadata as _metadata`` is fine)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found += [
                (node.lineno, f"from {'.' * node.level}{node.module or ''} import {alias.name}")
                for alias in node.names
                if alias.name.startswith("_") and not alias.name.startswith("__")
            ]
        elif isinstance(node, ast.Import):
            found += [
                (node.lineno, f"import {alias.name}")
                for alias in node.names
                if any(part.startswith("_") and not part.startswith("__") for part in alias.name.split("."))
            ]
    return found


def _modules():
    for folder in SRC_FOLDERS:
        for path in sorted(folder.rglob("*.py")):
            yield folder.parent.name, path, ast.parse(path.read_text(encoding="utf-8"))


def test_the_scans_see_every_package_and_what_they_look_for():
    assert len(SRC_FOLDERS) >= 6, SRC_FOLDERS
    tree = ast.parse(
        "from a import _b, c\nfrom . import _d\nfrom importlib import metadata as _metadata\n"
        "from __future__ import annotations\nimport e._f\n"
        "def g(x, *, y=1): pass\nasync def _h(): pass\n@cli.command('i')\ndef i(): pass\n"
    )
    assert private_imports(tree) == [(1, "from a import _b"), (2, "from . import _d"), (5, "import e._f")]
    assert public_functions(tree) == {"g": (("positional_or_keyword", "x"), ("keyword", "y"))}


def test_no_public_function_name_has_two_meanings_across_packages():
    defined = defaultdict(dict)  # name -> {parameters: [where, ...]}
    for package, path, tree in _modules():
        for name, parameters in public_functions(tree).items():
            defined[name].setdefault(parameters, []).append((package, path.relative_to(ROOT).as_posix()))
    clashes = {
        name: signatures
        for name, signatures in defined.items()
        if name not in SHARED_NAMES
        and len(signatures) > 1
        and len({package for places in signatures.values() for package, _ in places}) > 1
    }
    report = [
        f"{name}: {where}({', '.join(p for _, p in params)})"
        for name, signatures in sorted(clashes.items())
        for params, places in signatures.items()
        for _, where in places
    ]
    assert not clashes, "one name, several signatures in different packages:\n" + "\n".join(report)
    assert set(SHARED_NAMES) <= set(defined), "a shared name no package defines any more"


def test_no_module_imports_another_modules_private_name():
    found = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for _, path, tree in _modules()
        for line, what in private_imports(tree)
    ]
    assert not found, "a name another module imports is public; drop its underscore:\n" + "\n".join(found)
