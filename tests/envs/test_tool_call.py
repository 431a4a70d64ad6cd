"""The tool_call built-in: tools described by type hints (schemas, strict argument checks, hostile
arguments), structured ``tool_calls`` and tagged text, tool messages answering each call, the reward (goal,
valid calls, redundant calls), the scripted mix's variance, the CLI paths, and the OpenAI policy sending the
tools and keeping the calls (against a local fake endpoint)."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Annotated, Literal

import pytest
from pydantic import Field, ValidationError

from rewardpipe.envs.tool_call import (
    BUNDLED_TASKS,
    ENVIRONMENT,
    SHOP,
    TOOL_CALL,
    ToolCallEnvironment,
    ToolCallState,
    ToolCallTask,
    Toolset,
    tool,
)
from rewardpipe.envs.tool_call.calls import MAX_CALLS_PER_TURN, MAX_READ_CALLS, parse_turn
from rewardpipe.envs.tool_call.scenarios import structured, tagged
from rewardpipe.envs.tool_call.tools import MAX_ARGUMENT_CHARS, MAX_RESULT_CHARS, ToolDefinitionError
from rewardpipe.episode import EnvServices, converse, start_episode
from rewardpipe.models import Message, load_task_rows
from rewardpipe.policies import OpenAIPolicy, ScriptedPolicy
from rewardpipe.runner import NoSandbox, plan_step, run_slots
from rewardpipe.store import LocalStore
from tests.core.conftest import StubChatServer

WORLD = {
    "accounts": {"checking": 100, "savings": 500, "operating": 1000},
    "inventory": {"widget": {"stock": 2, "price_cents": 250, "cost_cents": 100}},
}


def task(**fields) -> ToolCallTask:
    fields.setdefault("expected_answer", "100")
    fields.setdefault("task_id", "t")
    return ToolCallTask(prompt="What is in checking?", world=WORLD, **fields)


def play(turns, game: ToolCallTask | None = None, env: ToolCallEnvironment = ENVIRONMENT):
    game = game or task()
    state = start_episode(game, env=env, run_id="r", step=0, group_id="g", rollout_id="k0")
    return converse(state, game, ScriptedPolicy(list(turns)), env), game


def results(state: ToolCallState) -> list[dict]:
    return [json.loads(m.content) for m in state.messages if m.role == "tool"]


# --- tools from type hints ------------------------------------------------------------------------------


def test_a_tools_schema_comes_from_its_hints_and_docstring():
    schema = {item["function"]["name"]: item for item in SHOP.schemas()}
    transfer = schema["transfer"]
    assert transfer["type"] == "function"
    assert transfer["function"]["description"] == "Move money from one account to another."
    parameters = transfer["function"]["parameters"]
    assert parameters["required"] == ["source", "target", "amount_cents"]
    assert parameters["additionalProperties"] is False
    assert parameters["properties"]["amount_cents"] == {
        "type": "integer",
        "exclusiveMinimum": 0,
        "maximum": 1_000_000_000,
        "description": "how much, in cents.",
    }
    assert schema["list_items"]["function"]["parameters"]["properties"] == {}
    assert "title" not in json.dumps(schema)


def test_defaults_literals_and_descriptions_reach_the_schema():
    @tool
    def paint(world: dict, colour: Literal["red", "blue"], coats: Annotated[int, Field(ge=1)] = 2):
        """Paint the fence.

        Args:
            colour: which colour; one of
                red or blue.
            coats: how many coats.
        """
        return {"painted": colour}, world

    parameters = paint.schema()["function"]["parameters"]
    assert parameters["required"] == ["colour"]
    assert parameters["properties"]["colour"] == {
        "type": "string",
        "enum": ["red", "blue"],
        "description": "which colour; one of red or blue.",
    }
    assert parameters["properties"]["coats"]["default"] == 2
    assert Toolset([paint]).call("paint", {"colour": "red"}, {}).status == "ok"


@pytest.mark.parametrize(
    "source, says",
    [
        ("def f(world, amount): return 1, world", "needs a type hint"),
        ("def f(world, *amounts: int): return 1, world", "plain named parameter"),
        ("def f(world, **options: int): return 1, world", "plain named parameter"),
        ("def f(): return 1", "first parameter receives the world"),
    ],
)
def test_a_tool_that_cannot_be_described_is_refused_at_definition(source, says):
    namespace: dict = {}
    exec(source, namespace)  # the test's own function definitions
    with pytest.raises(ToolDefinitionError, match=says):
        tool(namespace["f"])


def test_two_tools_of_one_name_are_refused():
    with pytest.raises(ToolDefinitionError, match="two tools are named 'get_stock'"):
        Toolset([*SHOP.tools.values(), SHOP.tools["get_stock"]])


# --- calls: validated strictly, never a crash -----------------------------------------------------------


@pytest.mark.parametrize(
    "name, arguments, says",
    [
        ("withdraw", {}, "unknown tool 'withdraw'"),
        (["transfer"], {}, "unknown tool 'list'"),
        ("get_balance", "{not json", "not JSON"),
        ("get_balance", "[1, 2]", "must be a JSON object"),
        ("get_balance", "x" * (MAX_ARGUMENT_CHARS + 1), "at most"),
        ("get_balance", {"account": 7}, "account"),  # strict: not coerced to text
        ("transfer", {"source": "savings", "target": "checking", "amount_cents": "50"}, "amount_cents"),
        ("transfer", {"source": "savings", "target": "checking", "amount_cents": 0}, "greater than 0"),
        ("transfer", {"source": "savings", "target": "checking", "amount_cents": True}, "amount_cents"),
        ("get_balance", {"account": "checking", "note": "hi"}, "note"),  # an argument too many
        ("transfer", {"source": "savings"}, "target"),  # a missing one
        ("get_balance", "[" * 5000 + "]" * 5000, "not JSON|at most|must be"),  # nesting deeper than a parser goes
    ],
)
def test_an_invalid_call_is_an_answer_naming_the_problem(name, arguments, says):
    outcome = SHOP.call(name, arguments, WORLD)
    assert outcome.status == "invalid" and outcome.arguments is None and outcome.world is WORLD
    assert json.loads(outcome.content)["error"]
    import re

    assert re.search(says, outcome.content), outcome.content


def test_a_tool_that_raises_is_a_tool_error_the_model_reads():
    outcome = SHOP.call("transfer", {"source": "checking", "target": "savings", "amount_cents": 10_000}, WORLD)
    assert outcome.status == "tool_error" and outcome.valid and outcome.world is WORLD
    assert "checking holds 100 cents" in json.loads(outcome.content)["error"]
    unknown = SHOP.call("get_balance", json.dumps({"account": "\x1b[31m" + "x" * 5000}), WORLD)
    assert unknown.status == "tool_error" and len(unknown.content) < 500


def test_a_tool_gets_its_own_copy_of_the_world():
    world = json.loads(json.dumps(WORLD))
    outcome = SHOP.call("transfer", json.dumps({"source": "savings", "target": "checking", "amount_cents": 50}), world)
    assert outcome.status == "ok" and world == WORLD
    assert outcome.world["accounts"] == {"checking": 150, "savings": 450, "operating": 1000}
    assert SHOP.call("get_balance", {"account": "checking"}, world).world is world  # nothing changed


def test_a_tool_returning_the_wrong_shape_is_the_authors_bug():
    @tool
    def broken(world: dict) -> dict:
        """Forgets the world."""
        return {"ok": True}

    @tool
    def unserialisable(world: dict):
        """Returns a set."""
        return {1, 2}, world

    with pytest.raises(ToolDefinitionError, match=r"\(result, new_world\)"):
        Toolset([broken]).call("broken", {}, {})
    with pytest.raises(ToolDefinitionError, match="not JSON"):
        Toolset([unserialisable]).call("unserialisable", {}, {})


def test_a_long_result_is_cut_and_says_so():
    @tool
    def dump(world: dict):
        """Everything."""
        return "y" * 50_000, world

    content = Toolset([dump]).call("dump", {}, {}).content
    assert len(content) < MAX_RESULT_CHARS + 100 and "cut: the result is" in content


# --- reading a turn's calls -----------------------------------------------------------------------------


def test_structured_calls_are_read_with_their_ids_and_arguments():
    message = structured([("get_balance", {"account": "checking"}), ("list_items", {})], 0)
    parsed = parse_turn("", message.tool_calls, 0)
    assert parsed.structured and parsed.answer is None
    assert [(c.id, c.name, json.loads(c.arguments)) for c in parsed.calls] == [
        ("call_0_0", "get_balance", {"account": "checking"}),
        ("call_0_1", "list_items", {}),
    ]


def test_structured_calls_win_over_tags_in_the_same_turn():
    message = structured([("list_items", {})], 0)
    parsed = parse_turn(tagged([("get_balance", {"account": "x"})]), message.tool_calls, 0)
    assert [c.name for c in parsed.calls] == ["list_items"]


def test_tagged_calls_get_ids_and_arguments_may_be_text():
    text = (
        'Let me look. <tool_call>{"name": "get_balance", "arguments": {"account": "savings"}}</tool_call>'
        '<TOOL_CALL>{"name": "get_stock", "arguments": "{\\"item\\": \\"widget\\"}"}</TOOL_CALL>'
    )
    parsed = parse_turn(text, None, 3)
    assert not parsed.structured
    assert [(c.id, c.name, c.arguments) for c in parsed.calls] == [
        ("call_3_0", "get_balance", {"account": "savings"}),
        ("call_3_1", "get_stock", '{"item": "widget"}'),
    ]


@pytest.mark.parametrize(
    "text, says",
    [
        ("<tool_call>{not json}</tool_call>", "not JSON"),
        ('<tool_call>["get_balance"]</tool_call>', "holds {"),
        ('<tool_call>{"name": "x", "arguments": {}, "id": 3}</tool_call>', "only name and arguments"),
        ('<tool_call>{"name": "get_balance", "arguments": {}}', "never closed"),
        ("<tool_call>" + " " * 20_000 + "</tool_call>", "characters"),
    ],
)
def test_a_tagged_call_that_cannot_be_read_is_an_invalid_call_not_an_answer(text, says):
    parsed = parse_turn(text, None, 0)
    assert parsed.answer is None and len(parsed.calls) == 1 and says in parsed.calls[0].problem


@pytest.mark.parametrize(
    "text, answer",
    [
        ("The balance is <answer>100</answer>.", "100"),
        ("<answer>90</answer> no, <answer> 100 </answer>", "100"),
        ("100", "100"),
        ("</tool_call> just text", "</tool_call> just text"),  # a stray closing tag is not a call
    ],
)
def test_a_turn_without_calls_is_the_final_answer(text, answer):
    assert parse_turn(text, None, 0).answer == answer


def test_calls_past_the_bounds_are_refused_or_counted():
    many = tagged([("list_items", {})] * (MAX_READ_CALLS + 5))
    parsed = parse_turn(many, None, 0)
    assert len(parsed.calls) == MAX_READ_CALLS and parsed.unread == 5
    state, _ = play([many, "<answer>100</answer>"])
    statuses = [call.status for call in state.calls]
    assert statuses.count("ok") == MAX_CALLS_PER_TURN
    assert statuses.count("refused") == MAX_READ_CALLS - MAX_CALLS_PER_TURN and state.unread_calls == 5
    assert len(results(state)) == MAX_READ_CALLS
    flood = tagged([("list_items", {})] * 10_000)
    assert parse_turn(flood, None, 0).unread == 10_000 - MAX_READ_CALLS


def test_structured_calls_with_hostile_ids_get_ids_of_their_own():
    message = Message(
        role="assistant",
        content="",
        tool_calls=[
            {"id": "x\n" * 200, "function": {"name": "list_items", "arguments": "{}"}},
            {"id": 5, "function": {"name": "list_items", "arguments": {}}},
            {"id": "y"},
            {"id": "ok", "function": "list_items"},
        ],
    )
    parsed = parse_turn("", message.tool_calls, 2)
    assert [c.id for c in parsed.calls] == ["call_2_0", "call_2_1", "y", "ok"]
    assert parsed.calls[1].problem is None and parsed.calls[2].problem and parsed.calls[3].problem


# --- the episode ----------------------------------------------------------------------------------------


def test_structured_calls_are_answered_by_tool_messages_with_their_ids():
    state, _ = play(
        [
            structured([("get_balance", {"account": "checking"}), ("get_stock", {"item": "widget"})], 0),
            "<answer>100</answer>",
        ]
    )
    tool_messages = [m for m in state.messages if m.role == "tool"]
    assert [(m.tool_call_id, m.name) for m in tool_messages] == [("call_0_0", "get_balance"), ("call_0_1", "get_stock")]
    assert json.loads(tool_messages[0].content) == {"result": {"account": "checking", "balance_cents": 100}}
    assert state.end_reason == "answered" and state.answer == "100" and state.turn_kinds == ["calls", "answer"]


def test_tagged_calls_are_answered_the_same_way():
    state, _ = play([tagged([("get_balance", {"account": "checking"})]), "<answer>100</answer>"])
    (message,) = [m for m in state.messages if m.role == "tool"]
    assert message.tool_call_id == "call_0_0" and json.loads(message.content)["result"]["balance_cents"] == 100


def test_a_call_changes_the_world_for_the_next_one():
    game = task(
        expected_answer=None, expected_world={**WORLD, "accounts": {"checking": 150, "savings": 450, "operating": 1000}}
    )
    state, _ = play(
        [
            tagged([("transfer", {"source": "savings", "target": "checking", "amount_cents": 50})]),
            structured([("get_balance", {"account": "checking"})], 1),
            "Done.",
        ],
        game,
    )
    assert results(state)[1]["result"]["balance_cents"] == 150 and state.world_version == 1
    assert game.world == WORLD  # the task's world is left as it was


def test_redundant_calls_are_the_repeats_that_change_nothing():
    read = ("get_balance", {"account": "checking"})
    move = ("transfer", {"source": "savings", "target": "checking", "amount_cents": 10})
    price = ("set_price", {"item": "widget", "price_cents": 300})
    state, _ = play(
        [
            structured([read], 0),
            structured([read], 1),  # a second read: redundant
            structured([move], 2),
            structured([move], 3),  # a second transfer does something
            structured([read], 4),  # the world changed since: not redundant
            structured([price], 5),
            structured([price], 6),  # the same price again changes nothing
            "<answer>x</answer>",
        ],
        task(expected_answer="x"),
    )
    assert [call.redundant for call in state.calls] == [False, True, False, False, False, False, True]
    assert state.end_reason == "answered"


def test_a_refused_call_asked_again_unchanged_is_redundant():
    refused = ("get_balance", {"account": "nope"})
    state, _ = play([structured([refused], 0), structured([refused], 1), "<answer>100</answer>"])
    assert [(c.status, c.redundant) for c in state.calls] == [("tool_error", False), ("tool_error", True)]


def test_invalid_calls_do_not_count_as_redundant_repeats():
    bad = ("get_balance", {"account": 1})
    state, _ = play([structured([bad], 0), structured([bad], 1), "<answer>100</answer>"])
    assert [(c.status, c.redundant) for c in state.calls] == [("invalid", False), ("invalid", False)]


def test_the_state_survives_json():
    state, _ = play(
        [structured([("get_balance", {"account": "checking"})], 0), tagged([("nope", {})]), "<answer>100</answer>"]
    )
    again = ToolCallState.model_validate_json(state.model_dump_json())
    assert again.model_dump() == state.model_dump()


# --- the reward -----------------------------------------------------------------------------------------


def components(state, game) -> dict:
    return TOOL_CALL.score(state.messages, task=game, state=state).components


def test_goal_reached_by_answer_world_or_both():
    reads = structured([("get_balance", {"account": "checking"})], 0)
    assert components(*play([reads, "<answer> 100. </answer>"]))["goal_reached"] == 1.0
    assert components(*play([reads, "<answer>about 100</answer>"]))["goal_reached"] == 0.0
    assert components(*play([reads] + [reads] * 10))["goal_reached"] == 0.0  # never answered
    moved = {**WORLD, "accounts": {"checking": 150, "savings": 450, "operating": 1000}}
    move = structured([("transfer", {"source": "savings", "target": "checking", "amount_cents": 50})], 0)
    world_task = task(expected_answer=None, expected_world=moved)
    assert components(*play([move, "ok"], world_task))["goal_reached"] == 1.0
    assert components(*play([move] + [reads] * 9, world_task))["goal_reached"] == 1.0  # answered or not
    assert components(*play([move] * 2 + ["ok"], world_task))["goal_reached"] == 0.0
    both = task(expected_answer="150", expected_world=moved)
    assert components(*play([move, "<answer>150</answer>"], both))["goal_reached"] == 1.0
    assert components(*play([move, "<answer>100</answer>"], both))["goal_reached"] == 0.0
    assert components(*play(["<answer>150</answer>"], both))["goal_reached"] == 0.0


def test_valid_calls_counts_the_calls_that_did_not_parse_or_type_check():
    values = components(
        *play(
            [
                tagged([("get_balance", {"account": "checking"}), ("get_balance", {"account": 1}), ("nope", {})]),
                tagged([("get_balance", {"account": "ghost"})]),
                "<answer>100</answer>",
            ]
        )
    )
    assert values["valid_calls"] == pytest.approx(1 / 3)  # two invalid; a tool's refusal is a valid call
    assert components(*play(["<answer>100</answer>"]))["valid_calls"] == 0.0
    assert (
        components(*play([tagged([("get_balance", {"account": "checking"})]), "<answer>100</answer>"]))["valid_calls"]
        == 1.0
    )


def test_padding_with_valid_calls_does_not_buy_back_a_malformed_one():
    """As a share of all calls, one malformed call then ten lookups the tool refuses (each for another account,
    so none is a redundant repeat) scored 10/11 where the malformed call and the right one scored 1/2."""
    malformed = tagged([("get_balance", {"account": 1})])
    right = tagged([("get_balance", {"account": "checking"})])
    honest = components(*play([malformed, right, "<answer>100</answer>"]))
    padded = components(
        *play(
            [
                malformed,
                tagged([("get_balance", {"account": f"ghost{i}"}) for i in range(10)]),
                right,
                "<answer>100</answer>",
            ]
        )
    )
    assert honest["goal_reached"] == padded["goal_reached"] == 1.0
    assert padded["redundant_calls"] == honest["redundant_calls"] == 0.0
    assert padded["valid_calls"] <= honest["valid_calls"] == 0.5


def test_a_malformed_call_alone_is_not_paid_more_than_no_call():
    """Round eighteen: with 1/(1 + invalid calls), an episode whose only call was malformed (or an unclosed
    <tool_call>) scored 0.5 where an episode with no call at all scored 0: a junk call before a guessed answer
    bought shaping reward. Without a valid call, valid_calls is 0 as with none."""
    malformed = tagged([("get_balance", {"account": 1})])
    assert components(*play(["<answer>100</answer>"]))["valid_calls"] == 0.0
    assert components(*play([malformed, "<answer>100</answer>"]))["valid_calls"] == 0.0
    assert components(*play(["<tool_call>{", "<answer>100</answer>"]))["valid_calls"] == 0.0
    right = tagged([("get_balance", {"account": "checking"})])
    assert components(*play([malformed, right, "<answer>100</answer>"]))["valid_calls"] == 0.5


def test_redundant_calls_penalty_scales_and_floors():
    read = structured([("get_balance", {"account": "checking"})], 0)
    assert components(*play([read, "<answer>100</answer>"]))["redundant_calls"] == 0.0
    assert components(*play([read, read, "<answer>100</answer>"]))["redundant_calls"] == -0.25
    assert components(*play([read] * 7 + ["<answer>100</answer>"]))["redundant_calls"] == -1.0


def test_scored_without_a_tool_call_state_is_an_error_not_a_zero():
    state, game = play(["<answer>100</answer>"])
    score = TOOL_CALL.score(state.messages, task=game)
    assert score.aggregate is None and score.error.kind == "component_unavailable"


# --- tasks ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "row, says",
    [
        ({"task_id": "t", "prompt": "p", "world": {}}, "needs a goal"),
        ({"task_id": "t", "prompt": "p", "world": [], "expected_answer": "1"}, "world"),
        ({"task_id": "t", "prompt": "p", "world": {}, "expected_answer": "1", "tools": ["x"]}, "tools"),
        (
            {"task_id": "t", "prompt": "p", "world": {}, "expected_answer": "1", "reference_calls": [{"nam": "x"}]},
            "reference_calls",
        ),
        ({"task_id": "t", "prompt": "p", "world": {}, "expected_answer": ""}, "expected_answer"),
    ],
)
def test_a_bad_task_row_is_refused_naming_the_field(row, says):
    with pytest.raises(ValidationError, match=says):
        ToolCallTask.model_validate(row)


def test_the_bundled_tasks_reach_their_goals_by_their_reference_calls():
    tasks = load_task_rows(BUNDLED_TASKS, ToolCallTask)
    assert len(tasks) >= 10 and any(t.expected_world for t in tasks) and any(t.expected_answer for t in tasks)
    for game in tasks:
        state = start_episode(game, env=ENVIRONMENT, run_id="r", step=0, group_id="g", rollout_id="k")
        state = converse(state, game, ENVIRONMENT.scenarios(game)["reference"], ENVIRONMENT)
        assert components(state, game) == {"goal_reached": 1.0, "valid_calls": 1.0, "redundant_calls": 0.0}


def test_doctor_finds_a_task_whose_reference_does_not_reach_its_goal():
    from rewardpipe.doctor import diagnose

    broken = task(
        task_id="wrong",
        expected_answer=None,
        expected_world={**WORLD, "accounts": {}},
        reference_calls=[{"name": "get_balance", "arguments": {"account": "checking"}}],
    )
    invalid = task(task_id="invalid", reference_calls=[{"name": "get_balance", "arguments": {"acct": "checking"}}])
    good = task(task_id="good", reference_calls=[{"name": "get_balance", "arguments": {"account": "checking"}}])
    diagnoses = {d.task_id: d for d in diagnose([broken, invalid, good], ENVIRONMENT, NoSandbox())}
    assert any("reference scenario leaves outcome 'goal_reached'" in p for p in diagnoses["wrong"].problems)
    assert any("reference call 1 (get_balance) is invalid" in p for p in diagnoses["invalid"].problems)
    assert diagnoses["good"].ok and not diagnoses["good"].warnings, diagnoses["good"].problems


# --- the scripted mix -----------------------------------------------------------------------------------


def test_the_scripted_mix_gives_every_component_within_group_variance():
    tasks = load_task_rows(BUNDLED_TASKS, ToolCallTask)
    policy = ENVIRONMENT.scripted_policy(seed=0)
    records = []
    for step in range(3):
        records += run_slots(
            plan_step(tasks, step, 12, 8),
            policy=policy,
            env=ENVIRONMENT,
            executor=NoSandbox(),
            run_id="mix",
            services=EnvServices(),
        )
    assert all(r.status == "scored" for r in records)
    groups = defaultdict(list)
    for record in records:
        groups[record.group_id].append(record.components)
    for name in TOOL_CALL.component_names:
        moving = sum(1 for values in groups.values() if len({v[name] for v in values}) > 1)
        assert moving >= len(groups) // 3, (name, moving, len(groups))


# --- the command line and the OpenAI policy -------------------------------------------------------------


@pytest.fixture
def cli():
    from typer.testing import CliRunner

    from rewardpipe.cli import app

    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args])


def _by_rollout(store, run_id: str) -> dict:
    return {r.rollout_id: (r.status, r.components) for r in LocalStore(store).iter_records(run_id)}


@pytest.mark.slow
def test_run_doctor_score_and_replay_over_the_bundled_tasks(cli, tmp_path):
    store = tmp_path / "store"
    result = cli(
        "run",
        "--env",
        "tool_call",
        "--tasks",
        BUNDLED_TASKS,
        "--steps",
        "2",
        "--group-size",
        "4",
        "--out",
        store,
        "--run-id",
        "t",
        "--json",
    )
    assert result.exit_code == 0, result.output
    live = _by_rollout(store, "t")
    assert len(live) == 2 * 12 * 4 and all(status == "scored" for status, _ in live.values())
    doctor = cli("doctor", "--env", "tool_call", "--tasks", BUNDLED_TASKS, "--json")
    assert doctor.exit_code == 0, doctor.output
    report = json.loads(doctor.stdout)
    assert report["broken"] == [] and not any(d["warnings"] for d in report["diagnoses"])
    lines = []
    for path in sorted((store / "runs" / "t" / "transcripts").rglob("*.json")):
        doc = json.loads(path.read_text())
        lines.append(json.dumps({k: doc[k] for k in ("rollout_id", "group_id", "task_id", "step", "messages")}))
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text("\n".join(lines) + "\n")
    assert '"tool_calls"' in rollouts.read_text() and '"tool_call_id"' in rollouts.read_text()
    scored = cli("score", rollouts, "--env", "tool_call", "--tasks", BUNDLED_TASKS, "--out", store, "--run-id", "s")
    assert scored.exit_code == 0, scored.output
    assert _by_rollout(store, "s") == live
    replayed = cli(
        "run",
        "--env",
        "tool_call",
        "--tasks",
        BUNDLED_TASKS,
        "--policy",
        "replay",
        "--rollouts",
        rollouts,
        "--out",
        store,
        "--run-id",
        "p",
    )
    assert replayed.exit_code == 0, replayed.output
    assert _by_rollout(store, "p") == live
    assert cli("monitor", store, "--run-id", "t").exit_code == 0
    assert cli("report", store, "--run-id", "t", "--out", tmp_path / "r.html").exit_code == 0


def _tool_reply(calls: list[tuple[str, dict]], content=None) -> dict:
    return {
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": content,
                    "tool_calls": [
                        {"id": f"srv-{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                        for i, (n, a) in enumerate(calls)
                    ],
                }
            }
        ]
    }


@pytest.fixture
def chat_server():
    server = StubChatServer()
    yield server
    server.close()


def test_the_openai_policy_sends_the_tools_and_keeps_the_calls(chat_server):
    chat_server.replies.append((200, _tool_reply([("get_balance", {"account": "checking"})])))
    chat_server.reply("It holds <answer>100</answer>.")
    policy = OpenAIPolicy(chat_server.url, "m", tools=ENVIRONMENT.tool_schemas, system_prompt="sys")
    game = task()
    state = start_episode(game, env=ENVIRONMENT, run_id="r", step=0, group_id="g", rollout_id="k0")
    state = converse(state, game, policy, ENVIRONMENT)
    assert state.end_reason == "answered" and TOOL_CALL.score(state.messages, task=game, state=state).aggregate
    first, second = (request["body"] for request in chat_server.requests)
    assert [t["function"]["name"] for t in first["tools"]] == list(SHOP.tools)
    assert first["messages"][0] == {"role": "system", "content": "sys"}
    assert second["messages"][2] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "srv-0",
                "type": "function",
                "function": {"name": "get_balance", "arguments": '{"account": "checking"}'},
            }
        ],
    }
    assert second["messages"][3]["role"] == "tool" and second["messages"][3]["tool_call_id"] == "srv-0"
    assert second["messages"][3]["name"] == "get_balance"


def test_the_openai_policy_without_tools_sends_none(chat_server):
    chat_server.reply("<guess>crane</guess>")
    assert (
        OpenAIPolicy(chat_server.url, "m").next_turn(
            start_episode(task(), env=ENVIRONMENT, run_id="r", step=0, group_id="g", rollout_id="k"), task()
        )
        == "<guess>crane</guess>"
    )
    assert "tools" not in chat_server.requests[0]["body"]


def test_a_reply_with_calls_and_text_keeps_both_and_a_flood_of_calls_is_bounded(chat_server):
    from rewardpipe.openai_client import MAX_TOOL_CALLS, ChatClient

    chat_server.replies.append((200, _tool_reply([("list_items", {})] * 200, content="Checking.")))
    reply = ChatClient(chat_server.url, "m").complete_message([], tools=[])
    assert reply["content"] == "Checking." and len(reply["tool_calls"]) == MAX_TOOL_CALLS
    chat_server.replies.append((200, {"choices": [{"message": {"content": None, "tool_calls": "x"}}]}))
    from rewardpipe.openai_client import EndpointError

    with pytest.raises(EndpointError, match="not a list"):
        ChatClient(chat_server.url, "m", max_retries=0).complete_message([])


def test_run_with_the_openai_policy_against_a_fake_endpoint(cli, chat_server, tmp_path):
    rows = tmp_path / "tasks.jsonl"
    rows.write_text(json.dumps(task(task_id="bal").model_dump(exclude_none=True)) + "\n")
    for _ in range(2):  # two rollouts: a call, then the answer
        chat_server.replies.append((200, _tool_reply([("get_balance", {"account": "checking"})])))
        chat_server.reply("<answer>100</answer>")
    result = cli(
        "run",
        "--env",
        "tool_call",
        "--tasks",
        rows,
        "--policy",
        "openai",
        "--base-url",
        chat_server.url,
        "--model",
        "m",
        "--steps",
        "1",
        "--groups-per-step",
        "1",
        "--group-size",
        "2",
        "--out",
        tmp_path,
        "--run-id",
        "o",
        "--json",
        "--endpoint-retries",
        "0",
    )
    assert result.exit_code == 0, result.output
    records = list(LocalStore(tmp_path).iter_records("o"))
    assert [r.components["goal_reached"] for r in records] == [1.0, 1.0]
    assert all("tools" in request["body"] for request in chat_server.requests)
