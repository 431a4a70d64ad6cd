"""Round thirty-two on the environment protocol and the episode engine, with an environment of a user's own.

E1. ``hook_timeout_s`` bounded every hook but ``scenarios()`` and ``replay()``: one that hung hung ``run --policy
scripted`` (every rollout of the step lost), ``doctor`` and ``rewardpipe score`` (every recording lost). Both are now
bounded like the others: a ``scenarios()`` past the limit is its task's rollouts' ``policy_error`` (as a raising one
is), doctor's ``scenario_failed`` finding, an environment's own ``replay()`` past it that recording's
``replay_failed``.

E2. One hook call kept up to ``max_observation_messages`` (100) messages of ``max_observation_chars`` (200,000) each:
20 million characters a call, into the state, every later request, the transcript and the state paused on AWS.
``max_observation_total_chars`` (default 1,000,000) bounds their total: the messages past it are dropped, counted in
``env_observations_dropped``, with the note the message limit writes.

E3. A record kept every metric an environment's ``metrics()`` (or a reward's diagnostics) gave: 200,000 short ones
made a 3 MB record of every rollout. At most ``MAX_METRICS`` are kept; the rest are left out and said so.

E4. A ``scenarios()`` returning a list of names, or a dict of plain functions, made every rollout of ``run --policy
scripted`` a ``policy_error`` saying "AttributeError: 'list' object has no attribute 'items'": it now says what
returned what, and what it should return.
"""

from __future__ import annotations

import threading

import pytest

from rewardpipe import ScriptedPolicy
from rewardpipe.models import Message
from rewardpipe.runner import NoSandbox
from tests.security.test_round_thirtyone_environments import TASKS, Count, _run, recordings

# -- E1: scenarios() and replay() are bounded by hook_timeout_s ---------------------------------------------------

_RELEASE = threading.Event()  # set at the end of the module: no abandoned call outlives the tests for long


@pytest.fixture(scope="module", autouse=True)
def _release_hung_hooks():
    yield
    _RELEASE.set()


def _hang():
    _RELEASE.wait(20)  # "hangs": returns, unbounded, well after hook_timeout_s


class HungScenarios(Count):
    hook_timeout_s = 0.2

    def scenarios(self, task):
        if task.task_id == "t6":
            _hang()
        return super().scenarios(task)


class HungPlayer(Count):
    """The reference player of task t6 hangs (a game engine's search that never ends)."""

    hook_timeout_s = 0.2

    def scenarios(self, task):
        def reference(state, task):
            if task.target == 6:
                _hang()
            return str(task.target)

        return {"reference": ScriptedPolicy(reference), "wrong": ScriptedPolicy(["0", "1", "2"], weight=0)}


@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize(
    ("env", "named"),
    [("scenarios", "scenarios() of task 't6'"), ("player", "scenario 'reference' of task 't6'")],
)
def test_a_hung_scenarios_or_player_costs_its_own_tasks_rollouts(env, named, threads):
    records = _run(HungScenarios() if env == "scenarios" else HungPlayer(), threads=threads)
    assert len(records) == 6
    for record in records:
        if record.task_id != "t6":
            assert record.status == "scored"
        else:
            assert record.status == "error" and record.aggregate is None
            assert record.error.kind == "policy_error"
            assert named in record.error.message and "hook_timeout_s" in record.error.message


def test_doctor_reports_a_hung_scenarios_and_goes_on():
    from rewardpipe.doctor import diagnose

    diagnoses = diagnose(TASKS, HungScenarios(), NoSandbox())
    by_task = {diagnosis.task_id: diagnosis for diagnosis in diagnoses}
    assert any("scenarios()" in p and "hook_timeout_s" in p for p in by_task["t6"].problems)
    assert not any("hook_timeout_s" in p for p in by_task["t3"].problems)


