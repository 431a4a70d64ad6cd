"""Round thirty-two, part 2b: the run command and the records' bounds with an environment of a user's own, then the
built-in environments (wordle, tool_call) as a model optimised to exploit their rewards would play them.

B1. ``run --policy scripted`` asked each task's ``scenarios()`` before the run directly, not as the platform asks a
hook: one that hung hung the command, whatever ``hook_timeout_s`` said. It is now asked as the rollouts ask it.

B2. A record kept up to ``MAX_METRICS`` (2,048) metrics of up to 2,000 characters each from one source: 4 MB a record,
every metric within its own limit. ``MAX_METRICS_TEXT_CHARS`` bounds the names and texts one source adds.

B3. What an environment's ``transcript_fields()`` gave was kept whole: a million turn kinds, a megabyte of revealed
text or of executed code in every transcript. Its lists keep ``MAX_FIELD_ITEMS`` items, its texts are cut.

B4. The local policy called an environment's ``tool_schemas(task)`` as its own code: one that raised made the
rollout a ``policy_error`` (the model's endpoint blamed, nothing naming the hook), one that hung hung the run. It is
called as a hook now: bounded by ``hook_timeout_s``, its failure the rollout's ``simulator_error`` naming
``tool_schemas()``.

B5. tool_call paid a call that undid what the episode did as much as the reference: a transfer out and back, then
the right one, reached the goal with no redundant call. A call bringing the world back to a state the episode was
already in is redundant now, and so is a read repeated in a world brought back.
"""

from __future__ import annotations

import json
import threading

import httpx
import pytest
from typer.testing import CliRunner

from rewardpipe.cli import app
from tests.security.test_round_thirtyone_environments import TASKS, Count, _run

_RELEASE = threading.Event()  # set at the end of the module: no abandoned call outlives the tests for long


@pytest.fixture(scope="module", autouse=True)
def _release_hung_hooks():
    yield
    _RELEASE.set()


def cli(*args):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def tasks_file(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(task.model_dump_json() + "\n" for task in TASKS))
    return path


def _env_file(tmp_path, body):
    path = tmp_path / "user_env.py"
    path.write_text(
        "import threading\n"
        "from tests.security.test_round_thirtyone_environments import Count\n"
        "from tests.security.test_round_thirtytwo_builtins import _RELEASE\n\n" + body
    )
    return path


def _records(out):
    return [json.loads(path.read_text()) for path in sorted(out.glob("runs/*/step=*/group=*/*.json"))]


# -- B1: run --policy scripted asks scenarios() as a hook --------------------------------------------------------


def test_a_hung_scenarios_does_not_hang_the_scripted_runs_check(tmp_path, tasks_file):
    # scenarios() of t6 "hangs" (returns no player, well after hook_timeout_s): the check before the run waited for
    # it, then refused the run as if t6 had no scenario; asked as a hook, the check leaves t6 to its rollouts.
    path = _env_file(
        tmp_path,
        "class Hung(Count):\n"
        "    hook_timeout_s = 0.2\n\n"
        "    def scenarios(self, task):\n"
        "        if task.task_id == 't6':\n"
        "            _RELEASE.wait(8)\n"
        "            return {}\n"
        "        return super().scenarios(task)\n",
    )
    out = tmp_path / "out"
    result = cli("run", "--env", f"{path}:Hung", "--tasks", tasks_file, "--policy", "scripted", "--out", out, "-k", 2)
    assert result.exit_code == 0, result.output
    records = _records(out)
    assert records and {r["task_id"] for r in records if r.get("status") == "scored"} >= {"t3", "t9"}
    assert all("hook_timeout_s" in r["error"]["message"] for r in records if r["task_id"] == "t6")


# -- B2: the text of one source's metrics is bounded in total ----------------------------------------------------


def test_a_flood_of_long_text_metrics_keeps_a_bounded_record():
    class Wordy(Count):
        def metrics(self, state, task):
            return {"first": 1, **{f"m{index}": "x" * 2_200 for index in range(2_048)}}

    records = _run(Wordy())
    assert records and all(record.status == "scored" for record in records)
    for record in records:
        assert record.metrics["first"] == 1
        assert "characters of names and texts" in record.metrics["env_metrics_error"]
        assert len(record.model_dump_json()) < 250_000  # MAX_METRICS_TEXT_CHARS (200,000) and the record's own


def test_metrics_within_the_text_budget_are_all_kept():
    from rewardpipe.models import recordable_metrics

    kept, note = recordable_metrics({f"m{index}": "y" * 50 for index in range(1_500)}, "metrics()")
    assert note is None and len(kept) == 1_500


# -- B3: what transcript_fields() gives is bounded ------------------------------------------------------------


