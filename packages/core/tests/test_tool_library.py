import json
import math

import pytest

from knowlyrcore.domain import ToolSpec
from knowlyrcore.errors import DataFormatError, InputError
from knowlyrcore.tool_library import ToolLibrary, tokenize


def spec(name, description="", **params):
    props = {k: {"type": "string", "description": v} for k, v in params.items()}
    return ToolSpec(name=name, description=description, parameters={"type": "object", "properties": props})


LIBRARY = [
    spec("get_user_details", "Get the profile of a user", user_id="The user's id"),
    spec("search_direct_flight", "Search direct flights between two cities on a date", origin="IATA code"),
    spec("cancelReservation", "Cancel a flight reservation", reservation_id="The reservation to cancel"),
    spec("list_all_airports", "List every airport with its code"),
]


def test_tokenize_splits_names_every_way():
    assert tokenize("getUserDetails") == tokenize("get_user_details") == ["get", "user", "details"]
    assert tokenize("HTTPServer.start-v2") == ["http", "server", "start", "v", "2"]
    assert tokenize("What is the weather in Paris?") == ["weather", "paris"]


def test_bm25_ranks_by_hand():
    library = ToolLibrary(LIBRARY)
    assert library.search("cancel my reservation", k=1)[0][0].name == "cancelReservation"
    assert library.search("find a direct flight from Boston", k=1)[0][0].name == "search_direct_flight"
    assert [t.name for t, _ in library.search("zebra")] == []  # no shared word, nothing returned
    # "airports" is in one tool, twice (its name counts double): idf = ln(1 + (N - n + 0.5) / (n + 0.5))
    # with N=4, n=1; BM25 = idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl)), k1=1.2, b=0.75.
    # Document lengths (name x2 + description + parameter names and descriptions, stop words out):
    # 6+3+2+3=14, 6+7+1+2=16, 4+3+2+2=11, 6+4=10; avgdl 12.75
    tool, score = library.search("airports", k=1)[0]
    expected = math.log(1 + 3.5 / 1.5) * 2 * 2.2 / (2 + 1.2 * (0.25 + 0.75 * 10 / 12.75))
    assert tool.name == "list_all_airports" and score == pytest.approx(expected)
    assert sum(len(t) for t in (library.search("get", k=10))) == 2


def test_library_refuses_duplicates_and_emptiness():
    with pytest.raises(InputError, match="twice"):
        ToolLibrary([spec("a"), spec("a")])
    with pytest.raises(InputError, match="empty"):
        ToolLibrary([])
    with pytest.raises(InputError, match="k must be"):
        ToolLibrary([spec("a")]).search("a", k=0)


def test_loads_jsonl_openai_arrays_and_mcp_listings(tmp_path):
    openai = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather now",
                "parameters": {"type": "object", "properties": {}},
            },
        }
    ]
    mcp = {"tools": [{"name": "read_file", "description": "Read a file", "inputSchema": {"type": "object"}}]}
    (tmp_path / "openai.json").write_text(json.dumps(openai))
    (tmp_path / "mcp.json").write_text(json.dumps(mcp))
    (tmp_path / "lib.jsonl").write_text("\n".join(json.dumps(t.model_dump()) for t in LIBRARY) + "\n")
    merged = ToolLibrary.merge(*(ToolLibrary.load(tmp_path / f) for f in ("openai.json", "mcp.json", "lib.jsonl")))
    assert len(merged) == 6 and "read_file" in merged and merged.get("get_weather").description == "Weather now"


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("empty.json", "", "empty.json: empty file: no tools"),
        ("object.json", '{"name": 1}', "expected a list of tools"),
        ("noname.json", '[{"description": "x"}]', "noname.json: tools[0].name: Input should be a valid string"),
        ("schema.json", '[{"name": "x", "parameters": {"type": "array"}}]', "tools[0].parameters"),
        ("bad.jsonl", '{"name": "ok"}\n{"name": ', "bad.jsonl:2: invalid JSON"),
        ("utf16.json", "[]".encode("utf-16").decode("latin-1"), "UTF-16"),
        ("list.jsonl", '["x"]\n', "list.jsonl:1: expected a JSON object"),
    ],
)
def test_malformed_libraries_are_one_line_errors(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content.encode("latin-1"))
    with pytest.raises(DataFormatError) as info:
        ToolLibrary.load(path)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_an_empty_jsonl_library_is_an_error(tmp_path):
    (tmp_path / "none.jsonl").write_text("\n")
    with pytest.raises(InputError, match="empty"):
        ToolLibrary.load(tmp_path / "none.jsonl")


def test_tools_are_harvested_from_real_agent_runs():
    from knowlyrcore.testing import real_data
    from knowlyrcore.tool_library import tools_in_data

    tau = {t.name: t for t in tools_in_data(real_data("tau-bench_gpt-4o-airline_tasks0-4.json"))}
    # read off the file: the 11 distinct tools gpt-4o called in tasks 0-4, none with a schema there
    assert sorted(tau) == sorted(
        [
            "book_reservation",
            "calculate",
            "cancel_reservation",
            "get_reservation_details",
            "get_user_details",
            "search_direct_flight",
            "search_onestop_flight",
            "think",
            "transfer_to_human_agents",
            "update_reservation_baggages",
            "update_reservation_flights",
        ]
    )
    assert tau["get_user_details"].description.startswith("Get user details")
    swe_gym = {t.name: t for t in tools_in_data(real_data("interop", "swe-gym_openhands_messages_5rows.json"))}
    assert set(swe_gym) == {"execute_bash", "str_replace_editor", "finish"}
    assert "command" in swe_gym["execute_bash"].parameters["properties"]  # the spec the rows carry
    swe_agent = [t.name for t in tools_in_data(real_data("swe-agent_function_calling_simple.traj"))]
    assert swe_agent == ["find_file", "open", "edit", "bash", "submit"]
