"""A component that changes the inputs it is given is named before training (round nineteen).

The components of a reward share one sample's inputs, and the platform goes on using them after scoring (the
messages become the stored transcript; a task row serves every later rollout of its group). A component that
popped the last message, sorted the messages or appended to the task changed what the components after it
scored and what was stored, and nothing said so. ``doctor`` and ``rewardpipe.testing.check_reward`` report it
(``component_mutated_input``), naming the component and the input; the scorer itself still trusts components
(copying every input for every component would cost more than most components).
"""

from __future__ import annotations

import pytest

from rewardpipe import Reward, component
from rewardpipe.models import Message
from rewardpipe.testing import check_reward


@component(range=(0, 1), role="outcome")
def answered(completion):
    return 1.0 if "42" in completion else 0.0


@component(range=(0, 10), role="shaping")
def turns_popping(messages):
    messages.pop()  # the bug: a "look at the earlier turns" written as pop()
    return float(len(messages))


@component(range=(0, 1), role="shaping")
def sorts_messages(messages):
    messages.sort(key=lambda m: m.role)  # assistant before user
    return 1.0 if messages and "42" in (messages[-1].content or "") else 0.0


@component(range=(0, 1), role="shaping")
def edits_a_message(messages):
    messages[-1].content = (messages[-1].content or "").strip().lower()
    return 0.5


@component(range=(0, 1), role="shaping")
def grows_the_task(task):
    task["seen"].append(1)
    return 1.0 if len(task["seen"]) > 1 else 0.0


@component(range=(0, 1), role="shaping")
async def async_edit(messages):
    messages.append(Message(role="user", content="injected"))
    return 0.0


@component(range=(0, 1), role="shaping")
def reads_only(messages, task):
    return 1.0 if len(messages) > 1 and task["seen"] == [] else 0.0


def _samples():
    return [
        {
            "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "It is 42"}],
            "task": {"seen": []},
        },
        {
            "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "no idea"}],
            "task": {"seen": []},
        },
    ]


@pytest.mark.parametrize(
    ("mutator", "what"),
    [
        (turns_popping, "messages"),
        (sorts_messages, "messages"),
        (edits_a_message, "messages"),
        (grows_the_task, "task"),
        (async_edit, "messages"),
    ],
)
def test_check_reward_names_the_component_that_changed_an_input(mutator, what):
    reward = Reward("r", [answered, mutator, reads_only])
    with pytest.raises(AssertionError) as raised:
        check_reward(reward, _samples(), require_variation=False)
    said = str(raised.value)
    assert f"[component_mutated_input] component '{mutator.name}' changed the {what}" in said
    assert "'answered'" not in said and "'reads_only'" not in said  # only the one that does it


def test_a_reward_whose_components_only_read_passes():
    scores = check_reward(Reward("r", [answered, reads_only]), _samples(), require_variation=False)
    assert [s.components["answered"] for s in scores] == [1.0, 0.0]


def test_diagnostics_that_change_the_inputs_are_named_as_the_rewards():
    def diagnostics(data):
        data.messages.clear()
        return {}

    reward = Reward("r", [answered, reads_only], diagnostics=diagnostics)
    with pytest.raises(
        AssertionError, match=r"scoring with reward 'r' changed its inputs \(no component does alone: its diagnostics"
    ):
        check_reward(reward, _samples(), require_variation=False)


def test_doctor_reports_a_component_that_changes_the_episodes_state_or_task():
    from rewardpipe.doctor import diagnose
    from rewardpipe.envs.tool_call import ENVIRONMENT
    from rewardpipe.runner import NoSandbox
    from tests.envs.test_tool_call import task

    @component(range=(0, 1), role="shaping")
    def trims_the_state(state):
        del state.messages[1:]
        return 0.0

    good = task(task_id="good", reference_calls=[{"name": "get_balance", "arguments": {"account": "checking"}}])
    healthy = ENVIRONMENT.reward
    (clean,) = diagnose([good], ENVIRONMENT, NoSandbox(), reward=healthy)
    assert not any("component_mutated_input" in p for p in clean.problems), clean.problems
    (found,) = diagnose(
        [good], ENVIRONMENT, NoSandbox(), reward=healthy.with_components([*healthy.components, trims_the_state])
    )
    mutated = [p for p in found.problems if "component_mutated_input" in p or "changed the" in p]
    assert mutated and all("component 'trims_the_state' changed the" in p for p in mutated), found.problems
    assert any("messages" in p or "state" in p for p in mutated)
