"""Round twenty-six on the reward side: environments, the episode loop, the monitor's alarms and the report.

R1. An environment's ``execution_job`` that returned something other than an ``ExecutionJob`` (a dict, the code
as text) ended the whole ``rewardpipe run`` (``AttributeError: 'dict' object has no attribute 'code'`` while its
transcript was written); without a transcript the runner handed it to the sandbox and charged the failure to the
executor (``executor_crash``, "'dict' object has no attribute 'trust_mode'"), and ``score_episodes`` (``rewardpipe
score``, the TRL episodes) scored the episode as if nothing had been executed: a score of 0. It is the
environment's ``simulator_error``, naming the hook and what it returned, on every path.

R2. ``transcript_fields()`` was called directly, not as the other hooks are: one calling ``sys.exit()`` ended the
run silently with its exit status (the docs promise a hook's ``sys.exit()`` is never the end of the run), and a
hung one was never bounded by ``hook_timeout_s``. Its failures now leave the extra fields out, as its exceptions
did.

R3. An end reason holding a lone surrogate (an environment quoting the model's turn, ``end_reason=f"gave up:
{text[:20]}"``, where a replayed turn carries one) made the record and the transcript unwritable: ``rewardpipe
run`` stopped with "this is a rewardpipe bug". An end reason is kept with its lone surrogates replaced.

R4. ``start()`` was not held to the step contract: one leaving ``next_action`` ``score`` or ``execute`` had its
episode scored although the model never spoke (a score for no answer), and one leaving a non-text ``end_reason``
ended the whole run while the rollout's transcript was written. Both are the rollout's ``simulator_error`` naming
``start()``; and ``run_episode``, which promises an error record for every failure, let a raising ``start()``
through.

R5. The report's example transcripts dropped an assistant turn's tool calls (and a tool message's call id and
name): for the ``tool_call`` environment, or any model served with a tool parser, the alarm's examples showed the
model's turns as empty. They are shown (escaped and cut as the text is).

R6. A dead component weighted 0 in the records was alarmed with advice to lower its weight ("consider lowering its
weight", a ``saturation`` diagnosis: "its weight 0 only lifts every reward by the same amount"). Its alarm says its
weight is 0, so it moves no reward.

R7. The terminal's alarm lines (``ConsoleAlarmSink``) escaped Rich markup only: an example's reason quotes the
executor's (the model's program's output), so its ANSI and OSC sequences and bidi overrides reached the terminal.
Every text is shown with its control and format characters as visible escapes.
"""

from __future__ import annotations

import threading

import pytest

from rewardpipe import Environment, Reward, TaskRow, component
from rewardpipe.episode import run_episode
from rewardpipe.execution.result import ExecutionJob
from rewardpipe.models import Message
from rewardpipe.runner import NoSandbox, plan_step, run_slots, score_episodes
from rewardpipe.store import open_store


@component(range=(0, 1), role="outcome")
def ran(messages, execution) -> float:
    return float(execution is not None)


class Odd(TaskRow):
    mode: str = ""  # what this task's rollouts do wrong ("" for nothing)


class Buggy(Environment):
    """One model turn, then the episode ends; a task's ``mode`` names the bug its rollouts meet."""

    name = "buggy"
    version = "1"
    task_model = Odd
    max_turns = 2
    reward = Reward("buggy", [ran])

    def start(self, task):
        state = super().start(task)
        if task.mode in ("score", "execute"):
            return state.evolve(next_action=task.mode)
        if task.mode == "end_reason_int":
            return state.evolve(end_reason=5)
        return state

    def on_policy_turn(self, state, task, text):
        if task.mode == "surrogate_end":
            return state.evolve(next_action="score", end_reason="gave up: " + text[:20])
        return state.evolve(next_action="execute" if task.mode.startswith("job_") else "score")

    def execution_job(self, state, task):
        if task.mode == "job_dict":
            return {"code": "x = 1", "tests": ""}
        if task.mode == "job_text":
            return "x = 1"
        return None

    def transcript_fields(self, state, task):
        if task.mode == "exit_in_fields":
            raise SystemExit(3)
        return {"turn_kinds": ["other"] * state.assistant_turns}


class Says:
    """A policy that says ``text`` every turn."""

    def __init__(self, text: str = "hello") -> None:
        self.text = text

    def next_turn(self, state, task):
        return self.text


