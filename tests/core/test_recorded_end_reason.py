"""A recording may say how its conversation ended, where the messages cannot (round nineteen).

``score`` replays a recording through its environment; a conversation the policy model's context window or the
trainer's token budget cut off looks, message by message, like one whose model simply stopped. Records of such
recordings said ``policy_exhausted`` where ``run`` had said ``context_limit``: a different record for the same
rollout. A rollout line (and the transcripts ``run`` writes, through ``to_rollout``) may carry ``end_reason``; it
is kept where the environment's replay names no end of its own, and never overrides one it does name.
"""

import json

import pytest
from pydantic import ValidationError

from rewardpipe.envs.ask_before_coding.environment import ENVIRONMENT as ENV
from rewardpipe.models import Rollout
from rewardpipe.runner import score_rollouts
from tests.core.conftest import ADD_SOLUTION, FakeExecutor, make_task, passes_only_reference

TASK = make_task()
QUESTION = {"role": "assistant", "content": "Should negative numbers be supported?"}
ANSWER = {"role": "user", "content": "Yes: negative numbers are allowed and added normally."}


def _rollout(messages, **fields) -> Rollout:
    return Rollout(rollout_id="r", group_id="g", task_id=TASK.task_id, messages=messages, **fields)


def _scored(rollout: Rollout):
    (record,) = score_rollouts(
        [rollout], {TASK.task_id: TASK}, executor=FakeExecutor(passes_only_reference), env=ENV, run_id="s"
    )
    return record


@pytest.mark.parametrize("declared", ["context_limit", "completion_budget", "turn_limit"])
def test_a_declared_end_reason_is_the_records_where_the_replay_names_none(declared):
    record = _scored(_rollout([QUESTION, ANSWER], end_reason=declared))
    assert record.status == "scored" and record.metrics["end_reason"] == declared
    assert _scored(_rollout([QUESTION, ANSWER])).metrics["end_reason"] == "policy_exhausted"  # saying nothing


def test_a_declared_end_reason_never_overrides_the_environments_own_reading():
    commit = {"role": "assistant", "content": f"```python\n{ADD_SOLUTION}\n```"}
    record = _scored(_rollout([QUESTION, ANSWER, commit], end_reason="context_limit"))
    assert record.status == "scored" and record.metrics["end_reason"] == "committed"


@pytest.mark.parametrize("bad", ["", "a b", "x\x1b[2J", "line\nbreak", "é", "a" * 65, 3])
def test_an_end_reason_that_is_not_a_name_is_refused_naming_the_field(bad):
    with pytest.raises(ValidationError) as raised:
        _rollout([QUESTION], end_reason=bad)
    assert "end_reason" in str(raised.value)


def test_score_reads_the_end_reason_of_each_line_and_skips_a_bad_one(tmp_path):
    from typer.testing import CliRunner

    from rewardpipe.cli import app

    tasks, rollouts, store = tmp_path / "tasks.jsonl", tmp_path / "rollouts.jsonl", tmp_path / "store"
    tasks.write_text(json.dumps(TASK.model_dump(mode="json")) + "\n")
    good = _rollout([QUESTION, ANSWER], end_reason="context_limit").model_dump(mode="json")
    bad = {**good, "rollout_id": "r2", "end_reason": "\x1b]0;pwned\x07"}
    rollouts.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    result = CliRunner().invoke(app, ["score", str(rollouts), "--tasks", str(tasks), "--out", str(store)])
    assert result.exit_code == 1, result.output
    assert "end_reason" in result.output and "\x1b" not in result.output
    (path,) = [path for path in (store / "runs").rglob("step=*/group=*/*.json") if "transcripts" not in path.parts]
    assert json.loads(path.read_text())["metrics"]["end_reason"] == "context_limit"
