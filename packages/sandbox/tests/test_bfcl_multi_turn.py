"""``knowlyr/bfcl-multi-turn`` and the ``bfcl-multi-turn`` suite: the env protocol, the expert solving
every task of every category, BFCL's per-turn judgement (state and results), hostile calls as error
observations, the ground-truth parser, splits, and one-line errors without bfcl-eval or mpmath or
with malformed files.

The data tests need bfcl-eval (``pip install --no-deps bfcl-eval==2026.3.23``) and mpmath (MathAPI's
backend imports it); they skip without them, and fail under ``KNOWLYR_REQUIRE_COMPONENTS=1`` (CI).
"""

import decimal
import functools
import importlib.util
import json
import re
import sys

import pytest
from bfcl_shared import HAVE_BFCL, RESPOND, BFCLEnvConformance, hub_tasks_without_bfcl_eval, run_python

from agentsandbox.bfcl.data import INSTALL_STEP
from agentsandbox.bfcl.multi_turn import (
    ADDED_FUNCTIONS_PROMPT,
    MULTI_TURN_CATEGORIES,
    Backends,
    CallResult,
    CallSyntaxError,
    judge_turn,
    load_multi_turn,
    parse_call,
)
from agentsandbox.bfcl.multi_turn_env import BFCLMultiTurnEnv
from agentsandbox.suites import SuiteError
from agentsandbox.suites import bfcl_multi_turn as suite_module
from agentsandbox.suites.bfcl_multi_turn import BFCL_MULTI_TURN, scenario, split_of
from knowlyrcore.domain import tool_schemas
from knowlyrcore.testing import require

HAVE_MPMATH = importlib.util.find_spec("mpmath") is not None


def needs_bfcl():
    require(HAVE_BFCL and HAVE_MPMATH, f"BFCL's multi-turn tasks need bfcl-eval ({INSTALL_STEP}) and mpmath")


@functools.cache
def split_tasks(split):
    needs_bfcl()
    return BFCL_MULTI_TURN.generate(split, 10**6, 0)


def task_of(bfcl_id):
    return next(t for t in split_tasks(split_of(bfcl_id)) if t["metadata"]["bfcl_id"] == bfcl_id)


def call(tool, **params):
    return {"tool": tool, "params": params}


def turns_of(task):
    """The expert's calls, turn by turn (without the replies)."""
    turns = [[]]
    for action in task["metadata"]["solution"]:
        turns.append([]) if action["tool"] == "respond" else turns[-1].append(action)
    return turns[:-1]


def play(task, turns):
    """Each turn's calls then a reply; the steps taken."""
    env = BFCLMultiTurnEnv()
    steps = [env.reset(task=task)]
    for calls in turns:
        steps.extend(env.step(action) for action in calls)
        steps.append(env.step(RESPOND))
    env.close()
    return steps


def first_turn_only(task):
    """A one-turn task: the first turn of ``task``."""
    task = json.loads(json.dumps(task))
    metadata = task["metadata"]
    metadata["turns"], metadata["ground_truth"] = metadata["turns"][:1], metadata["ground_truth"][:1]
    metadata["solution"] = [*turns_of(task)[0], RESPOND]
    return task


class TestBFCLMultiTurnEnv(BFCLEnvConformance):
    """On the first turn of multi_turn_base_0 (cd, mkdir, mv), so ``respond`` ends the episode."""

    @property
    def task(self):
        return first_turn_only(task_of("multi_turn_base_0"))

    def make_env(self):
        needs_bfcl()
        return BFCLMultiTurnEnv()


def test_expert_solves_every_task_of_every_category():
    """Every task of both splits (795: all of each category but the 5 left out), through a JSONL round trip."""
    tasks = split_tasks("train") + split_tasks("test")
    assert {(t["metadata"]["split"], t["metadata"]["category"]) for t in tasks} == {
        (s, c) for s in ("train", "test") for c in MULTI_TURN_CATEGORIES
    }
    env = BFCLMultiTurnEnv()
    for task in tasks:
        task = json.loads(json.dumps(task))
        expert = BFCL_MULTI_TURN.expert()
        expert.reset(task)
        ts, total = env.reset(task=task), 0.0
        for _ in range(task["max_steps"]):
            ts = env.step(expert(ts.observation))
            total += ts.reward
            assert not ts.info.get("error"), (task["id"], ts.observation)
            if ts.done:
                break
        assert ts.info["success"] is True and total == 1.0, (task["id"], ts.info)
        assert len(ts.info["turns"]) == len(task["metadata"]["turns"])


