import json

import pytest
from pydantic import ValidationError

from knowlyrcore import (
    DomainError,
    DomainProfile,
    InvalidActionError,
    ToolCategory,
    ToolSpec,
    get_domain_profile,
    list_domain_profiles,
    load_domain_profile,
    register_domain_profile,
)
from knowlyrcore import domain as domain_module

SEED_TOOLS = {
    "coding": ["read_file", "edit_file", "bash", "grep", "submit"],
    "browser": ["navigate", "click", "type_text", "scroll", "screenshot"],
    "conversation": ["respond", "query_stats", "send_message", "web_search"],
    "engineering": ["read_file", "grep", "git", "knowledge_base", "bash"],
    "advisory": ["respond", "knowledge_base", "web_search", "create_note"],
    "discussion": ["respond", "knowledge_base", "think"],
    "generic": [],
}


@pytest.fixture(autouse=True)
def _clean_custom_profiles():
    saved = dict(domain_module._CUSTOM_PROFILES)
    yield
    domain_module._CUSTOM_PROFILES.clear()
    domain_module._CUSTOM_PROFILES.update(saved)


def test_seven_builtin_domains(monkeypatch):
    # other packages register their domains on import (knowlyr-sandbox: retail); set them aside
    monkeypatch.setattr(domain_module, "_CUSTOM_PROFILES", {})
    assert list_domain_profiles() == sorted(SEED_TOOLS)


@pytest.mark.parametrize(("name", "tools"), SEED_TOOLS.items())
def test_builtin_domains_have_the_seed_tools(name, tools):
    profile = get_domain_profile(name)
    assert set(tools) <= set(profile.tool_names)
    assert set(profile.terminal_tools) <= set(profile.tool_names)
    assert all(w >= 0 for w in profile.rubric_weights.values())


def test_terminal_tools_follow_the_seed():
    assert get_domain_profile("coding").terminal_tools == ["submit", "finish"]
    assert get_domain_profile("conversation").terminal_tools == ["respond"]
    assert get_domain_profile("discussion").terminal_tools == ["respond", "submit"]


def test_generic_is_empty():
    assert get_domain_profile("generic").tools == []


def test_tool_validates_params_against_schema():
    bash = get_domain_profile("coding").get_tool("bash")
    bash.validate_params({"command": "ls"})
    with pytest.raises(InvalidActionError, match="'command' is a required property"):
        bash.validate_params({})
    with pytest.raises(InvalidActionError, match="at 'command'"):
        bash.validate_params({"command": 3})
    with pytest.raises(InvalidActionError, match="Additional properties"):
        bash.validate_params({"command": "ls", "sudo": True})


def test_validate_action_checks_tool_and_params():
    coding = get_domain_profile("coding")
    coding.validate_action({"tool": "read_file", "params": {"path": "a.py", "start_line": 1}})
    with pytest.raises(InvalidActionError, match="unknown tool 'fly'"):
        coding.validate_action({"tool": "fly", "params": {}})
    with pytest.raises(InvalidActionError, match="start_line"):
        coding.validate_action({"tool": "read_file", "params": {"path": "a", "start_line": 0}})


def test_invalid_schema_is_rejected():
    with pytest.raises(ValueError, match="not a valid JSON Schema"):
        ToolSpec(name="x", parameters={"type": "object", "properties": {"a": {"type": "no-such-type"}}})
    with pytest.raises(ValueError, match="type 'object'"):
        ToolSpec(name="x", parameters={"type": "string"})


def test_openai_tool_form():
    tool = get_domain_profile("coding").get_tool("grep").to_openai_tool()
    assert tool["type"] == "function" and tool["function"]["name"] == "grep"
    assert tool["function"]["parameters"]["required"] == ["pattern"]


def test_normalized_weights_sum_to_one():
    for name in list_domain_profiles():
        assert sum(get_domain_profile(name).normalized_weights().values()) == pytest.approx(1.0)
    zero = DomainProfile(name="z", rubric_weights={"a": 0, "b": 0})
    assert zero.normalized_weights() == {"a": 0.5, "b": 0.5}


