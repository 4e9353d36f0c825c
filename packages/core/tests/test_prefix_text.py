"""``knowlyrcore.prefix_text``: the text a learned scorer reads, and reading it back."""

from knowlyrcore.prefix_text import MAX_CHARS, PrefixStep, parse_prefix, step_prefixes


def run(n, output="ok", **observation):
    return {
        "task": {"description": "Cancel order 12.", "metadata": {"solution": "SECRET"}},
        "steps": [
            {
                "thought": "look first",
                "tool_call": {"name": f"tool{i}", "parameters": {"id": i}},
                "observation": {"output": f"{output} {i}", **observation},
            }
            for i in range(n)
        ],
        "outcome": {"success": True},
    }


def test_each_prefix_reads_back_as_its_request_and_steps():
    texts = step_prefixes(run(3))
    assert len(texts) == 3 and all("SECRET" not in t and "success" not in t for t in texts)
    request, steps = parse_prefix(texts[-1])
    assert request == "Cancel order 12."
    assert steps == [PrefixStep(i + 1, f"tool{i}", f'{{"id": {i}}}', f"ok {i}", False) for i in range(3)]


def test_errors_read_back_from_the_error_field_the_exit_code_or_the_text():
    assert [s.error for s in parse_prefix(step_prefixes(run(1, error="boom"))[0])[1]] == [True]
    assert [s.error for s in parse_prefix(step_prefixes(run(1, exit_code=2))[0])[1]] == [True]
    assert "[exit 2]" in step_prefixes(run(1, exit_code=2))[0]
    assert [s.error for s in parse_prefix(step_prefixes(run(1, exit_code=0))[0])[1]] == [False]
    for output in ("[error] no order", "Traceback (most recent call last): x", "Error: bad"):
        assert parse_prefix(step_prefixes(run(1, output=output))[0])[1][0].error, output


def test_a_long_run_keeps_its_newest_steps_and_they_read_back():
    texts = step_prefixes(run(60, output="x" * 300))
    assert all(len(t) <= MAX_CHARS for t in texts)
    _, steps = parse_prefix(texts[-1])
    assert steps and steps[-1].number == 60 and steps[0].number > 1
    assert [s.number for s in steps] == list(range(steps[0].number, 61))