def test_splits_are_by_scenario_and_every_entry_is_a_task_or_left_out_with_a_reason():
    train, test = split_tasks("train"), split_tasks("test")
    scenarios = {
        s: {scenario(t["metadata"]["bfcl_id"]) for t in tasks} for s, tasks in (("train", train), ("test", test))
    }
    assert not scenarios["train"] & scenarios["test"]
    assert len(scenarios["test"]) == 69 and len(scenarios["train"]) == 130  # 173: all left out
    excluded = suite_module.excluded()
    assert excluded == {
        **{
            f"multi_turn_{c}_173": "its ground truth close_ticket(ticket_id='ticket_001') would be refused: tool "
            "'close_ticket': invalid parameters at 'ticket_id': 'ticket_001' is not of type 'integer'"
            for c in ("base", "miss_func", "miss_param", "long_context")
        },
        "multi_turn_miss_func_49": "its ground truth calls tail in turn 1, before the turn that offers it",
    }
    ids = {e["id"] for c in MULTI_TURN_CATEGORIES for e in load_multi_turn(c)}
    tasks = {t["metadata"]["bfcl_id"] for t in train + test}
    assert len(ids) == 800 and tasks | excluded.keys() == ids and not tasks & excluded.keys()


def test_generate_is_deterministic_and_takes_all_past_the_size():
    needs_bfcl()
    first = BFCL_MULTI_TURN.generate("test", 20, seed=1)
    assert first == BFCL_MULTI_TURN.generate("test", 20, seed=1) and len({t["id"] for t in first}) == 20
    assert {t["id"] for t in first} != {t["id"] for t in BFCL_MULTI_TURN.generate("test", 20, seed=2)}
    assert BFCL_MULTI_TURN.generate("test", 10**4, seed=3) == split_tasks("test")
    first[0]["metadata"]["turns"].clear()  # the caller's copy; the suite's tasks stay whole
    assert BFCL_MULTI_TURN.generate("test", 20, seed=1)[0]["metadata"]["turns"]
    with pytest.raises(SuiteError, match="splits train and test"):
        BFCL_MULTI_TURN.generate("test-unseen", 5)


def test_a_wrong_call_fails_the_state_check_of_its_turn():
    """multi_turn_base_0, turn 0: the directory made and moved into is 'temp2', not 'temp'."""
    task = task_of("multi_turn_base_0")
    turns = turns_of(task)
    turns[0] = [
        call("cd", folder="document"),
        call("mkdir", dir_name="temp2"),
        call("mv", source="final_report.pdf", destination="temp2"),
    ]
    last = play(task, turns)[-1]
    assert (last.done, last.reward, last.info["success"]) == (True, 0.0, False)
    assert last.info["turns"][0] == {
        "turn": 0,
        "checked": True,
        "success": False,
        "calls": 3,
        "reason": "state differs from the ground truth's: GorillaFileSystem.root",
    }
    assert last.info["reason"].startswith("turn 0: state differs")


def test_a_wrong_read_fails_the_response_check():
    """Turn 1 greps for 'revenue' instead of 'budget analysis': the state is the same, a result is missing."""
    task = task_of("multi_turn_base_0")
    turns = turns_of(task)
    turns[1] = [call("cd", folder="temp"), call("grep", file_name="final_report.pdf", pattern="revenue")]
    verdicts = play(task, turns)[-1].info["turns"]
    assert [v["success"] for v in verdicts] == [True, False, True, True]
    assert verdicts[1]["reason"] == "1 ground-truth result(s) not among the model's results (from grep)"