def test_transcript_fields_of_a_user_environment_are_bounded():
    from rewardpipe.episode import start_episode
    from rewardpipe.models import MAX_METRIC_TEXT_CHARS
    from rewardpipe.transcripts import transcript_of_episode

    class Echoing(Count):
        def transcript_fields(self, state, task):
            return {
                "turn_kinds": ["k" * 5_000] * 200_000,
                "revealed": [{"index": index, "text": "r" * 50_000} for index in range(3_000)],
                "executed_code": "c" * 5_000_000,
            }

    env = Echoing()
    state = start_episode(TASKS[0], env=env, run_id="r", step=0, group_id="g", rollout_id="x")
    transcript = transcript_of_episode(state, TASKS[0], env=env)
    assert 0 < len(transcript.turn_kinds) <= 1_000  # MAX_FIELD_ITEMS
    assert all(len(kind) <= MAX_METRIC_TEXT_CHARS for kind in transcript.turn_kinds)
    assert 0 < len(transcript.revealed) <= 1_000
    assert all(len(item.text) <= MAX_METRIC_TEXT_CHARS for item in transcript.revealed)
    code = transcript.executed_code
    assert code.startswith("ccc") and len(code) <= 200_000  # MAX_FIELD_CODE_CHARS
    assert "5,000,000 characters" in code


def test_transcript_fields_within_the_bounds_are_kept_as_given():
    from rewardpipe.episode import start_episode
    from rewardpipe.transcripts import transcript_of_episode

    class Plain(Count):
        def transcript_fields(self, state, task):
            return {"turn_kinds": ["guess", "hint"], "revealed": [{"index": 0, "text": "odd", "turn": 0}]}

    env = Plain()
    state = start_episode(TASKS[0], env=env, run_id="r", step=0, group_id="g", rollout_id="x")
    transcript = transcript_of_episode(state, TASKS[0], env=env)
    assert transcript.turn_kinds == ["guess", "hint"] and transcript.revealed[0].text == "odd"
    assert transcript.executed_code is None


# -- B4: tool_schemas is a hook of the environment's ---------------------------------------------------------------


def _model_answers(monkeypatch, text="3"):
    """The run's model endpoint, answering ``text`` to every request: the requests' bodies, as they come."""
    from rewardpipe.cli import run_cmd
    from rewardpipe.openai_client import ChatClient

    bodies = []

    def handler(request):
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json={"choices": [{"message": {"role": "assistant", "content": text}}]})

    monkeypatch.setattr(
        run_cmd,
        "_chat_client",
        lambda base_url, model, timeout, retries: ChatClient(
            base_url, model, transport=httpx.MockTransport(handler), max_retries=0
        ),
    )
    return bodies


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ("    def tool_schemas(self, task):\n        raise KeyError('secret')\n", "tool_schemas() raised KeyError"),
        (
            "    hook_timeout_s = 0.2\n\n"
            "    def tool_schemas(self, task):\n        _RELEASE.wait(8)\n        return []\n",
            "hook_timeout_s",
        ),
    ],
    ids=["raises", "hangs"],
)
def test_a_failing_tool_schemas_is_the_environments_error_naming_it(tmp_path, tasks_file, monkeypatch, body, named):
    _model_answers(monkeypatch)
    path = _env_file(tmp_path, "class Tools(Count):\n" + body)
    out = tmp_path / "out"
    result = cli(
        "run", "--env", f"{path}:Tools", "--tasks", tasks_file, "--policy", "openai",
        "--base-url", "http://model.invalid/v1", "--model", "m",
        "--out", out, "-k", 1, "--groups-per-step", 1,
    )  # fmt: skip
    records = _records(out)
    assert records, result.output
    for record in records:
        assert record["status"] == "error"
        assert record["error"]["kind"] == "simulator_error"
        assert named in record["error"]["message"]
        assert "tool_schemas" in record["error"]["message"]


