"""Round twenty-one on the reward side: gsm8k answers and references read whole or not at all (fractions,
exponents, powers, typographic minus signs, commas that group no thousands); tool-call arguments bounded and
JSON in whatever form they come; a tool-call task stating no goal is an error, not a goal reached."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from rewardpipe.models import Message
from rewardpipe.rewards import get_reward
from rewardpipe.rewards.gsm8k import extracted_answer

GSM8K = get_reward("gsm8k")


def _gsm8k(response: str, reference: object) -> dict[str, float | None]:
    messages = [Message(role="user", content="What is it?"), Message(role="assistant", content=response)]
    return GSM8K.score(messages, reference=reference).components


# -- gsm8k: a number that is only the start of a longer one is not that number ---------------------------


@pytest.mark.parametrize(
    "response, reference",
    [
        ("#### 1/2", 1),  # a fraction was read as its numerator
        ("So it is\n#### 42e5", 42),  # an exponent was dropped
        ("#### 42^2", 42),  # a power was dropped
        ("#### 42**2", 42),
        ("#### 42×10^3", 42),
        ("#### 42.5.1", 42.5),  # a second decimal point
        ("#### 2½", 2),  # a vulgar fraction
        ("#### 4²", 4),  # a superscript power
        ("The answer is 42/5", 5),  # the last number was the denominator
        ("\\boxed{42/5}", 5),
        ("#### 7\n#### 1/2", 1),  # the last marked answer is the one read, whole
        ("#### \u221242", 42),  # a typographic minus sign is a minus sign: -42 is not 42
        ("#### 2,5", 25),  # a decimal comma is no thousands separator
        ("#### 41,42", 4142),  # nor is a comma between two answers
        ("#### 1,000,00", 100000),
        ("#### \uff0d42", 42),
    ],
)
def test_a_wrong_answer_read_as_part_of_its_number_is_not_scored_correct(response, reference):
    assert _gsm8k(response, reference)["answer_correct"] == 0.0


@pytest.mark.parametrize(
    "response, expected",
    [
        ("#### \u221242", Decimal(-42)),
        ("**Answer**\n#### **-8**", Decimal(-8)),  # Markdown bold is not a power
        ("The answer is **42**.", Decimal(42)),
        ("It is 42. 5 more", Decimal(5)),  # a sentence's full stop is no decimal point
        ("#### 42 eggs", Decimal(42)),
        ("#### $1,234.50", Decimal("1234.50")),
        ("6 x 7 = 42", Decimal(42)),
        ("#### 1,234,567", Decimal(1234567)),
        ("#### 1,00,000", Decimal(100000)),  # Indian grouping
        ("It is 42, and that is all", Decimal(42)),  # a comma that ends a clause
    ],
)
def test_plain_answers_are_still_read(response, expected):
    assert extracted_answer(response) == expected


@pytest.mark.parametrize(
    "reference, response",
    [("#### 1/2", "#### 1"), ("Half of it.\n#### 1/2", "#### 1"), ("#### 42e5", "#### 42"), ("#### 4²", "#### 4")],
)
def test_a_reference_that_is_part_of_a_longer_number_is_an_error_not_its_first_digits(reference, response):
    assert _gsm8k(response, reference)["answer_correct"] is None  # was 1.0: the reference read as 1, 42 or 4


def test_a_reference_in_typographic_minus_is_read():
    assert _gsm8k("#### -42", "#### \u221242")["answer_correct"] == 1.0
    assert _gsm8k("#### -42", "\u221242")["answer_correct"] == 1.0


def test_a_negative_answer_in_typographic_minus_scores_against_a_negative_reference():
    components = _gsm8k("#### \u22127", -7)
    assert components["answer_correct"] == 1.0
    assert components["format"] == 1.0  # marked as "#### -7" is (it was 0: no number after the "####")


# -- tool_call: arguments given as an object are bounded as their text is ---------------------------------


def _tool_call_episode(tool_calls: list[dict]):
    from rewardpipe.envs.tool_call import BUNDLED_TASKS, ENVIRONMENT, ToolCallTask

    task = ToolCallTask.model_validate(json.loads(BUNDLED_TASKS.read_text().splitlines()[0]))
    state = ENVIRONMENT.start(task)
    state = state.append(Message(role="assistant", content="", tool_calls=tool_calls))
    state = ENVIRONMENT.on_policy_turn(state, task, "")
    return ENVIRONMENT.respond(state, task)


@pytest.mark.parametrize("as_text", [True, False])
def test_a_huge_argument_is_an_invalid_call_whether_text_or_object(as_text):
    arguments = {"account": "x" * 200_000}
    call = {"id": "c1", "type": "function", "function": {"name": "get_balance", "arguments": arguments}}
    if as_text:
        call["function"]["arguments"] = json.dumps(arguments)
    state = _tool_call_episode([call])
    log = state.calls[-1]
    assert log.status == "invalid"  # was "tool_error" (a valid call) for the object, its key 200,000 characters
    assert log.key is None
    assert "at most 8192" in state.messages[-1].content
    assert len(state.messages[-1].content) < 300


def test_an_object_argument_that_is_not_json_is_an_invalid_call_not_a_crash():
    """A guard for the measuring itself (the encoder's RecursionError, a set): invalid before and after."""
    from rewardpipe.envs.tool_call import SHOP

    nested: dict = {}
    for _ in range(100_000):  # nested past the recursion limit of the JSON encoder
        nested = {"a": nested}
    for arguments in ({"account": nested}, {"account": float("nan"), "x": {1, 2}}):
        outcome = SHOP.call("get_balance", arguments, {"accounts": {"checking": 1}, "inventory": {}})
        assert outcome.status == "invalid"


def test_object_arguments_within_the_bound_are_still_run():
    call = {"id": "c1", "type": "function", "function": {"name": "get_balance", "arguments": {"account": "savings"}}}
    state = _tool_call_episode([call])
    assert state.calls[-1].status == "ok"


# -- tool_call: a task that states no goal is an error, not a goal reached ---------------------------------


def test_a_task_without_a_goal_is_an_error_record_not_goal_reached():
    from rewardpipe.environment import TaskRow
    from rewardpipe.envs.tool_call import TOOL_CALL, ToolCallState

    class OwnTask(TaskRow):  # a subclass environment's own task model: its goal under another name
        world: dict
        goal: dict

    state = ToolCallState(messages=[Message(role="user", content="Move 50.")], world={"accounts": {"a": 1}})
    for task in (
        OwnTask(task_id="t1", prompt="Move 50.", world={"accounts": {"a": 1}}, goal={"accounts": {"a": 0}}),
        {"task_id": "t1", "world": {}, "expected_world": {"accounts": {"a": 0}}},  # a plain row
    ):
        result = TOOL_CALL.score(state.messages, state=state, task=task)
        assert result.components["goal_reached"] is None  # was 1.0 whatever the world
        assert result.error is not None and "goal" in result.error.message
        assert result.aggregate is None


def _rate_tools():
    from rewardpipe.envs.tool_call.tools import Toolset, tool

    @tool
    def set_rate(world: dict, rate: float) -> tuple[dict, dict]:
        """Set the rate.

        Args:
            rate: the new rate.
        """
        world["rate"] = rate
        return {"rate": rate}, world

    return Toolset([set_rate])


@pytest.mark.parametrize(
    "arguments",
    ['{"rate": NaN}', '{"rate": Infinity}', '{"rate": -Infinity}', '{"rate": 1e999}', {"rate": float("nan")}],
)
def test_numbers_json_has_not_are_an_invalid_call_not_a_world_json_cannot_carry(arguments):
    outcome = _rate_tools().call("set_rate", arguments, {"rate": 0.5})
    assert outcome.status == "invalid"  # was "ok", the world holding nan or inf (null once written as JSON)
    assert outcome.world == {"rate": 0.5}


def test_a_tagged_call_with_nan_in_its_arguments_is_invalid():
    from rewardpipe.envs.tool_call import ToolCallEnvironment, ToolCallTask

    class RateEnvironment(ToolCallEnvironment):
        name = "rate"
        toolset = _rate_tools()

    env = RateEnvironment()
    task = ToolCallTask(task_id="t", prompt="Set the rate.", world={"rate": 0.5}, expected_world={"rate": 0.25})
    state = env.start(task)
    text = '<tool_call>{"name": "set_rate", "arguments": {"rate": NaN}}</tool_call>'
    state = state.append(Message(role="assistant", content=text))
    state = env.respond(env.on_policy_turn(state, task, text), task)
    assert state.calls[-1].status == "invalid" and state.world == {"rate": 0.5}


def test_finite_floats_are_still_arguments():
    assert _rate_tools().call("set_rate", '{"rate": 1e308}', {}).status == "ok"
