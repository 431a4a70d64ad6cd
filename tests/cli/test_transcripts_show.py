"""Transcripts beside the records (run and score write one per rollout) and `rewardpipe show` printing one,
with hostile model text kept inert."""

import json

from rewardpipe.models import Message
from rewardpipe.store import LocalStore, transcript_key
from rewardpipe.transcripts import RolloutTranscript, Verdict
from tests.cli.conftest import BUNDLED_TASKS, make_task, write_jsonl


def _run(cli, tmp_path, run_id="r1", steps=1):
    out = tmp_path / "store"
    result = cli(
        "run",
        "--tasks",
        BUNDLED_TASKS,
        "--policy",
        "scripted",
        "--group-size",
        "4",
        "--steps",
        steps,
        "--groups-per-step",
        "2",
        "--out",
        out,
        "--run-id",
        run_id,
    )
    assert result.exit_code == 0, result.output
    return LocalStore(out)


def test_run_writes_one_transcript_per_record_with_the_evidence(cli, tmp_path):
    store = _run(cli, tmp_path)
    records = list(store.iter_records("r1"))
    assert len(records) == 8
    for record in records:
        transcript = store.get_transcript(transcript_key("r1", record.step, record.group_id, record.rollout_id))
        assert (transcript.task_id, transcript.components, transcript.aggregate) == (
            record.task_id,
            record.components,
            record.aggregate,
        )
        assert transcript.messages[0].role == "user"
        assert len(transcript.revealed) == record.metrics["spec_revealed"]
        for item in transcript.revealed:  # each reveal names the reply that stated it
            replies = [m for m in transcript.messages[1:] if m.role == "user"]
            assert replies[item.turn].content == item.text
        if record.metrics["committed"]:
            assert transcript.executed_code and transcript.verdict.status in ("passed", "failed")
            assert transcript.verdict.passed == record.metrics["tests_passed"]
        else:
            assert transcript.executed_code is None and transcript.verdict.status == "not_executed"
    # Transcripts never show up as records.
    assert not store.bad_objects


def test_score_writes_transcripts_with_reveals_read_from_the_replies(cli, tmp_path):
    task = make_task()
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [task])
    rollout = {
        "rollout_id": "x",
        "group_id": "g",
        "task_id": "add",
        "messages": [
            {"role": "user", "content": task["prompt"]},
            {"role": "assistant", "content": "Are negative numbers allowed?"},
            {"role": "user", "content": "Negative numbers are allowed."},
            {"role": "assistant", "content": "```python\ndef add(a, b):\n    return a + b\n```"},
        ],
    }
    rollouts = write_jsonl(tmp_path / "rollouts.jsonl", [rollout])
    out = tmp_path / "store"
    assert cli("score", rollouts, "--tasks", tasks, "--out", out, "--run-id", "s").exit_code == 0
    transcript = LocalStore(out).get_transcript(transcript_key("s", 0, "g", "x"))
    assert [(i.index, i.turn) for i in transcript.revealed] == [(1, 0)]
    assert transcript.executed_code.startswith("def add") and transcript.verdict.status == "passed"
    assert transcript.components["asked_before_coding"] == 1.0


HOSTILE = (
    "\x1b[2J\x1b[31mPWNED\x1b[0m [bold red]fake alarm[/] [link=http://evil]x[/link]\roverwrite \u202eevil\u202c \x07"
)


def _hostile_store(tmp_path, steps=(0,)):
    store = LocalStore(tmp_path / "store")
    for step in steps:
        store.put_transcript(
            RolloutTranscript(
                run_id="r",
                step=step,
                group_id="g[red]",
                rollout_id="x",
                task_id="t",
                messages=[Message(role="user", content="Write f."), Message(role="assistant", content=HOSTILE)],
                turn_kinds=["other"],
                executed_code="print('\x1b[31m')  # [red]",
                verdict=Verdict(status="failed", reason="AssertionError: " + HOSTILE),
                components={"c": 0.0},
                aggregate=0.0,
            )
        )
    return store


def test_show_prints_a_transcript_with_hostile_text_inert(cli, tmp_path):
    _hostile_store(tmp_path)
    result = cli("show", tmp_path / "store", "--run-id", "r", "--rollout", "x")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "\x1b" not in out and "\r" not in out and "\u202e" not in out and "\x07" not in out
    assert "\\x1b[31mPWNED" in out and "\\u202e" in out  # shown as visible escapes
    assert "[bold red]fake alarm[/]" in out  # markup printed literally, not interpreted
    assert "verdict:" in out and "failed" in out and "aggregate" in out


def test_show_json_is_valid_and_escapes_control_characters(cli, tmp_path):
    _hostile_store(tmp_path)
    result = cli("show", tmp_path / "store", "--run-id", "r", "--rollout", "x", "--json")
    assert "\x1b" not in result.output and "\u202e" not in result.output
    assert json.loads(result.output)["messages"][1]["content"] == HOSTILE


def test_show_asks_for_the_step_when_a_rollout_id_repeats_and_names_a_missing_one(cli, tmp_path):
    _hostile_store(tmp_path, steps=(0, 3))
    ambiguous = cli("show", tmp_path / "store", "--run-id", "r", "--rollout", "x")
    assert ambiguous.exit_code == 1 and "--step" in ambiguous.output
    assert cli("show", tmp_path / "store", "--run-id", "r", "--rollout", "x", "--step", "3").exit_code == 0
    missing = cli("show", tmp_path / "store", "--run-id", "r", "--rollout", "nope")
    assert missing.exit_code == 1 and "no transcript of rollout 'nope'" in missing.output


def test_show_by_transcript_key(cli, tmp_path):
    _hostile_store(tmp_path)
    key = transcript_key("r", 0, "g[red]", "x")
    assert cli("show", tmp_path / "store", "--run-id", "r", "--key", key).exit_code == 0


def test_a_failed_rollout_still_leaves_its_transcript():
    from rewardpipe.envs.ask_before_coding.environment import ENVIRONMENT
    from rewardpipe.models import load_tasks
    from rewardpipe.rewards import get_reward
    from rewardpipe.runner import plan_step, run_slots

    class FailsOnSecondTurn:
        def next_turn(self, state, task):
            if state.assistant_turns:
                raise ConnectionError("policy endpoint down")
            return "Are there any other requirements?"

    class NoExecutor:
        def run_batch(self, jobs, workers=None):
            raise AssertionError("nothing was committed")

    task = load_tasks(BUNDLED_TASKS)[0]
    kept = []
    records = run_slots(
        plan_step([task], 0, 1, 2),
        policy=FailsOnSecondTurn(),
        env=ENVIRONMENT,
        executor=NoExecutor(),
        reward=get_reward("ask_before_coding"),
        run_id="r",
        max_turns=4,
        on_transcript=kept.append,
    )
    assert [r.status for r in records] == ["error", "error"]
    assert len(kept) == 2
    for transcript in kept:
        assert transcript.status == "error" and transcript.error.kind == "policy_error"
        assert transcript.verdict.status == "error" and "policy endpoint down" in transcript.verdict.reason
        assert [item.turn for item in transcript.revealed] == [0]  # the turns so far are kept
        assert transcript.components == {name: None for name in transcript.components}