class Refuses:
    """An executor that must never be reached."""

    def run(self, job):
        raise AssertionError(f"a non-job reached the sandbox: {job!r}")

    def run_batch(self, jobs, workers=None):
        raise AssertionError(f"a non-job reached the sandbox: {jobs!r}")


def run_modes(*modes: str, policy=None, env=None, executor=None):
    """Each mode's task in a group of two, with a healthy task beside them; the records by task, the transcripts."""
    tasks = [Odd(task_id="fine", prompt="p"), *(Odd(task_id=mode, prompt="p", mode=mode) for mode in modes)]
    transcripts = []
    records = run_slots(
        plan_step(tasks, 0, len(tasks), 2),
        policy=policy or Says(),
        env=env or Buggy(),
        executor=executor or Refuses(),
        run_id="run",
        on_transcript=transcripts.append,
    )
    by_task: dict[str, list] = {}
    for record in records:
        by_task.setdefault(record.task_id, []).append(record)
    return by_task, transcripts


def assert_fine_scored(by_task) -> None:
    assert [r.status for r in by_task["fine"]] == ["scored", "scored"]


# --- R1: an execution_job that is not a job -------------------------------------------------------------------


@pytest.mark.parametrize(("mode", "kind"), [("job_dict", "dict"), ("job_text", "str")])
def test_an_execution_job_that_is_not_a_job_is_the_environments_error_in_a_run(mode, kind):
    by_task, transcripts = run_modes(mode)
    assert_fine_scored(by_task)
    for record in by_task[mode]:
        assert record.status == "error" and record.error.kind == "simulator_error"
        assert f"execution_job() returned {kind}, not an ExecutionJob" in record.error.message
        assert record.aggregate is None and record.components == {"ran": None}  # never a 0
    assert len(transcripts) == 4  # every rollout's transcript was written, the run went on


@pytest.mark.parametrize(("mode", "kind"), [("job_dict", "dict"), ("job_text", "str")])
def test_an_execution_job_that_is_not_a_job_is_never_scored_as_not_executed(mode, kind):
    from rewardpipe.episode import apply_policy_turn, start_episode

    env, task = Buggy(), Odd(task_id="t", prompt="p", mode=mode)
    state = start_episode(task, env=env, run_id="run", step=0, group_id="g", rollout_id="r")
    state = apply_policy_turn(state, "hello", env, task)
    [(record, execution)] = score_episodes([(state, task)], executor=Refuses(), env=env)
    assert execution is None
    assert record.status == "error" and record.error.kind == "simulator_error"
    assert f"execution_job() returned {kind}, not an ExecutionJob" in record.error.message

    record = run_episode(task, Says(), env, Refuses(), run_id="run", step=0, group_id="g", rollout_id="r")
    assert record.status == "error" and record.error.kind == "simulator_error"


def test_a_real_job_still_reaches_the_sandbox():
    class Runs(Buggy):
        def execution_job(self, state, task):
            return ExecutionJob(code="x = 1", tests="", entry_point="x", tests_format="check")

    class Executes:
        def __init__(self) -> None:
            self.jobs: list = []

        def run(self, job):
            from rewardpipe.execution.result import ExecutionResult, ExecutionStatus

            self.jobs.append(job)
            return ExecutionResult(status=ExecutionStatus.PASSED, passed=1, total=1)

    executor = Executes()
    by_task, _ = run_modes("job_real", env=Runs(), executor=executor)
    assert [r.components for r in by_task["job_real"]] == [{"ran": 1.0}] * 2
    assert len(executor.jobs) == 2


# --- R2: transcript_fields() called as a hook --------------------------------------------------------------------


def test_a_transcript_fields_hook_calling_sys_exit_is_not_the_end_of_the_run():
    by_task, transcripts = run_modes("exit_in_fields")
    assert_fine_scored(by_task)
    assert [r.status for r in by_task["exit_in_fields"]] == ["scored", "scored"]  # its score stands
    kinds = {t.rollout_id: t.turn_kinds for t in transcripts}
    assert sorted(map(len, kinds.values())) == [0, 0, 1, 1]  # the fields of the exiting hook are left out


def test_a_hung_transcript_fields_hook_is_bounded_by_hook_timeout():
    release = threading.Event()

    class Hangs(Buggy):
        hook_timeout_s = 0.2

        def transcript_fields(self, state, task):
            if task.mode == "hang":
                release.wait(10)  # unbounded, it returned its fields late; abandoned, they are left out
            return super().transcript_fields(state, task)

    try:
        by_task, transcripts = run_modes("hang", env=Hangs())
    finally:
        release.set()
    assert_fine_scored(by_task)
    assert [r.status for r in by_task["hang"]] == ["scored", "scored"]
    kinds = {t.task_id: t.turn_kinds for t in transcripts}
    assert kinds == {"fine": ["other"], "hang": []}


