"""Round sixteen: a user's environment that misbehaves costs its own rollout an error record, never the run.

Each test drives the local runner (``run_slots``, what ``rewardpipe run`` calls) with two rollouts of an
environment whose hook breaks the protocol in one way, and checks the run finishes with one record per
rollout, each naming what was wrong."""

from __future__ import annotations

import json
import signal
from typing import Any

import pytest

from rewardpipe import Environment, EpisodeState, Message, Reward, TaskRow, component
from rewardpipe.references import ReferenceProblem, load_file_reference, resolve_reward
from rewardpipe.runner import NoSandbox, plan_step, run_slots


class Task(TaskRow):
    pass


@component(range=(0, 1), role="outcome")
def always(state: EpisodeState) -> float:
    return 1.0


class Talk(Environment):
    name = "talk"
    version = "1"
    task_model = Task
    max_turns = 3
    reward = Reward("talk", [always])

    def on_policy_turn(self, state: EpisodeState, task: Task, text: str) -> EpisodeState:
        return state.evolve(next_action="env")

    def respond(self, state: EpisodeState, task: Task, ctx: Any) -> EpisodeState:
        return state.append({"role": "user", "content": "again"}, next_action="policy")


class Chatty:
    def next_turn(self, state: EpisodeState, task: Task) -> str:
        return "hello"


class _Hung(BaseException):
    pass


def _run(env: Environment) -> tuple[list[Any], list[Any]]:
    """Two rollouts of one task through the local runner (a hang fails the test after 20 s)."""

    def hung(*_: Any) -> None:
        raise _Hung("the run did not end")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    transcripts: list[Any] = []
    try:
        records = run_slots(
            plan_step([Task(task_id="t1", prompt="talk")], 0, 1, 2),
            policy=Chatty(),
            env=env,
            executor=NoSandbox(),
            run_id="r16",
            on_transcript=transcripts.append,
        )
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert len(records) == 2
    return records, transcripts


def _simulator_errors(records: list[Any], *words: str) -> None:
    for record in records:
        assert record.status == "error" and record.error.kind == "simulator_error", record
        assert record.aggregate is None and record.components == {"always": None}
        for word in words:
            assert word in record.error.message, record.error.message


# -- a hook that rewrites the conversation -----------------------------------------------------------------


def test_a_respond_that_drops_earlier_turns_cannot_escape_the_turn_limit():
    """The turn limit counts the assistant messages of the state: a respond that rebuilt the conversation
    without them kept the episode going for ever and hung the run."""

    class Forgets(Talk):
        def respond(self, state, task, ctx):
            return state.evolve(
                messages=[state.messages[0], Message(role="user", content="again")], next_action="policy"
            )

    records, _ = _run(Forgets())
    _simulator_errors(records, "respond()", "message")


@pytest.mark.parametrize("added", ["hello", {"role": "user", "content": "hello"}])
def test_a_respond_that_adds_something_that_is_not_a_message_fails_its_rollout_not_the_run(added):
    """``state.evolve(messages=[..., "hello"])`` is not validated: the text (or dict) reached the record and the
    transcript, and the run raised a ValidationError / AttributeError."""

    class Raw(Talk):
        def respond(self, state, task, ctx):
            return state.evolve(messages=[*state.messages, added], next_action="policy")

    records, _ = _run(Raw())
    _simulator_errors(records, "respond()", "Message")


def test_a_respond_that_speaks_as_the_assistant_is_refused():
    """A message the environment writes in the model's name would be trained on as the model's own turn (and
    counts toward its turn limit)."""

    class Ventriloquist(Talk):
        def respond(self, state, task, ctx):
            return state.append({"role": "assistant", "content": "I give up"}, next_action="score")

    records, _ = _run(Ventriloquist())
    _simulator_errors(records, "respond()", "assistant")


def test_an_end_reason_that_is_not_text_fails_its_rollout_not_the_run():
    class Ends(Talk):
        def respond(self, state, task, ctx):
            return state.evolve(next_action="score", end_reason={"why": object()})

    records, _ = _run(Ends())
    _simulator_errors(records, "end_reason")


# -- what the environment adds to the record and the transcript ----------------------------------------------


class Ends(Talk):
    def respond(self, state, task, ctx):
        return state.append({"role": "user", "content": "done"}, next_action="score", end_reason="done")


