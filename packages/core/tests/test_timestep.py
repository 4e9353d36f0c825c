from knowlyrcore import TimeStep


def test_defaults_are_an_unfinished_step():
    ts = TimeStep()
    assert ts.observation == "" and ts.reward == 0.0 and ts.info == {}
    assert not ts.done


def test_done_is_either_flag():
    assert TimeStep(terminated=True).done
    assert TimeStep(truncated=True).done
    assert not TimeStep(terminated=False, truncated=False).done


def test_info_dicts_are_not_shared():
    a, b = TimeStep(), TimeStep()
    a.info["x"] = 1
    assert b.info == {}