def test_missing_calls_fail():
    task = task_of("multi_turn_base_0")
    turns = turns_of(task)
    turns[1] = turns[1][:-1]  # no grep
    assert play(task, turns)[-1].info["turns"][1]["reason"].startswith("1 ground-truth result(s) not among")
    turns = turns_of(task)
    turns[3] = []  # the last request answered without doing anything
    last = play(task, turns)[-1]
    assert last.info["success"] is False and last.info["reason"] == "turn 3: no call in a turn that needs calls"


def test_unchecked_turn_still_shapes_the_next_state():
    """multi_turn_miss_param_7, turn 1 lacks the word to search for (no ground truth: not checked);
    a directory made there is still in the state the next turn is checked on."""
    task = task_of("multi_turn_miss_param_7")
    turns = turns_of(task)
    assert turns[1] == []
    turns[1] = [call("mkdir", dir_name="guess")]
    verdicts = play(task, turns)[-1].info["turns"]
    assert [(v["checked"], v["success"]) for v in verdicts] == [
        (True, True),
        (False, True),
        (True, False),
        (True, False),
    ]
    assert verdicts[2]["reason"] == "state differs from the ground truth's: GorillaFileSystem.root"


def test_judge_pools_results_of_earlier_turns_as_bfcl_does():
    """BFCL's response check looks for each ground-truth result among all the model's results so far,
    each used once; the turn itself still needs a call."""
    ls = CallResult("ls", '{"current_directory_content": ["a"]}')
    cd = CallResult("cd", '{"current_working_directory": "a"}')
    assert judge_turn(1, [cd], [ls.text, cd.text], [ls, cd], []).success  # ls came in turn 0
    assert not judge_turn(1, [], [ls.text, cd.text], [ls, cd], []).success  # no call in the turn
    verdict = judge_turn(1, [cd], [ls.text, cd.text], [ls, ls, cd], [])  # two ls results expected, one found
    assert not verdict.success and verdict.missing == [ls.text]
    assert not judge_turn(1, [cd, ls], [ls.text, cd.text], [ls, cd], ["TwitterAPI.tweets"]).success
    assert judge_turn(2, [cd], [], [], ["anything"]).as_info() == {
        "turn": 2,
        "checked": False,
        "success": True,
        "calls": 1,
        "reason": "no ground-truth call in this turn: not checked",
    }


def test_state_check_compares_public_attributes_only():
    needs_bfcl()
    task = task_of("multi_turn_base_0")["metadata"]
    model, truth = (Backends(task["involved_classes"], task["initial_config"], False) for _ in range(2))
    offered = {s.name: s for s in tool_schemas_specs(task)}
    assert model.call("cd", {"folder": "document"}, offered).error is None  # moves the private _current_dir
    assert model.state_differences(truth) == []
    model.call("mkdir", {"dir_name": "x"}, offered)
    model.call("authenticate_twitter", {"username": "analyst_pro", "password": "Kj8#mP9$vL2"}, offered)
    assert json.loads(model.call("post_tweet", {"content": "hi"}, offered).text)["id"] == 3
    assert model.state_differences(truth) == [
        "TwitterAPI.authenticated",
        "TwitterAPI.tweets",
        "TwitterAPI.tweet_counter",
        "GorillaFileSystem.root",
    ]
    long = Backends(task["involved_classes"], task["initial_config"], True)
    assert long.state_differences(truth) == ["GorillaFileSystem.long_context", "GorillaFileSystem.root"]


def tool_schemas_specs(metadata):
    from agentsandbox.bfcl.env import tool_specs
    from agentsandbox.bfcl.multi_turn import offered_functions

    return tool_specs(offered_functions(metadata["involved_classes"], metadata["missed_function"], 0))