# --- R3: an end reason quoting the model ---------------------------------------------------------------------------


def test_an_end_reason_quoting_a_lone_surrogate_is_stored(tmp_path):
    by_task, transcripts = run_modes("surrogate_end", policy=Says("a\ud800b"))
    store = open_store(str(tmp_path))
    for records in by_task.values():
        for record in records:
            store.put_record(record)
    for transcript in transcripts:
        store.put_transcript(transcript)
    [record, _] = by_task["surrogate_end"]
    assert record.status == "scored"
    assert record.metrics["end_reason"] == "gave up: a\ufffdb"
    stored = [t for t in transcripts if t.task_id == "surrogate_end"]
    assert {t.end_reason for t in stored} == {"gave up: a\ufffdb"}
    assert {r.metrics["end_reason"] for r in store.iter_records("run")} >= {"gave up: a\ufffdb"}


# --- R4: start() held to the step contract ----------------------------------------------------------------------


@pytest.mark.parametrize("action", ["score", "execute"])
def test_a_start_that_ends_the_episode_before_the_model_spoke_is_an_error_not_a_score(action):
    by_task, transcripts = run_modes(action)
    assert_fine_scored(by_task)
    for record in by_task[action]:
        assert record.status == "error" and record.error.kind == "simulator_error"
        assert f"start() left next_action '{action}'" in record.error.message
        assert record.aggregate is None
    assert len(transcripts) == 2  # the healthy task's; a rollout that never started has none, as before


def test_a_start_leaving_a_non_text_end_reason_is_its_rollouts_error():
    by_task, _ = run_modes("end_reason_int")
    assert_fine_scored(by_task)
    for record in by_task["end_reason_int"]:
        assert record.status == "error" and record.error.kind == "simulator_error"
        assert "start() left end_reason a int" in record.error.message


def test_run_episode_makes_a_raising_start_an_error_record():
    class Raises(Buggy):
        def start(self, task):
            raise KeyError("the environment's own bug")

    record = run_episode(
        Odd(task_id="t", prompt="p"), Says(), Raises(), NoSandbox(), run_id="run", step=0, group_id="g", rollout_id="r"
    )
    assert record.status == "error" and record.error.kind == "simulator_error"
    assert "KeyError" in record.error.message and record.aggregate is None


# --- R5: tool calls in the report's example transcripts ---------------------------------------------------------


def store_transcript(store, messages: list[Message]) -> str:
    """The key of a transcript of ``messages`` written to ``store``."""
    from rewardpipe.transcripts import RolloutTranscript, Verdict

    ids = {"run_id": "run", "step": 0, "group_id": "g", "rollout_id": "r", "task_id": "t"}
    return store.put_transcript(RolloutTranscript(**ids, messages=messages, verdict=Verdict(status="x")))


def test_the_reports_example_transcripts_show_tool_calls_inert(tmp_path):
    from rewardpipe.monitoring.html import _transcript
    from rewardpipe.monitoring.report import MESSAGE_CHARS, attach_transcripts

    hostile = "<script>alert(1)</script>\u202e\x1b[31m"
    call = {
        "id": "call<1>",
        "type": "function",
        "function": {"name": "transfer" + hostile, "arguments": '{"amount": "' + "9" * (MESSAGE_CHARS * 3) + '"}'},
    }
    messages = [
        Message(role="user", content="move the money"),
        Message(role="assistant", content="", tool_calls=[call]),
        Message(role="tool", content="{}", tool_call_id="call<1>", name="transfer" + hostile),
    ]
    store = open_store(str(tmp_path))
    key = store_transcript(store, messages)
    report = {"alarms": [{"examples": [{"rollout_id": "r", "group_id": "g", "step": 0, "transcript_key": key}]}]}
    attach_transcripts(report, store)
    shown = report["alarms"][0]["examples"][0]["transcript"]["messages"]
    assert shown[1]["tool_calls"][0]["function"]["name"] == "transfer" + hostile
    assert len(shown[1]["tool_calls"][0]["function"]["arguments"]) < MESSAGE_CHARS + 100  # cut as text is
    assert shown[2]["tool_call_id"] == "call<1>" and shown[2]["name"] == "transfer" + hostile
    page = _transcript(report["alarms"][0]["examples"][0])
    assert "transfer&lt;script&gt;" in page and "<script>" not in page
    assert "\u202e" not in page and "\x1b" not in page
    assert "amount" in page and "call&lt;1&gt;" in page
    assert "9" * (MESSAGE_CHARS + 1) not in page


