"""Round twenty-one, an independent review of the public API: what a user's own environment or reward does that
used to end more than its own rollout or sample."""

from __future__ import annotations

import sys

import pytest

from rewardpipe import Environment, EpisodeState, Reward, TaskRow, component
from rewardpipe.runner import plan_step, run_slots


@component(range=(0, 1), role="outcome")
def said_stop(state: EpisodeState) -> float:
    return float(any(m.content == "stop" for m in state.messages if m.role == "assistant"))


class Quits(TaskRow):
    quit_in: str = ""  # the hook that calls sys.exit() for this task ("" for none)


class Quitting(Environment):
    """A game engine whose own "quit" is ``sys.exit()``, reached on one task's move."""

    name = "quitting"
    version = "1"
    task_model = Quits
    max_turns = 3
    reward = Reward("quitting", [said_stop])

    def _maybe_quit(self, task: Quits, hook: str) -> None:
        if task.quit_in == hook:
            sys.exit(3)

    def start(self, task):
        self._maybe_quit(task, "start")
        return super().start(task)

    def on_policy_turn(self, state, task, text):
        self._maybe_quit(task, "on_policy_turn")
        return state.evolve(next_action="score" if text == "stop" else "env")

    def respond(self, state, task, ctx):
        self._maybe_quit(task, "respond")
        return state.append({"role": "user", "content": "go on"}, next_action="policy")


class TimedQuitting(Quitting):
    hook_timeout_s = 30.0  # the call runs in a thread of its own: its sys.exit() is handed back the same way


class GoOnThenStop:
    def next_turn(self, state, task):
        return "stop" if state.assistant_turns else "go"


@pytest.mark.parametrize("env", [Quitting(), TimedQuitting()], ids=["in-thread", "hook_timeout_s"])
@pytest.mark.parametrize("hook", ["start", "on_policy_turn", "respond"])
def test_a_hook_calling_sys_exit_is_its_rollouts_simulator_error_not_the_end_of_the_run(env, hook):
    """Before: SystemExit is no Exception, so it went through every per-rollout handler and the run ended
    silently with the hook's exit status (3), every other rollout lost."""
    tasks = [Quits(task_id="fine", prompt="p"), Quits(task_id="quits", prompt="p", quit_in=hook)]
    records = run_slots(plan_step(tasks, 0, 2, 2), policy=GoOnThenStop(), env=env, executor=None, run_id="run")
    by_task: dict[str, list] = {}
    for record in records:
        by_task.setdefault(record.task_id, []).append(record)
    assert [r.status for r in by_task["fine"]] == ["scored", "scored"]
    for record in by_task["quits"]:
        assert record.status == "error" and record.error.kind == "simulator_error"
        assert f"{hook}() called sys.exit(3)" in record.error.message
        assert record.aggregate is None


@pytest.mark.parametrize("hook", ["start", "on_policy_turn", "respond", "metrics", "scenarios"])
def test_an_async_hook_is_refused_at_load_naming_it(hook):
    """Before: accepted, then every rollout failed at play ("on_policy_turn() returned coroutine, not a new
    state", a "coroutine was never awaited" warning with it), and doctor blamed every task."""
    from rewardpipe.environment import check_environment

    async def an_async_hook(self, *args):
        return None

    hooked = type("AsyncHooked", (Quitting,), {hook: an_async_hook})
    with pytest.raises(ValueError, match=rf"{hook}\(\) is async def; hooks are called synchronously"):
        check_environment(hooked())