def test_tool_schemas_given_are_offered_to_the_model(tmp_path, tasks_file, monkeypatch):
    bodies = _model_answers(monkeypatch)
    path = _env_file(
        tmp_path,
        "class Tools(Count):\n"
        "    def tool_schemas(self, task):\n"
        "        return [{'type': 'function', 'function': {'name': 'peek', 'parameters': {'type': 'object'}}}]\n",
    )
    result = cli(
        "run", "--env", f"{path}:Tools", "--tasks", tasks_file, "--policy", "openai",
        "--base-url", "http://model.invalid/v1", "--model", "m",
        "--out", tmp_path / "out", "-k", 1, "--groups-per-step", 1,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert bodies and all(body["tools"][0]["function"]["name"] == "peek" for body in bodies)


# -- B5: tool_call, a call that undoes what the episode did is redundant -----------------------------------------


def _tool_call_task(task_id):
    from rewardpipe.envs.tool_call.tasks import BUNDLED_TASKS, ToolCallTask

    rows = [json.loads(line) for line in BUNDLED_TASKS.read_text().splitlines() if line.strip()]
    return ToolCallTask.model_validate(next(row for row in rows if row["task_id"] == task_id))


def _calls(*calls):
    from rewardpipe.models import Message

    return Message(
        role="assistant",
        content="",
        tool_calls=[
            {"id": f"c{index}", "type": "function", "function": {"name": name, "arguments": arguments}}
            for index, (name, arguments) in enumerate(calls)
        ],
    )


def _tool_call_record(task_id, turns):
    from rewardpipe import ScriptedPolicy
    from rewardpipe.envs.tool_call.environment import ToolCallEnvironment
    from rewardpipe.episode import run_episode

    return run_episode(
        _tool_call_task(task_id), ScriptedPolicy(turns), ToolCallEnvironment(), None, run_id="r", step=0,
        group_id="g", rollout_id="x",
    )  # fmt: skip


def _move(source, target, amount=5000):
    return ("transfer", {"source": source, "target": target, "amount_cents": amount})


@pytest.mark.parametrize(
    ("turns", "redundant"),
    [
        # out, back, out again: the world the reference reaches, after two calls that did nothing overall
        ([_calls(_move("savings", "checking"), _move("checking", "savings"), _move("savings", "checking"))], 2),
        # the same, one call a turn
        (
            [
                _calls(_move("savings", "checking")),
                _calls(_move("checking", "savings")),
                _calls(_move("savings", "checking")),
            ],
            2,
        ),
        # a detour through another account and back: the last call brings back the world of the first
        (
            [
                _calls(_move("savings", "checking")),
                _calls(_move("checking", "supplier")),
                _calls(_move("supplier", "checking")),
            ],
            1,
        ),
    ],
    ids=["one turn", "a call a turn", "detour"],
)
def test_calls_that_undo_what_the_episode_did_are_redundant_though_the_goal_is_reached(turns, redundant):
    record = _tool_call_record("tc-002-move-savings", [*turns, "<answer>done</answer>"])
    assert record.status == "scored", record.error
    assert record.components["goal_reached"] == 1.0
    assert record.components["redundant_calls"] == pytest.approx(-0.25 * redundant)
    assert record.metrics["redundant_calls"] == redundant


def test_a_read_repeated_in_a_world_brought_back_is_redundant():
    read = ("get_balance", {"account": "savings"})
    turns = [_calls(read), _calls(_move("savings", "supplier")), _calls(_move("supplier", "savings")), _calls(read)]
    record = _tool_call_record(
        "tc-002-move-savings", [*turns, _calls(_move("savings", "checking")), "<answer>x</answer>"]
    )
    assert record.components["goal_reached"] == 1.0
    assert record.metrics["redundant_calls"] == 2  # the move back, and the read in the world it brought back


def test_the_reference_and_changes_that_build_on_each_other_are_not_redundant():
    # two transfers of the same amount, each doing something; then the reference itself
    twice = [_calls(_move("savings", "checking", 2500)), _calls(_move("savings", "checking", 2500))]
    record = _tool_call_record("tc-002-move-savings", [*twice, "<answer>done</answer>"])
    assert record.components["goal_reached"] == 1.0 and record.components["redundant_calls"] == 0.0
    reference = [_calls(("get_balance", {"account": "savings"}), _move("savings", "checking")), "<answer>ok</answer>"]
    record = _tool_call_record("tc-002-move-savings", reference)
    assert record.components["redundant_calls"] == 0.0 and record.aggregate == pytest.approx(1.3)


def test_a_state_stored_before_worlds_were_kept_still_finds_repeated_reads():
    from rewardpipe.envs.tool_call.environment import ToolCallEnvironment
    from rewardpipe.episode import apply_env_turn, apply_policy_turn, start_episode

    env, task = ToolCallEnvironment(), _tool_call_task("tc-002-move-savings")
    read = _calls(("get_balance", {"account": "savings"}))
    state = start_episode(task, env=env, run_id="r", step=0, group_id="g", rollout_id="x")
    state = apply_env_turn(apply_policy_turn(state, read, env, task), task, env)
    old = type(state).model_validate({**state.model_dump(), "worlds_seen": []})  # a snapshot of before
    state = apply_env_turn(apply_policy_turn(old, read, env, task), task, env)
    assert [call.redundant for call in state.calls] == [False, True]


def test_well_formed_calls_past_the_ones_a_turn_runs_count_against_valid_calls_as_the_docs_say():
    read = ("get_balance", {"account": "savings"})
    reads = [("get_balance", {"account": name}) for name in ("checking", "operating", "supplier")] * 3
    record = _tool_call_record("tc-002-move-savings", [_calls(read, *reads), "<answer>x</answer>"])
    assert record.components["valid_calls"] == pytest.approx(1 / (1 + 2))  # calls 9 and 10 were not run
