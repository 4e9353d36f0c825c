"""``make_reward_fn``: each step's reward is knowlyr-reward's rule-layer score of that step.

The expected values are derived by hand from agentreward's rules and rubric weights:

    reward = sum(weight[r] * score[r]) over the five rubrics
    generic weights: 0.2 each; coding: goal 0.30, tool 0.20, param 0.20, info 0.15, non_redundancy 0.15

    goal_progress     1.0 / 0.0 on the last step when the outcome is known (the episode is done and
                      ``info["success"]`` is set); 0 for a repeated call; 0.2 for a failed step;
                      otherwise 0.5 + 0.4 * min(1, 2 * novelty), novelty = the fraction of the
                      observation's words (3+ characters) not seen in the task or earlier steps
    tool_selection    1.0 (no unknown tool, no repeated failure)
    param_correctness 1.0, or 0.3 for a failed step (exit code != 0 or an error)
    info_utilization  the fraction of the parameters' reference words found in the task or
                      earlier observations (1.0 when the parameters have none)
    non_redundancy    0.0 for an exact repeat since the last state change, else 1.0
"""

import pytest

pytest.importorskip("agentreward")

from knowlyrcore import TimeStep
from trajectoryhub import collect, make_reward_fn

READ_A = {"tool": "read_file", "params": {"path": "a.py"}}


def test_repeated_guesses_lose_goal_progress_and_non_redundancy(guess_env):
    """Guess 1 three times (target 5; the observation is "higher" each time), generic weights.

    step 1: "higher" is new (novelty 1 -> goal 0.9), the rest 1.0   -> 0.2 * (0.9 + 4) = 0.98
    steps 2, 3: exact repeats ("guess" changes no state): goal 0, non_redundancy 0 -> 0.2 * 3 = 0.6
    """
    agent = lambda obs: {"tool": "guess", "params": {"n": 1}}  # noqa: E731 - always the same guess
    (t,) = collect(
        guess_env,
        agent,
        tasks=[{"metadata": {"target": 5}}],
        max_steps=3,
        progress=False,
        reward_fn=make_reward_fn("generic"),
    )
    assert t.step_rewards == pytest.approx([0.98, 0.6, 0.6])


def test_known_success_on_the_last_step_sets_goal_progress_to_one(guess_env, counting_agent):
    """Guess 1 then 2 (target 2), generic weights.

    step 1: "higher" is new -> 0.98 (as above)
    step 2: done with info["success"] = True -> goal 1.0, the rest 1.0 -> 1.0
            (without the outcome it would be 0.98: "correct" is new, goal 0.9)
    """
    (t,) = collect(
        guess_env,
        counting_agent(),
        tasks=[{"metadata": {"target": 2}}],
        max_steps=5,
        progress=False,
        reward_fn=make_reward_fn("generic"),
    )
    assert t.step_rewards == pytest.approx([0.98, 1.0])


def test_coding_weights_and_the_task_description_ground_parameters():
    """Task "fix a.py", coding weights, one step with no history.

    read a.py, sees "x = 1" (no word of 3+ characters: novelty 0 -> goal 0.5); "a.py" is in the task:
        0.30 * 0.5 + 0.20 + 0.20 + 0.15 * 1 + 0.15 = 0.85
    read b.py instead: "b.py" is in neither task nor history, info 0 -> 0.85 - 0.15 = 0.70
    read a.py and see "def main" (two new words: novelty 1 -> goal 0.9) -> 0.85 + 0.30 * 0.4 = 0.97
    """
    fn = make_reward_fn("coding", task_description="fix a.py")
    assert fn(READ_A, TimeStep("x = 1"), []) == pytest.approx(0.85)
    assert fn({"tool": "read_file", "params": {"path": "b.py"}}, TimeStep("x = 1"), []) == pytest.approx(0.70)
    assert fn(READ_A, TimeStep("def main"), []) == pytest.approx(0.97)


def test_exit_code_and_error_in_info_mark_the_step_failed():
    """Task "fix a.py", coding weights; a failed step: goal 0.2, param 0.3, the rest 1.0:

    0.30 * 0.2 + 0.20 + 0.20 * 0.3 + 0.15 + 0.15 = 0.62
    """
    fn = make_reward_fn("coding", task_description="fix a.py")
    assert fn(READ_A, TimeStep("x = 1", info={"exit_code": 1}), []) == pytest.approx(0.62)
    assert fn(READ_A, TimeStep("x = 1", info={"error": "permission denied"}), []) == pytest.approx(0.62)
    assert fn(READ_A, TimeStep("x = 1", info={"exit_code": 0}), []) == pytest.approx(0.85)


def test_engine_options_reach_the_engine():
    """Only non_redundancy weighted: a first call scores 1.0 whatever else the rules say."""
    fn = make_reward_fn("coding", weights={"non_redundancy": 1.0})
    assert fn(READ_A, TimeStep("x = 1", info={"exit_code": 1}), []) == pytest.approx(1.0)