def test_withheld_functions_arrive_at_their_turn():
    """multi_turn_miss_func_7: mkdir and echo are withheld until turn 1, whose question is BFCL's words."""
    task = task_of("multi_turn_miss_func_7")
    env = BFCLMultiTurnEnv()
    env.reset(task=task)
    assert "mkdir" not in env.available_tools and "cd" in env.available_tools
    ts = env.step(call("mkdir", dir_name="academic_hub"))
    assert ts.observation == "[error] unknown function 'mkdir': call one of the functions offered"
    ts = env.step(RESPOND)
    assert ts.observation.startswith(ADDED_FUNCTIONS_PROMPT + "\n\nFunctions added: ")
    added = json.loads(ts.observation.split("Functions added: ", 1)[1])
    assert [f["name"] for f in added] == ["mkdir", "echo"] and added[0]["parameters"]["required"] == ["dir_name"]
    assert {"mkdir", "echo"} <= set(env.available_tools) and env.domain.startswith("bfcl-multi-turn/")
    assert {s["function"]["name"] for s in tool_schemas(env.available_tools, env.domain)} == set(env.available_tools)
    env.step(call("cd", folder="academic_venture"))
    assert env.step(call("mkdir", dir_name="academic_hub")).observation == "null"  # ran: mkdir returns None


def hostile_calls():
    deep = "x"
    for _ in range(100_000):
        deep = [deep]
    return [
        (call("rm_everything"), "unknown function 'rm_everything'"),
        (call("_load_scenario", scenario={}), "unknown function '_load_scenario'"),
        (call("__class__"), "unknown function '__class__'"),
        (call("__init__"), "unknown function '__init__'"),
        (call("_navigate_to_directory", path="/"), "unknown function '_navigate_to_directory'"),
        (call("respond_" * 10_000), "unknown function 'respond_respond_"),
        (call("cd", folder="document", sudo=True), "cd: unknown parameter 'sudo'; its parameters: folder"),
        ({"tool": "cd", "params": {1: "document"}}, "cd: unknown parameter 1"),
        (call("cd"), "'folder' is a required property"),
        (call("cd", folder=7), "7 is not of type 'string'"),
        (call("cd", folder="\ud800"), "cd.folder: a string with a lone surrogate is refused"),
        (call("tail", file_name="a", lines=10**400), "tail.lines: integers beyond ±2**53 are refused"),
        (call("tail", file_name="a", lines=2**53 + 1), "integers beyond ±2**53 are refused"),
        (call("cd", folder=deep), "nested deeper than 64 levels"),
        (call("power", base=10, exponent=10**6), "power: an integer power of more than 10000 bits is refused"),
        (call("power", base=2.5, exponent=float("nan")), "NaN and infinite numbers are refused"),
        (call("square_root", number=2, precision=10**9), "square_root: precision beyond 1000 is refused"),
        (call("logarithm", value=2, base=10, precision=10**7), "logarithm: precision beyond 1000 is refused"),
        (call("round_number", number=5, decimal_places=-(10**8)), "decimal_places beyond 1000 is refused"),
        (call("mean", numbers=(1, 2)), "(1, 2) is not of type 'array'"),
        (call("square_root", number=2, precision=0), "square_root failed: ValueError: valid range for prec is"),
        (call("cat", file_name="nothing.txt"), None),  # runs: the backend's own error is a result
    ]


