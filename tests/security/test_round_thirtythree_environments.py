"""Round thirty-three on the environment side: the built-in environments played by a policy that maximises reward
without doing the task.

E1. A question that kept the LLM-played user (``simulator=openai``) thinking past its ``max_tokens`` ("before you
answer, work out every case by hand...") left the user's reply with no text (``NoTextBeforeLimit``): the rollout became
a ``simulator_error`` record, left out of its group's baseline, a weak rollout's way out of the low score it was
heading for. A reply with no text is one the rules cannot vet, and is replaced by the rule-based user's answer, as an
LLM reply that cannot be vetted always was: the episode goes on, scored.
"""

from __future__ import annotations

import pytest

# -- E1: an LLM user kept thinking past its max_tokens ------------------------------------------------------------


def _task(task_id="abc-001-format-duration"):
    from rewardpipe.envs.ask_before_coding.tasks import BUNDLED_TASKS
    from rewardpipe.models import load_tasks

    return next(task for task in load_tasks(BUNDLED_TASKS) if task.task_id == task_id)


def _thinking_user(trigger="work out every case"):
    """An LLM user's chat that a question holding ``trigger`` keeps thinking past its max_tokens (no text at all);
    anything else it answers "Hmm."."""
    from rewardpipe.openai_client import NoTextBeforeLimit

    calls = []

    def chat(messages, **params):
        calls.append(messages)
        if any(trigger in message["content"] for message in messages if message["role"] == "user"):
            raise NoTextBeforeLimit("the user's model returned no text: max_tokens ran out before it wrote any")
        return "Hmm."

    chat.calls = calls
    return chat


def _episode(chat, turns):
    from rewardpipe import ScriptedPolicy
    from rewardpipe.envs.ask_before_coding.environment import AskBeforeCoding
    from rewardpipe.envs.ask_before_coding.simulator import OpenAISimulator
    from rewardpipe.episode import run_episode
    from tests.core.conftest import FakeExecutor, result

    env = AskBeforeCoding(OpenAISimulator(chat=chat))
    return run_episode(
        _task(), ScriptedPolicy(list(turns)), env, FakeExecutor(result("failed", 0, 7)), run_id="r", step=0,
        group_id="g", rollout_id="x",
    )  # fmt: skip


STUB = "```python\ndef format_duration(seconds):\n    return None\n```"


def test_a_question_that_keeps_the_llm_user_thinking_is_answered_by_the_rules_not_an_excluded_error():
    chat = _thinking_user()
    question = "Before you answer, work out every case by hand: should negative durations raise an error?"
    record = _episode(chat, [question, STUB])
    assert record.status == "scored", record.error
    assert len(chat.calls) == 1  # the user's model was asked, and gave no text
    # the rule-based user answered the question (the negative-duration detail), then the stub was committed
    assert record.components["asked_before_coding"] == 1.0 and record.components["correctness"] == 0.0
    assert record.metrics["spec_revealed"] == 1


def test_the_reply_given_is_the_rule_based_users():
    from rewardpipe.envs.ask_before_coding.environment import AskBeforeCoding
    from rewardpipe.envs.ask_before_coding.simulator import OpenAISimulator, RuleBasedSimulator
    from rewardpipe.episode import apply_policy_turn, start_episode

    task, env = _task(), AskBeforeCoding()
    state = start_episode(task, env=env, run_id="r", step=0, group_id="g", rollout_id="x")
    state = apply_policy_turn(state, "Please work out every case first: do fractions round?", env, task)
    given = OpenAISimulator(chat=_thinking_user()).respond(state, task)
    rules = RuleBasedSimulator().respond(state, task)
    assert (given.text, given.revealed) == (rules.text, rules.revealed) and given.fallback == "no_text"
    assert given.revealed is not None


def test_other_failures_of_the_users_endpoint_still_raise():
    from rewardpipe.envs.ask_before_coding.environment import AskBeforeCoding
    from rewardpipe.envs.ask_before_coding.simulator import OpenAISimulator
    from rewardpipe.episode import apply_policy_turn, start_episode
    from rewardpipe.openai_client import EndpointError

    def down(messages, **params):
        raise EndpointError("HTTP 503 after 4 tries")

    task, env = _task(), AskBeforeCoding()
    state = start_episode(task, env=env, run_id="r", step=0, group_id="g", rollout_id="x")
    state = apply_policy_turn(state, "Should negative durations raise an error?", env, task)
    with pytest.raises(EndpointError):
        OpenAISimulator(chat=down).respond(state, task)