@pytest.mark.parametrize(
    "metrics",
    [{"odd": object(), "turns": 2}, {1: 2, "turns": 2}, {"nested": {"a": 1}, "turns": 2}],
)
def test_metrics_that_are_not_numbers_or_text_keep_the_score(metrics):
    """``metrics()`` returning an object, a non-text key or a nested dict made the Record fail to validate and
    the whole run raised; a failing metrics() already kept the score (``env_metrics_error``)."""

    class Odd(Ends):
        def metrics(self, state, task):
            return metrics

    records, _ = _run(Odd())
    for record in records:
        assert record.status == "scored" and record.aggregate == 1.0
        assert record.metrics["turns"] == 2 and record.metrics["end_reason"] == "done"
        assert "env_metrics_error" in record.metrics


@pytest.mark.parametrize(
    "fields",
    [{"turn_kinds": object()}, {"turn_kinds": [1, None]}, {"revealed": "everything"}, {"run_id": "other"}],
)
def test_transcript_fields_of_the_wrong_shape_are_left_out_not_the_run(fields):
    """A transcript_fields() that raised was already left out; one returning a wrong value (or a key the
    transcript sets itself) made RolloutTranscript raise and the run with it."""

    class Odd(Ends):
        def transcript_fields(self, state, task):
            return fields

    records, transcripts = _run(Odd())
    assert all(record.status == "scored" for record in records)
    assert len(transcripts) == 2 and all(t.run_id == "r16" and t.turn_kinds == [] for t in transcripts)


# -- entry points that fail to import ---------------------------------------------------------------------


def test_an_entry_point_that_exits_on_import_is_a_listed_problem_not_the_end_of_the_cli(site, cli, tmp_path):
    """A module that parses its arguments (argparse) or calls sys.exit at import raised SystemExit, which the
    loader's ``except Exception`` let through: ``rewardpipe envs`` ended with argparse's usage and exit code
    2, listing nothing, and ``--env exits`` did the same."""
    from tests.api.conftest import install_distribution

    package = tmp_path / "exiting_rl"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "train.py").write_text(
        "import argparse\nparser = argparse.ArgumentParser()\nparser.add_argument('--lr', required=True)\n"
        "parser.parse_args()\n"
    )
    (package / "script.py").write_text("import sys\nsys.exit('usage: script.py DATA')\n")
    install_distribution(
        site,
        "exiting-rl",
        "1.0",
        "[rewardpipe.environments]\ntrained = exiting_rl.train:ENVIRONMENT\n"
        "[rewardpipe.rewards]\nscripted = exiting_rl.script:REWARD\n",
        package,
    )
    result = cli("envs", "--json")
    assert result.exit_code == 0, result.output
    listing = json.loads(result.stdout)
    problems = {row["name"]: row["problem"] for row in listing["environments"] + listing["rewards"]}
    assert "exits when imported" in problems["trained"] and "SystemExit" in problems["trained"]
    assert "usage: script.py DATA" in problems["scripted"]
    assert problems["wordle"] is None
    with pytest.raises(ReferenceProblem, match=r"importing 'exiting_rl\.script' failed: it exits when imported"):
        resolve_reward("scripted")
    with pytest.raises(ReferenceProblem, match="exits when imported"):
        load_file_reference(f"{package / 'script.py'}:REWARD")


def test_a_start_whose_messages_are_not_messages_fails_its_rollout_not_the_run():
    """start() is checked to return a state, not that its conversation holds messages: a text put there with
    evolve (not validated) reached the transcript, and the run raised."""

    class Opens(Talk):
        def start(self, task):
            return EpisodeState().evolve(messages=[task.prompt])

    records, _ = _run(Opens())
    _simulator_errors(records, "start()", "Message")


@pytest.mark.parametrize(
    "change",
    [
        lambda messages: messages.append("hello"),  # a text appended in place
        lambda messages: messages.clear(),  # the turns so far dropped in place: the turn limit never came
        lambda messages: messages.__setitem__(0, Message(role="user", content="another task")),
    ],
)
def test_a_respond_that_changes_the_conversation_in_place_is_caught_too(change):
    class InPlace(Talk):
        def respond(self, state, task, ctx):
            change(state.messages)
            return state.append({"role": "user", "content": "again"}, next_action="policy")

    records, _ = _run(InPlace())
    _simulator_errors(records, "respond()")