def test_hostile_calls_are_error_observations_and_change_nothing():
    """multi_turn_base_31 (a file system and MathAPI): each hostile call is answered with one error
    line and changes nothing (all but one are refused before they run), so the expert still succeeds after them; MathAPI's precision settings do
    not leak into the process."""
    task = task_of("multi_turn_base_31")
    env = BFCLMultiTurnEnv()
    env.reset(task=task)
    for action, expected in hostile_calls():
        ts = env.step(action)
        assert not ts.done and ts.reward == 0.0
        if expected is None:
            assert (
                "error" not in ts.info
                and ts.observation == '{"error": "cat: \'nothing.txt\': No such file or directory"}'
            )
            continue
        assert ts.observation.startswith("[error] ") and expected in ts.observation, (action["tool"][:30], ts)
        assert ts.info["error"] == ts.observation[len("[error] ") :] and "\n" not in ts.observation
        assert len(ts.observation) <= 600 and ts.observation.encode("utf-8")
    precision, dps = decimal.getcontext().prec, sys.modules["mpmath"].mp.dps
    root = json.loads(env.step(call("square_root", number=2, precision=50)).observation)["result"]
    assert root == "1.4142135623730950488016887242096980785696718753769"  # 50 digits
    assert json.loads(env.step(call("logarithm", value=8, base=2, precision=40)).observation)["result"] == "3.0"
    assert (decimal.getcontext().prec, sys.modules["mpmath"].mp.dps) == (precision, dps)
    unparsed = {"tool": "cd", "params": {}, "format_error": "arguments of 'cd' are not valid JSON"}
    assert env.step(unparsed).info["error"] == "the arguments of 'cd' did not parse, so nothing ran; call it again"
    expert = BFCL_MULTI_TURN.expert()
    expert.reset(task)
    for _ in task["metadata"]["solution"]:
        ts = env.step(expert(None))
    assert ts.info["success"] is True, ts.info


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("__import__('os').system('ls')", "expected one call of a plain function name"),
        ("os.system('ls')", "expected one call of a plain function name"),
        ("cd(folder=open('/etc/passwd').read())", "cd: arguments must be literals"),
        ("cd(folder=x)", "cd: arguments must be literals"),
        ("cd(folder=f'{x}')", "cd: arguments must be literals"),
        ("cd(folder=1 if True else 2)", "cd: arguments must be literals"),
        ("cd(*args)", "cd: * and ** arguments are not literals"),
        ("cd(**kwargs)", "cd: * and ** arguments are not literals"),
        ("cd(folder='a'); rm(file_name='b')", "not a Python call"),
        ("[cd(folder='a')]", "expected one call of a plain function name"),
        ("lambda: cd(folder='a')", "expected one call of a plain function name"),
        ("cd(folder='a', folder='b')", "cd: an argument is given twice"),
        ("cd(folder={1, 2})", "cd: arguments must be JSON values"),
        ("cd(folder=(1, 2))", "cd: arguments must be JSON values"),
        ("cd(folder=1e999)", "cd: arguments must be JSON values"),
        ("cd(folder=b'x')", "cd: arguments must be JSON values"),
        ("cd(folder='a'\x00)", "not a Python call"),
        ("cd(" * 10_000, "not a Python call"),
        (["cd(folder='a')"], "expected a string, got list"),
    ],
)
def test_ground_truth_parser_refuses_anything_but_a_call_with_literal_arguments(text, problem):
    with pytest.raises(CallSyntaxError, match="^" + re.escape(problem)):
        parse_call(text)


def test_ground_truth_parser_reads_literals_and_evaluates_nothing(tmp_path):
    target = tmp_path / "pwned"
    assert parse_call(f"open({str(target)!r}, 'w')") == ("open", [str(target), "w"], {})
    assert not target.exists()  # parsed, never run
    assert parse_call("mean([227.16, -2, 1e3])") == ("mean", [[227.16, -2, 1000.0]], {})
    assert parse_call(" post_tweet(content='a', tags=['#x'], mentions=[]) ") == (
        "post_tweet",
        [],
        {"content": "a", "tags": ["#x"], "mentions": []},
    )
    # a task whose ground truth names anything but the involved classes' functions is refused at reset
    task = json.loads(json.dumps(task_of("multi_turn_base_0")))
    task["metadata"]["ground_truth"][0] = [f"open({str(target)!r}, 'w')"]
    with pytest.raises(ValueError, match=r"metadata.ground_truth.0.0: 'open' is not a function of the involved"):
        BFCLMultiTurnEnv().reset(task=task)
    assert not target.exists()


def test_without_bfcl_eval_or_mpmath_every_entry_point_says_how_to_install():
    code = """
        import sys
        sys.modules[sys.argv[1]] = None  # as if it were not installed
        from agentsandbox.bfcl.multi_turn_env import BFCLMultiTurnEnv
        from agentsandbox.suites.bfcl_multi_turn import BFCL_MULTI_TURN
        task = {"id": "t", "description": "q", "metadata": {"turns": ["q"], "involved_classes": ["MathAPI"],
                "ground_truth": [["add(a=1, b=2)"]]}}
        for entry_point in (lambda: BFCL_MULTI_TURN.generate("test", 5), lambda: BFCLMultiTurnEnv().reset(task=task)):
            try:
                entry_point()
            except Exception as exc:
                print(type(exc).__name__, getattr(exc, "exit_code", None), repr(str(exc)))
    """
    expected = f"BFCL tasks need the bfcl-eval package: {INSTALL_STEP} (docs/bfcl.md)"
    assert run_python(code, "bfcl_eval") == [f"BFCLError 2 {expected!r}"] * 2
    if HAVE_BFCL:
        expected = "BFCL's MathAPI backend needs the mpmath package: pip install mpmath (docs/bfcl.md)"
        assert run_python(code, "mpmath") == [f"BFCLError 2 {expected!r}"] * 2