def test_duplicate_tools_and_negative_weights_are_rejected():
    with pytest.raises(ValueError, match="declared twice"):
        DomainProfile(name="d", tools=[ToolSpec(name="a"), ToolSpec(name="a")])
    with pytest.raises(ValueError, match="negative"):
        DomainProfile(name="d", rubric_weights={"goal_progress": -1})


def test_load_yaml_profile_and_register(tmp_path):
    path = tmp_path / "support.yaml"
    path.write_text(
        "name: support\n"
        "tools:\n"
        "  - name: lookup_order\n"
        "    category: read\n"
        "    parameters: {type: object, properties: {order_id: {type: string}}, required: [order_id]}\n"
        "  - name: reply\n"
        "    category: communicate\n"
        "terminal_tools: [reply]\n"
        "outcome: {method: judge}\n"
    )
    profile = load_domain_profile(path, register=True)
    assert profile.get_tool("lookup_order").category is ToolCategory.READ
    assert get_domain_profile("support") is profile
    assert "support" in list_domain_profiles()


def test_load_json_profile(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"name": "p", "tools": [{"name": "t"}]}))
    assert load_domain_profile(path).tool_names == ["t"]


@pytest.mark.parametrize(
    ("content", "suffix", "message"),
    [
        ("name: [unclosed", ".yaml", "not valid yaml"),
        ("{}", ".json", "name: Field required"),
        ("[1, 2]", ".json", "is a mapping"),
        ('{"name": "x", "outcome": {"method": "vibes"}}', ".json", "outcome.method"),
    ],
)
def test_bad_profile_files_name_file_and_field(tmp_path, content, suffix, message):
    path = tmp_path / f"bad{suffix}"
    path.write_text(content)
    with pytest.raises(DomainError, match=message) as info:
        load_domain_profile(path)
    assert str(path) in str(info.value)


def test_unknown_domain_lists_known_ones():
    # Other packages' tests may have registered more profiles (e.g. bfcl) in this session: the
    # message lists every known name, so check the built-in ones are there, in sorted order.
    with pytest.raises(DomainError, match=r"known: (.*, )?advisory, (.*, )?browser, (.*, )?coding") as info:
        get_domain_profile("astrology")
    assert "astrology" in str(info.value)


def test_builtin_names_are_protected():
    with pytest.raises(DomainError, match="already exists"):
        register_domain_profile(DomainProfile(name="coding"))
    register_domain_profile(DomainProfile(name="coding", description="mine"), replace=True)
    assert get_domain_profile("coding").description == "mine"


def _nested(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "value, expected",
    [
        (10**5000, "integer string conversion"),  # repr of it raises ValueError inside jsonschema
        (_nested(50_000), "nested deeper than 64 levels"),  # jsonschema recursion
        (["x" * 10_000_000], "characters)"),  # the message is cut, not 10 MB long
        ({"\ud800": 1}, "is not of type 'string'"),
    ],
    ids=["huge-int", "deep", "huge-string", "surrogate-key"],
)
def test_hostile_tool_arguments_give_a_bounded_invalid_action_error(value, expected):
    tool = ToolSpec(name="t", description="d", parameters={"type": "object", "properties": {"a": {"type": "string"}}})
    with pytest.raises(InvalidActionError) as info:
        tool.validate_params({"a": value})
    message = str(info.value)
    assert expected in message
    assert len(message) < 500
    message.encode("utf-8")  # no lone surrogate left to break a JSONL writer


def test_a_schema_checked_before_is_judged_the_same_again():
    """The metaschema check is remembered per schema: a bad one stays refused, a good one accepted."""
    bad = {"type": "object", "properties": {"x": {"type": "no-such-type"}}}
    for _ in range(2):
        with pytest.raises(ValidationError, match="not a valid JSON Schema"):
            ToolSpec(name="t", parameters=bad)
        assert ToolSpec(name="t", parameters={"type": "object", "properties": {"x": {"type": "string"}}})


def test_a_schema_that_is_not_json_is_still_checked():
    with pytest.raises(ValidationError, match="not a valid JSON Schema"):
        ToolSpec(name="t", parameters={"type": "object", "properties": {"x": {"type": {1, 2}}}})