def test_a_hung_replay_of_ones_own_costs_its_own_recording():
    from rewardpipe.runner import score_rollouts

    class HungReplay(Count):
        hook_timeout_s = 0.2

        def replay(self, task, messages):
            if task.task_id == "t6":
                _hang()
            return super().replay(task, messages)

    tasks = {task.task_id: task for task in TASKS}
    records = score_rollouts(recordings(), tasks, executor=NoSandbox(), env=HungReplay(), run_id="r")
    assert [record.status for record in records] == ["scored", "error", "scored"]
    assert records[1].error.kind == "replay_failed"
    assert "replay()" in records[1].error.message and "hook_timeout_s" in records[1].error.message


def test_the_default_replay_bounds_each_hook_not_the_whole_recording():
    from rewardpipe.episode import env_replay

    class Slowish(Count):
        hook_timeout_s = 5.0

    task = TASKS[0]
    state = env_replay(Slowish(), task, recordings()[0].messages)
    assert state.found and state.end_reason == "found"


# -- E2: the characters of one hook call are bounded together -----------------------------------------------------


class Floods(Count):
    """Every reply: the word, then ``copies`` messages of ``size`` characters (each within max_observation_chars)."""

    copies = 50
    size = 150_000

    def respond(self, state, task, ctx):
        state = super().respond(state, task, ctx)
        return state.append(*[{"role": "user", "content": "y" * self.size}] * self.copies)


def test_one_hook_call_keeps_at_most_max_observation_total_chars():
    from rewardpipe.environment import MAX_OBSERVATION_TOTAL_CHARS
    from rewardpipe.episode import apply_env_turn, start_episode

    env, task = Floods(), TASKS[0]
    assert env.max_observation_total_chars == MAX_OBSERVATION_TOTAL_CHARS == 1_000_000
    state = start_episode(task, env=env, run_id="r", step=0, group_id="g", rollout_id="x")
    state = state.append({"role": "assistant", "content": "0"}).evolve(guesses=[0], next_action="env")
    after = apply_env_turn(state, task, env)
    added = after.messages[len(state.messages) :]
    kept = sum(len(message.content) for message in added)
    assert kept <= MAX_OBSERVATION_TOTAL_CHARS + 400  # the note at the end of the last one kept
    assert len(added) == 1 + 6  # "higher", then six of 150,000 characters
    assert after.observations_dropped == 50 - 6
    assert added[-1].content.endswith(
        "\n[rewardpipe dropped the 44 messages respond() added past this one; max_observation_total_chars is 1,000,000]"
    )


def test_the_total_drop_is_counted_in_the_record():
    class Small(Floods):
        copies = 5
        size = 1_000
        max_observation_total_chars = 2_500

    records = _run(Small(), policy=ScriptedPolicy(["0", "1", "2", "4"]))
    assert records and all(record.status == "scored" for record in records)
    # "higher"/"lower" and two of 1,000 characters kept a reply; three dropped, in each of three replies
    assert {record.metrics["env_observations_dropped"] for record in records} == {3 * 3}
    assert all("env_observations_cut" not in record.metrics for record in records)


def test_a_first_message_longer_than_the_total_is_kept_cut_and_still_counted_as_cut():
    from rewardpipe.episode import apply_env_turn, observations_cut, start_episode

    class Big(Floods):
        copies = 3
        size = 900
        max_observation_chars = 500
        max_observation_total_chars = 300

        def respond(self, state, task, ctx):
            return state.append(*[{"role": "user", "content": "y" * self.size}] * self.copies, next_action="policy")

    env, task = Big(), TASKS[0]
    state = start_episode(task, env=env, run_id="r", step=0, group_id="g", rollout_id="x")
    state = state.append({"role": "assistant", "content": "0"}).evolve(guesses=[0], next_action="env")
    after = apply_env_turn(state, task, env)
    added = after.messages[len(state.messages) :]
    assert len(added) == 1 and added[0].content.startswith("y" * 500 + "\n")
    assert after.observations_dropped == 2
    assert observations_cut(after, 500) == 1


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "100"])
def test_a_bad_max_observation_total_chars_is_named(bad):
    from rewardpipe.environment import check_environment

    class Bad(Count):
        max_observation_total_chars = bad

    with pytest.raises(ValueError, match="max_observation_total_chars must be an integer of 1 or more"):
        check_environment(Bad())