def test_a_transcript_without_tool_calls_is_compacted_as_before(tmp_path):
    from rewardpipe.monitoring.report import attach_transcripts

    store = open_store(str(tmp_path))
    key = store_transcript(store, [Message(role="user", content="q"), Message(role="assistant", content="a")])
    report = {"alarms": [{"examples": [{"transcript_key": key}]}]}
    attach_transcripts(report, store)
    assert report["alarms"][0]["examples"][0]["transcript"]["messages"] == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
    ]


# --- R6: a dead component of weight 0 ------------------------------------------------------------------------------


def weighted_records(c_weight: float, value_of=lambda group, k: 1.0) -> list[dict]:
    """``c`` constant inside every group (``value_of``), ``correctness`` varying; ``c`` weighted ``c_weight``."""
    out = []
    for step in range(2):
        for group in range(8):
            for k in range(4):
                right, c = float(k % 2), value_of(group, k)
                out.append(
                    {
                        "schema": "rewardpipe.record/v1",
                        "run_id": "r",
                        "step": step,
                        "group_id": f"s{step}g{group}",
                        "rollout_id": f"s{step}g{group}k{k}",
                        "task_id": f"t{group}",
                        "status": "scored",
                        "error": None,
                        "components": {"c": c, "correctness": right},
                        "weights": {"c": c_weight, "correctness": 1.0},
                        "aggregate": c_weight * c + right,
                        "metrics": {},
                    }
                )
    return out


@pytest.mark.parametrize("value_of", [lambda group, k: 1.0, lambda group, k: float(group % 2)])
def test_a_dead_component_of_weight_0_says_it_moves_no_reward(value_of):
    from rewardpipe.monitoring import Thresholds, monitor_records

    th = Thresholds(ranges={"c": (0.0, 1.0), "correctness": (0.0, 1.0)})
    result = monitor_records(weighted_records(0.0, value_of), th).to_dict()
    judged = result["steps"][0]["components"]["c"]
    assert judged["verdict"] == "dead"  # still judged and alarmed: its signal is gone, whatever its weight
    assert "its weight is 0" in judged["message"] and "lowering its weight" not in judged["message"]
    for diagnosis in result["steps"][0]["diagnoses"]:
        assert "lower the weight" not in diagnosis["message"] and "lifts every reward" not in diagnosis["message"]
    [alarm] = [a for a in result["alarms"] if a["component"] == "c"]
    assert "its weight is 0" in alarm["message"]

    weighted = monitor_records(weighted_records(0.5, value_of), th).to_dict()["steps"][0]["components"]["c"]
    assert weighted["verdict"] == "dead" and "its weight is 0" not in weighted["message"]


# --- R7: the terminal's alarm lines ------------------------------------------------------------------------------


def test_the_terminal_alarm_sink_shows_control_and_bidi_characters_as_escapes():
    import io

    from rich.console import Console

    from rewardpipe.monitoring.alarms import Alarm
    from rewardpipe.monitoring.sinks import ConsoleAlarmSink

    hostile = "\x1b[2J\x1b]0;pwned\x07\x1b]8;;http://x\x07link\u202e\r"
    alarm = Alarm(
        kind="dead_component",
        cause="constant_at_minimum",
        component="c" + hostile,
        step=1,
        message="m" + hostile,
        run_id="run",
        causes=[{"cause": "saturation" + hostile, "message": "y" + hostile}],
        examples=[
            {
                "rollout_id": "r" + hostile,
                "group_id": "g" + hostile,
                "reason": "code ran and failed: " + hostile,  # the executor's reason: the program's output
                "transcript_key": "k" + hostile,
            }
        ],
    )
    out = io.StringIO()
    ConsoleAlarmSink(Console(file=out, force_terminal=True, width=400)).emit(alarm)
    shown = out.getvalue()
    for char in ("\x07", "\u202e", "\r", "]0;", "[2J"):
        assert char not in shown.replace("\\x1b]0;", "").replace("\\x1b[2J", ""), repr(char)
    assert shown.count("\\x1b[2J") == 8  # each field shows the escape, visibly
    assert "\\u202e" in shown
