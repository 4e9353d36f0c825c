from agentreward.rules import analyse, penalty_counts, rule_scores


def traj(*steps, description="fix the bug in sort.py", success=None):
    return {"task": {"description": description}, "steps": list(steps), "outcome": {"success": success}}


def test_exact_repeat_is_redundant_until_state_changes(make_step):
    read = make_step("read_file", {"path": "sort.py"}, "def sort(a): ...")
    edit = make_step("edit_file", {"path": "sort.py", "old_str": "a", "new_str": "b"}, "edited")
    sig = analyse(traj(read, read, edit, read))
    assert [s.redundant for s in sig] == [False, True, False, False]


def test_failed_mutation_does_not_reset_redundancy(make_step):
    read = make_step("read_file", {"path": "sort.py"}, "x")
    bad = make_step("bash", {"command": "pytset"}, "bash: pytset: command not found", exit_code=127)
    assert [s.redundant for s in analyse(traj(read, bad, read))] == [False, False, True]


def test_near_repeat(make_step):
    a = make_step("grep", {"pattern": "def sort_items", "path": "src/sorting.py"})
    b = make_step("grep", {"pattern": "def sort_items", "path": "./src/sorting.py"})
    sig = analyse(traj(a, b))
    assert not sig[1].redundant and sig[1].near_redundant


def test_grounding_counts_reference_tokens_seen_before(make_step):
    # task mentions sort.py; the listing mentions utils.py; "ghost.py" appears nowhere
    listing = make_step("bash", {"command": "ls"}, "sort.py utils.py", exit_code=0)
    read_known = make_step("read_file", {"path": "utils.py"})
    read_unknown = make_step("read_file", {"path": "ghost.py"})
    sig = analyse(traj(listing, read_known, read_unknown))
    # "ls" has no token of 3+ characters -> nothing to ground -> 1.0
    assert sig[0].grounded_fraction == 1.0
    assert sig[1].grounded_fraction == 1.0
    assert sig[2].grounded_fraction == 0.0


def test_long_string_parameters_are_content_not_references(make_step):
    body = "brand new content " * 30  # > 200 characters
    sig = analyse(traj(make_step("write_file", {"path": "sort.py", "content": body})))
    assert sig[0].grounded_fraction == 1.0  # only "sort.py" counts, and the task names it


def test_failure_signals(make_step):
    sig = analyse(
        traj(
            make_step("bash", {"command": "make"}, "ok", exit_code=2),
            make_step("bash", {"command": "sleep 99"}, "", error="command timed out after 5s"),
            make_step("fly", {}, "Error: unknown tool 'fly'"),
            make_step("bash", {"command": "x"}, "could not parse the action"),
            make_step("python", {"code": "1/0"}, "Traceback (most recent call last):\n ZeroDivisionError"),
            make_step("bash", {"command": "echo hi"}, "hi", exit_code=0),
        )
    )
    assert [s.failed for s in sig] == [True, True, True, False, True, False]
    assert [s.timeout for s in sig] == [False, True, False, False, False, False]
    assert sig[2].wrong_tool and sig[3].format_error


def test_reverting_an_edit_is_a_regression(make_step):
    fwd = make_step("edit_file", {"path": "a.py", "old_str": "x < y", "new_str": "x <= y"}, "ok")
    back = make_step("edit_file", {"path": "a.py", "old_str": "x <= y", "new_str": "x < y"}, "ok")
    assert [s.regression for s in analyse(traj(fwd, back))] == [False, True]


def test_fewer_passing_tests_is_a_regression(make_step):
    t1 = make_step("run_tests", {}, "5 passed, 1 failed", exit_code=1)
    t2 = make_step("run_tests", {"path": "tests"}, "3 passed, 3 failed", exit_code=1)
    assert [s.regression for s in analyse(traj(t1, t2))] == [False, True]


def test_rule_scores_hand_derived(make_step):
    """Two steps; the second repeats the first exactly.

    step 0: nothing failed, reference token "sort.py" is in the task -> info 1.0, non_redundancy 1.0,
            param 1.0, tool 1.0; observation tokens {"def", "sort"} are all new (novelty 1.0)
            -> goal = 0.5 + 0.4 * min(1, 2 * 1.0) = 0.9
    step 1: exact repeat -> non_redundancy 0.0 and goal 0.0; everything else as step 0.
    """
    read = make_step("read_file", {"path": "sort.py"}, "def sort")
    scores = rule_scores(traj(read, read, description="look at sort.py"))
    assert scores[0] == {
        "goal_progress": 0.9,
        "tool_selection": 1.0,
        "param_correctness": 1.0,
        "info_utilization": 1.0,
        "non_redundancy": 1.0,
    }
    assert scores[1]["non_redundancy"] == 0.0 and scores[1]["goal_progress"] == 0.0


def test_last_step_goal_follows_outcome(make_step):
    s = make_step("submit", {})
    assert rule_scores(traj(s, success=True))[0]["goal_progress"] == 1.0
    assert rule_scores(traj(s, success=False))[0]["goal_progress"] == 0.0


def test_repeated_failure_lowers_tool_selection(make_step):
    bad = make_step("bash", {"command": "pytest"}, "error: no tests", exit_code=4)
    bad2 = make_step("bash", {"command": "pytest -x"}, "error: no tests", exit_code=4)
    scores = rule_scores(traj(bad, bad2))
    assert scores[0]["tool_selection"] == 1.0 and scores[1]["tool_selection"] == 0.3
    assert scores[1]["param_correctness"] == 0.3


def test_penalty_counts(make_step):
    read = make_step("read_file", {"path": "a"})
    counts = penalty_counts(analyse(traj(read, read, read, make_step("zap", {}, "unknown tool zap"))))
    assert counts == {
        "wrong_tool": 1,
        "redundant_call": 2,
        "format_error": 0,
        "timeout": 0,
        "unconfirmed_action": 0,
        "ungrounded_argument": 0,
        "repeated_action": 0,
        "action_after_done": 0,
        "needless_transfer": 0,
        "gave_up": 0,
    }


def test_empty_trajectory():
    assert analyse(traj()) == [] and rule_scores(traj()) == []