# -- tool calls ---------------------------------------------------------------------------------------------------


def test_an_environment_offering_tools_keeps_the_calls():
    from rewardpipe.envs.tool_call.environment import ENVIRONMENT
    from rewardpipe.envs.tool_call.tasks import BUNDLED_TASKS
    from rewardpipe.episode import apply_policy_turn, start_episode
    from rewardpipe.models import load_task_rows

    task = load_task_rows(BUNDLED_TASKS, ENVIRONMENT.task_model)[0]
    state = start_episode(task, env=ENVIRONMENT, run_id="r", step=0, group_id="g", rollout_id="x")
    call = [{"id": "c1", "type": "function", "function": {"name": "get_balance", "arguments": '{"account": "x"}'}}]
    after = apply_policy_turn(state, Message(role="assistant", content="", tool_calls=call), ENVIRONMENT, task)
    assert after.messages[-1].tool_calls == call


def test_doctor_reports_a_hung_check_task_and_goes_on():
    from rewardpipe.doctor import diagnose

    class HungCheck(Count):
        hook_timeout_s = 0.2

        def check_task(self, task, runs):
            if task.task_id == "t6":
                _hang()
            return []

    by_task = {diagnosis.task_id: diagnosis for diagnosis in diagnose(TASKS, HungCheck(), NoSandbox())}
    assert any("check_task()" in p and "hook_timeout_s" in p for p in by_task["t6"].problems)
    assert not any("hook_timeout_s" in p for p in by_task["t9"].problems)


def test_doctor_reports_a_hung_scripted_player_and_goes_on():
    from rewardpipe.doctor import diagnose

    by_task = {diagnosis.task_id: diagnosis for diagnosis in diagnose(TASKS, HungPlayer(), NoSandbox())}
    assert any("hook_timeout_s" in p for p in by_task["t6"].problems)
    assert not any("hook_timeout_s" in p for p in by_task["t3"].problems)


# -- E3: the number of metrics a record keeps is bounded, as their texts are ------------------------------------


def test_an_environment_giving_a_flood_of_metrics_keeps_a_bounded_record():
    from rewardpipe.models import MAX_METRICS

    class Counts(Count):
        def metrics(self, state, task):
            return {f"m{index}": index for index in range(200_000)}

    records = _run(Counts())
    assert records and all(record.status == "scored" for record in records)
    for record in records:
        assert len(record.metrics) <= MAX_METRICS + 10  # the platform's own beside them
        assert record.metrics["m0"] == 0
        assert "200,000" in record.metrics["env_metrics_error"]
        assert len(record.model_dump_json()) < 100_000


def test_a_reward_diagnostics_flood_is_bounded_too():
    from rewardpipe import Reward, component
    from rewardpipe.models import MAX_METRICS, Message

    @component(range=(0, 1), role="outcome")
    def one(messages):
        """Always 1."""
        return 1.0

    def flood(messages):
        return {f"d{index}": "x" for index in range(100_000)}

    reward = Reward("flood", [one], diagnostics=flood)
    score = reward.score([Message(role="user", content="q"), Message(role="assistant", content="a")])
    assert score.error is None and len(score.metrics) <= MAX_METRICS + 10


# -- E4: scenarios() of the wrong shape is named as such ----------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "named"),
    [(["reference"], "returned a list"), ({"reference": lambda state, task: "3"}, "named a function")],
    ids=["list", "plain function"],
)
def test_scenarios_of_the_wrong_shape_is_named_in_each_rollouts_error(given, named):
    class Odd(Count):
        def scenarios(self, task):
            return given

    records = _run(Odd())
    assert [record.status for record in records] == ["error"] * 6
    for record in records:
        assert record.error.kind == "policy_error"
        assert f"scenarios() of task {record.task_id!r} {named}" in record.error.message
        assert "ScriptedPolicy" in record.error.message