def test_the_cli_names_an_async_hook(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from rewardpipe.cli import app

    (tmp_path / "async_hooked_env.py").write_text(
        "from rewardpipe import Environment, Reward, component\n"
        "@component(range=(0, 1), role='outcome')\n"
        "def one(completion):\n"
        "    return 1.0\n"
        "class AsyncHooked(Environment):\n"
        "    name = 'async_hooked'\n"
        "    reward = Reward('r', [one])\n"
        "    async def respond(self, state, task, ctx):\n"
        "        return state\n"
        "ENV = AsyncHooked()\n"
    )
    (tmp_path / "tasks.jsonl").write_text('{"task_id": "t", "prompt": "p"}\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["doctor", "--env", "async_hooked_env:ENV", "--tasks", "tasks.jsonl"])
    assert result.exit_code == 2
    assert "respond() is async def" in result.output and "Traceback" not in result.output


class Renaming(Environment):
    """A hook that files its rollout under ids of its own (a state built anew, or evolve(rollout_id=...))."""

    name = "renaming"
    version = "1"
    max_turns = 3
    reward = Reward("renaming", [said_stop])

    def on_policy_turn(self, state, task, text):
        return state.evolve(next_action="env" if text != "stop" else "score")

    def respond(self, state, task, ctx):
        return state.append({"role": "user", "content": "go on"}, next_action="policy", rollout_id="mine")


def test_a_hook_that_changes_the_rollouts_ids_is_its_error_not_another_rollouts_record():
    """Before: every rollout was filed as 'mine', each record overwriting the last (4 rollouts, 1 record)."""
    tasks = [TaskRow(task_id="a", prompt="p"), TaskRow(task_id="b", prompt="p")]
    slots = plan_step(tasks, 0, 2, 2)
    records = run_slots(slots, policy=GoOnThenStop(), env=Renaming(), executor=None, run_id="run")
    assert sorted(r.rollout_id for r in records) == sorted(s.rollout_id for s in slots)
    for record in records:
        assert record.status == "error" and record.error.kind == "simulator_error"
        assert "respond() changed the rollout's ids (rollout_id" in record.error.message
        assert "-> 'mine'" in record.error.message


class Measured(Environment):
    """Ends after the model's first turn; ``metrics`` returns what the test sets."""

    name = "measured"
    version = "1"
    max_turns = 2
    reward = Reward("measured", [said_stop])
    returns: object = None

    def on_policy_turn(self, state, task, text):
        return state.evolve(next_action="score")

    def metrics(self, state, task):
        return type(self).returns


class _CharCodec:
    eos_id = 0

    def prompt_ids(self, prompt):
        return [ord(c) for c in prompt]

    def decode(self, ids):
        return "".join(chr(i) for i in ids if i)

    def feedback_ids(self, reply, conversational):
        return [ord(c) for c in reply]


def _says_stop(contexts, max_new_tokens):
    return [[ord(c) for c in "stop"] + [0] for _ in contexts]


@pytest.mark.parametrize(
    ("returned", "kept"),
    [(None, {}), ({"solved_in": 1, "trace": [1, 2]}, {"solved_in": 1}), ({"solved_in": 2}, {"solved_in": 2})],
)
def test_trl_episode_rows_read_the_environments_metrics_as_a_record_does(monkeypatch, returned, kept):
    """Before: ``metrics()`` returning None (no dict) raised AttributeError out of ``rollout_output``, failing
    TRL's whole rollout batch, and a value no record takes (a list) went into the row as it was."""
    from rewardpipe.integrations.trl_episodes import EPISODE_FIELD, EpisodeRollout, rollout_output

    monkeypatch.setattr(Measured, "returns", returned)
    env = Measured()
    rollout = EpisodeRollout([TaskRow(task_id="t", prompt="p")], env=env, max_turns=2)
    episodes = rollout.play(["p", "p"], _CharCodec(), _says_stop, max_completion_tokens=100, group_size=2)
    rows = rollout_output(episodes, env)[EPISODE_FIELD]
    for row in rows:
        assert row["components"] == {"said_stop": 1.0}
        assert {k: row[k] for k in ("solved_in", "trace") if k in row} == kept
        if returned is None:
            assert row["env_metrics_error"] == "metrics() returned NoneType, not a dict"


class QuitsOnReplay(Quitting):
    def replay(self, task, messages):
        if task.quit_in == "replay":
            sys.exit(4)
        return super().replay(task, messages)


def test_a_replay_of_its_own_calling_sys_exit_costs_its_line_not_the_scoring():
    """Before: ``score --env`` ended (exit 4, no message) at the first such recording, the others unscored."""
    from rewardpipe.models import Rollout
    from rewardpipe.runner import score_rollouts

    tasks = {"fine": Quits(task_id="fine", prompt="p"), "quits": Quits(task_id="quits", prompt="p", quit_in="replay")}
    messages = [{"role": "user", "content": "p"}, {"role": "assistant", "content": "stop"}]
    rollouts = [
        Rollout(rollout_id=f"r-{task_id}", group_id=f"g-{task_id}", task_id=task_id, messages=messages)
        for task_id in tasks
    ]
    records = score_rollouts(rollouts, tasks, executor=None, env=QuitsOnReplay(), run_id="run")
    by_task = {record.task_id: record for record in records}
    assert by_task["fine"].status == "scored"
    assert by_task["quits"].status == "error" and by_task["quits"].error.kind == "replay_failed"
    assert "replay() called sys.exit(4)" in by_task["quits"].error.message