def test_hub_tasks_without_bfcl_eval_prints_one_line_and_exits_2(tmp_path):
    """``knowlyr-hub tasks bfcl-multi-turn`` on a bare install."""
    target = "agentsandbox.suites.bfcl_multi_turn:BFCL_MULTI_TURN"
    lines = hub_tasks_without_bfcl_eval(tmp_path, "bfcl-multi-turn", target)
    assert lines[0] == "2" and len(lines) == 2, lines
    assert lines[1].startswith(f"error: BFCL tasks need the bfcl-eval package: {INSTALL_STEP} (docs/bfcl.md)")


def test_malformed_multi_turn_files_are_one_line_errors(tmp_path):
    data = tmp_path / "bfcl_eval" / "data"
    (data / "possible_answer").mkdir(parents=True)
    (data / "multi_turn_func_doc").mkdir()
    (tmp_path / "bfcl_eval" / "__init__.py").write_text("")
    cd = {
        "name": "cd",
        "description": "Change directory.",
        "parameters": {"type": "dict", "properties": {"folder": {"type": "string"}}, "required": ["folder"]},
    }
    (data / "multi_turn_func_doc" / "gorilla_file_system.json").write_text(json.dumps(cd) + "\n")
    good = {
        "id": "multi_turn_base_0",
        "question": [[{"role": "user", "content": "Go to docs."}]],
        "initial_config": {},
        "involved_classes": ["GorillaFileSystem"],
    }

    def write(category, entry, answer):
        (data / f"BFCL_v4_multi_turn_{category}.json").write_text(entry)
        (data / "possible_answer" / f"BFCL_v4_multi_turn_{category}.json").write_text(answer)

    answer = {"id": "multi_turn_base_0", "ground_truth": [["cd(folder='docs')"]]}
    write("base", json.dumps(good)[:50], json.dumps(answer))  # truncated
    write("miss_func", json.dumps({**good, "involved_classes": ["Shell"]}), json.dumps(answer))
    write("miss_param", json.dumps(good), json.dumps({**answer, "ground_truth": [["cd(folder=input())"]]}))
    write("long_context", json.dumps(good), json.dumps({**answer, "ground_truth": [[], []]}))
    lines = run_python(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})  # this bfcl_eval, not an installed one
        from agentsandbox.bfcl import multi_turn
        for category in multi_turn.MULTI_TURN_CATEGORIES + ("multi_turn_composite",):
            try:
                multi_turn.load_multi_turn(category)
            except Exception as exc:
                print(type(exc).__name__, "|", str(exc).replace({str(data)!r}, "DATA"))
    """)
    assert lines[0].startswith("DataFormatError | DATA/BFCL_v4_multi_turn_base.json:1: ")
    assert lines[1:] == [
        "DataFormatError | DATA/BFCL_v4_multi_turn_miss_func.json:1: involved_classes: unknown backend class "
        "'Shell'; known: GorillaFileSystem, MathAPI, MessageAPI, TwitterAPI, TicketAPI, TradingBot, TravelAPI, "
        "VehicleControlAPI",
        "DataFormatError | DATA/possible_answer/BFCL_v4_multi_turn_miss_param.json:1: ground_truth.0.0: cd: "
        "arguments must be literals (strings, numbers, lists, dicts)",
        "DataFormatError | DATA/possible_answer/BFCL_v4_multi_turn_long_context.json:1: ground_truth: expected one "
        "list of calls for each of the 1 turns",
        "BFCLError | unknown BFCL multi-turn category 'multi_turn_composite'; known: "
        + ", ".join(MULTI_TURN_CATEGORIES),
    ]


def test_docstring_examples_run():
    needs_bfcl()
    import doctest

    import agentsandbox.bfcl.multi_turn

    for module in (agentsandbox.bfcl.multi_turn, suite_module):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, module.__name__


KINDS = ("as the expert", "drop a call", "repeat a call", "a turn early", "swap two calls")


def perturbed(turns, kind, rng):
    """The expert's turns with one deliberate fault of ``kind`` in a random turn with calls (None: not applicable)."""
    turns = [list(t) for t in turns]
    busy = [i for i, t in enumerate(turns) if t]
    i = rng.choice(busy)
    if kind == "drop a call":
        turns[i].pop(rng.randrange(len(turns[i])))
    elif kind == "repeat a call":
        j = rng.randrange(len(turns[i]))
        turns[i].insert(j, turns[i][j])
    elif kind == "a turn early":
        if i == 0:
            return None
        turns[i - 1].extend(turns[i])
        turns[i] = []
    elif kind == "swap two calls":
        if len(turns[i]) < 2:
            return None
        turns[i][:2] = turns[i][1::-1]
    return turns


