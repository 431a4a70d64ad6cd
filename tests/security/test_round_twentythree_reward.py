"""Round twenty-three on the reward side: the environments (tool_call, wordle, ask-before-coding) and the monitor.

* **tool_call: an answer-only task scored an episode that changed the world.** A task that states only an
  ``expected_answer`` asks a question; the world was never looked at, so moving the user's money on the way
  (savings swept into checking, then one ``get_balance`` read for "the total of checking and savings") reached the
  goal as fully as the two reads. An answer-only task's goal now also needs a world no call changed.
"""

from __future__ import annotations

import json

from rewardpipe.episode import converse, start_episode
from rewardpipe.policies import ScriptedPolicy

# -- tool_call: a question is not answered by changing the world --------------------------------------------


def _tool_task(task_id: str):
    from rewardpipe.envs.tool_call import BUNDLED_TASKS, ToolCallTask

    for line in BUNDLED_TASKS.read_text().splitlines():
        row = json.loads(line)
        if row["task_id"] == task_id:
            return ToolCallTask.model_validate(row)
    raise AssertionError(task_id)


def _tool_play(task, turns):
    from rewardpipe.envs.tool_call import ENVIRONMENT, TOOL_CALL

    state = start_episode(task, env=ENVIRONMENT, run_id="r", step=0, group_id="g", rollout_id="k0")
    state = converse(state, task, ScriptedPolicy(list(turns)), ENVIRONMENT)
    return TOOL_CALL.score(state.messages, task=task, state=state).components


def _call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def test_an_answer_reached_by_moving_the_users_money_is_not_the_goal():
    task = _tool_task("tc-010-total")  # checking 4321 + savings 50000, answer only
    sweep = _call("transfer", source="checking", target="savings", amount_cents=4321)
    components = _tool_play(task, [sweep, _call("get_balance", account="savings"), "<answer>54321</answer>"])
    assert components["goal_reached"] == 0.0  # was 1.0: the right number, the checking account emptied


def test_a_change_undone_is_still_a_change_the_question_did_not_ask_for():
    task = _tool_task("tc-001-balance")
    there = _call("transfer", source="checking", target="savings", amount_cents=100)
    back = _call("transfer", source="savings", target="checking", amount_cents=100)
    components = _tool_play(task, [there, back, _call("get_balance", account="checking"), "<answer>12000</answer>"])
    assert components["goal_reached"] == 0.0


def test_an_answer_read_without_changing_anything_still_reaches_the_goal():
    task = _tool_task("tc-010-total")
    reads = _call("get_balance", account="checking") + _call("get_balance", account="savings")
    refused = _call("transfer", source="checking", target="savings", amount_cents=10**8)  # refused: nothing changed
    components = _tool_play(task, [refused, reads, "<answer>54321</answer>"])
    assert components["goal_reached"] == 1.0


def test_a_task_with_a_world_and_an_answer_goal_is_judged_on_both_as_before():
    task = _tool_task("tc-009-restock-and-report")
    turns = [_call(c.name, **c.arguments) for c in task.reference_calls]
    assert _tool_play(task, [*turns, f"<answer>{task.expected_answer}</answer>"])["goal_reached"] == 1.0
