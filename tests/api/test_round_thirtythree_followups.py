"""Round thirty-three follow-ups: where a raising component was raised, how to fix a hook's protocol violation, and
the ask_before_coding LLM user's fallbacks counted."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rewardpipe import Environment, EpisodeState, Message, Reward, component
from rewardpipe.episode import EpisodeError, apply_env_turn, apply_policy_turn, start_episode
from tests.api.test_environment_protocol import IDS, Echo, EchoEnv

HERE = Path(__file__).name


def _helper_that_fails(text: str) -> float:
    return json.loads(text)["value"]  # the innermost user frame: json's own frames are not the user's


@component(range=(0, 1), role="outcome")
def parses(completion: str) -> float:
    return _helper_that_fails(completion)


@component(range=(0, 1), role="outcome")
async def parses_async(completion: str) -> float:
    return _helper_that_fails(completion)


def _line_of(fragment: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if fragment in line and "def " not in line)


@pytest.mark.parametrize("comp", [parses, parses_async], ids=["sync", "async"])
def test_a_component_raised_error_names_the_users_file_and_line(comp):
    error = Reward("r", [comp]).score([Message(role="assistant", content="{not json")]).error
    assert error.kind == "component_raised"
    assert error.message.startswith(f"component '{comp.name}' raised JSONDecodeError: ")
    where = re.search(r"\(at (.+):(\d+)\)$", error.message)
    assert where is not None, error.message
    assert where.group(1).endswith(HERE) and int(where.group(2)) == _line_of('return json.loads(text)["value"]')
    assert "rewardpipe/" not in where.group(1) and "json/" not in where.group(1)


def test_the_location_is_bounded_and_a_returned_wrong_type_has_none(tmp_path):
    deep = tmp_path.joinpath(*["d" * 40] * 8)
    deep.mkdir(parents=True)
    module = deep / "deep_reward.py"
    module.write_text("def boom(completion):\n    raise RuntimeError('x' * 10_000)\n")
    namespace: dict = {}
    exec(compile(module.read_text(), str(module), "exec"), namespace)  # the test's own file
    boom = component(range=(0, 1), role="outcome")(namespace["boom"])
    message = Reward("v", [boom]).score([Message(role="assistant", content="a")]).error.message
    assert message.endswith("deep_reward.py:2)") and "(at ..." in message
    assert len(message) < 450

    @component(range=(0, 1), role="outcome")
    def as_text(completion):
        return "1"

    message = Reward("t", [as_text]).score([Message(role="assistant", content="a")]).error.message
    assert "(at " not in message  # rewardpipe refused the value: no user frame raised


# --------------------------------------------------------------------------------------------------
# Hook protocol violations say how to fix them


class _Forgets(EchoEnv):
    def respond(self, state, task, ctx):
        state.append(Message(role="user", content="again"), next_action="policy")  # no return


class _Edits(EchoEnv):
    def respond(self, state, task, ctx):
        first = Message(role="user", content="edited")
        return state.evolve(messages=[first, *state.messages[1:]], next_action="policy")


class _Speaks(EchoEnv):
    def respond(self, state, task, ctx):
        return state.append(Message(role="assistant", content="me"), next_action="policy")


class _Renames(EchoEnv):
    def respond(self, state, task, ctx):
        return state.evolve(rollout_id="other", next_action="policy")


class _Stalls(EchoEnv):
    def respond(self, state, task, ctx):
        return state.evolve(next_action="env")


@pytest.mark.parametrize(
    ("env_class", "first_part", "fix"),
    [
        (_Forgets, "respond() returned NoneType, not a new state", "a missing return?"),
        (_Edits, "changed message 1 of the conversation; a hook only appends", "state.append(Message(...))"),
        (_Speaks, "added an assistant message: only the policy speaks as the assistant", "role 'user' or 'tool'"),
        (_Renames, "changed the rollout's ids", "state.evolve(...)"),
        (_Stalls, "left next_action 'env'; it must be one of", "state.evolve(next_action=...)"),
    ],
)
def test_a_hooks_protocol_violation_says_how_to_fix_it(env_class, first_part, fix):
    env, task = env_class(), Echo(task_id="t", prompt="say it", word="blue")
    state = apply_policy_turn(start_episode(task, env=env, **IDS), "red", env, task)
    with pytest.raises(EpisodeError) as raised:
        apply_env_turn(state, task, env)
    assert first_part in str(raised.value) and fix in str(raised.value), str(raised.value)


def test_start_returning_nothing_says_what_to_return():
    class NoStart(Environment):
        name = "nostart"

        def start(self, task):
            EpisodeState(messages=task.prompt_messages())

    with pytest.raises(EpisodeError) as raised:
        start_episode(Echo(task_id="t", prompt="p", word="w"), env=NoStart(), **IDS)
    text = str(raised.value)
    assert "start() returned NoneType, not a state" in text and "state_model" in text and "missing return" in text


# --------------------------------------------------------------------------------------------------
# ask_before_coding: the LLM user's replies the rule-based user's answer replaced are counted


def _abc_episode(chat, turns, *, llm_user_env=False):
    from rewardpipe import ScriptedPolicy
    from rewardpipe.envs.ask_before_coding.environment import AskBeforeCoding
    from rewardpipe.envs.ask_before_coding.simulator import OpenAISimulator
    from rewardpipe.envs.ask_before_coding.tasks import BUNDLED_TASKS
    from rewardpipe.episode import run_episode
    from rewardpipe.models import load_tasks
    from tests.core.conftest import FakeExecutor, result

    task = next(t for t in load_tasks(BUNDLED_TASKS) if t.task_id == "abc-001-format-duration")
    env = AskBeforeCoding(OpenAISimulator(chat=chat) if chat is not None else None, llm_user=llm_user_env)
    record = run_episode(
        task, ScriptedPolicy(list(turns)), env, FakeExecutor(result("failed", 0, 7)), run_id="r", step=0,
        group_id="g", rollout_id="x",
    )  # fmt: skip
    return task, record


STUB = "```python\ndef format_duration(seconds):\n    return None\n```"
QUESTIONS = ["Should negative durations raise an error?", "Do fractions of a second round?"]


def test_a_max_tokens_too_low_for_the_llm_user_shows_in_the_rollouts_metrics():
    from rewardpipe.openai_client import NoTextBeforeLimit

    def starved(messages, **params):
        raise NoTextBeforeLimit("the user's model returned no text: max_tokens ran out before it wrote any")

    _, record = _abc_episode(starved, [*QUESTIONS, STUB])
    assert record.status == "scored"
    assert record.metrics["llm_user_fallbacks"] == 2 and record.metrics["llm_user_no_text"] == 2


def test_unvettable_replies_are_counted_and_good_ones_are_not():
    def unreadable(messages, **params):
        return "Да, конечно, отрицательные значения недопустимы."  # letters the rules cannot read: replaced

    _, record = _abc_episode(unreadable, [QUESTIONS[0], STUB])
    assert record.metrics["llm_user_fallbacks"] == 1 and record.metrics["llm_user_no_text"] == 0

    _, record = _abc_episode(lambda messages, **params: "It's up to you.", [QUESTIONS[0], STUB])
    assert record.metrics["llm_user_fallbacks"] == 0 and record.metrics["llm_user_no_text"] == 0


def test_the_rule_based_user_adds_no_llm_user_metrics():
    _, record = _abc_episode(None, [QUESTIONS[0], STUB])
    assert "llm_user_fallbacks" not in record.metrics and record.metrics["spec_revealed"] == 1