def test_verdicts_agree_with_bfcl_evals_own_checker():
    """Every 8th task, played as the expert does and with one fault (a call dropped, repeated, made a
    turn early, two calls swapped): our verdict equals bfcl-eval's ``multi_turn_checker`` on the same
    calls. (The full pool, 3,315 runs, agreed too; see docs/bfcl.md.)"""
    needs_bfcl()
    import random

    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    def as_string(action):  # BFCL's form of a call, as a model's decoded output
        return f"{action['tool']}({', '.join(f'{k}={v!r}' for k, v in action['params'].items())})"

    rng, runs, outcomes = random.Random(27), 0, set()
    tasks = (split_tasks("train") + split_tasks("test"))[::8]
    try:
        for n, task in enumerate(tasks):
            metadata = task["metadata"]
            for k, kind in enumerate(KINDS):
                turns = perturbed(turns_of(task), kind, rng)
                if turns is None:
                    continue
                ours = play(task, turns)[-1].info["success"]
                entry = {key: metadata[key] for key in ("initial_config", "involved_classes")} | {
                    "id": metadata["bfcl_id"]
                }
                theirs = multi_turn_checker(
                    [[[as_string(a)] for a in t] for t in turns],
                    metadata["ground_truth"],
                    entry,
                    metadata["category"],
                    f"knowlyr_test_{n}_{k}",
                )
                assert ours == theirs["valid"], (metadata["bfcl_id"], kind, theirs)
                runs, outcomes = runs + 1, outcomes | {(kind, ours)}
    finally:  # bfcl-eval keeps each run's instances in its module's globals
        for name in [k for k in vars(multi_turn_utils) if k.startswith("knowlyr_test_")]:
            delattr(multi_turn_utils, name)
    assert runs > 350 and {(k, False) for k in ("drop a call", "repeat a call", "a turn early")} <= outcomes
    assert ("as the expert", True) in outcomes and ("repeat a call", True) in outcomes


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"turns": []}, "metadata.turns: expected a non-empty list of the user's turns"),
        ({"involved_classes": ["os"]}, "metadata.involved_classes: expected a list of BFCL backend classes"),
        ({"missed_function": {"x": []}}, "metadata.missed_function: expected {turn index: [function names]}"),
        ({"ground_truth": [[]]}, "metadata.ground_truth: expected a list of calls for each of the 4 turns"),
        (
            {"initial_config": {"GorillaFileSystem": {"root": {"x": {"type": "file"}}}}},
            "metadata.initial_config.GorillaFileSystem: BFCL's backend cannot load it: KeyError",
        ),
    ],
)
def test_env_refuses_a_malformed_task_in_one_line(change, problem):
    task = json.loads(json.dumps(task_of("multi_turn_base_0")))
    task["metadata"].update(change)
    with pytest.raises(ValueError, match="^BFCL multi-turn task 'bfcl-multi_turn_base_0': " + re.escape(problem)):
        BFCLMultiTurnEnv().reset(task=task)
