"""Round thirty-seven (second wave), AWS: where moto is not AWS, for the Nova bridge.

moto never runs an S3 lifecycle rule, so every bookkeeping object the bridge wrote stayed forever in the tests,
while the deployed bucket expires ``nova/`` after ``bookkeeping_days`` (3 by default). The bridge numbered a
sample's training rounds by counting its markers under ``nova/rounds/``: once the oldest ones expired, a later
round counted fewer, took an earlier round's step, and so that round's execution name. With that round's request
entry still there (younger than the rule), the new request was taken for a redelivery of it and dropped: no
rollout, no answer, and Nova fails the training job at ``rollout.timeout``. Had it started, its record would have
gone under the earlier step (read as a re-run of that rollout) and its neutral error answer would have averaged
the earlier round's group scores. The harness now expires objects as the template's lifecycle rules say
(:meth:`tests.aws.harness.Deployment.expire_objects`).
"""

from __future__ import annotations

import datetime as dt
import time

import pytest

from rewardpipe.integrations.nova.trainer_sim import scripted_turns
from tests.integrations.nova.test_nova_e2e import RUN_ID, TASKS, nova  # noqa: F401 - the deployed bridge fixture

pytestmark = pytest.mark.xdist_group("cdk")

DAY_S = 86_400.0


def _play_round(nova, sample_id: str) -> dict:  # noqa: F811 - the fixture's value
    """One training round of ``sample_id``: Nova requests it (at the simulated time) and gets its answer."""
    trainer = nova.trainer
    trainer.responses.pop(sample_id, None)
    trainer.request_rollout(sample_id, {"task_id": TASKS[0].task_id}, timestamp=nova.clock())
    nova.drive(until=lambda: sample_id in trainer.responses, timeout_s=120.0)
    nova.drive(until=lambda: not any(e["status"] == "RUNNING" for e in nova.executions()), bridge_only=True)
    return trainer.responses[sample_id]


def test_a_sample_requested_again_after_its_first_rounds_bookkeeping_expired_is_still_a_new_round(nova):  # noqa: F811
    """Rounds on day 0, 2 and 4: by day 4 S3 has expired what day 0 wrote under the 3-day rule, not what day 2
    wrote. The day-4 request must start its own rollout, answered, recorded under its own step."""
    sample_id = "epoch-000_0"
    nova.scripts[sample_id] = scripted_turns(1, TASKS[0])
    _play_round(nova, sample_id)
    first_round_done = dt.datetime.now(dt.UTC)
    time.sleep(1.5)  # S3 (and moto) keep LastModified to the second: the next round's writes are visibly later
    nova.clock.offset += 2 * DAY_S
    _play_round(nova, sample_id)
    nova.clock.offset += 2 * DAY_S
    # Four days after the first round: whatever it wrote (and nothing rewritten since) is as old as that.
    expired = nova.deployment.expire_objects(first_round_done, age_days=4)
    assert any(key.startswith("nova/") for key in expired)  # the rule is there, and this simulates it
    response = _play_round(nova, sample_id)

    assert response["stop_reason"] == "end_of_conversation"
    assert len(nova.executions()) == 3  # one rollout per round, none taken for another's redelivery
    steps = [step for step in range(3) if any(r.rollout_id == sample_id for r in nova.store.iter_records(RUN_ID, step))]
    assert steps == [0, 1, 2]  # each round under its own step: none read as a re-run of an earlier one
    assert not nova.trainer.duplicate_responses


def test_round_markers_left_under_the_expiring_prefix_by_an_earlier_version_still_count(nova):  # noqa: F811
    """A run that spans the upgrade: the round its sample already had (a marker under ``nova/rounds/``, where the
    bridge kept them before) is counted and copied out of the expiring prefix, so the next round is round 1."""
    import hashlib

    sample_id = "upgrade-000_0"
    nova.scripts[sample_id] = scripted_turns(1, TASKS[0])
    folder = hashlib.sha256(sample_id.encode("utf-8")).hexdigest()[:40]
    nova.store.put_json(f"nova/rounds/{folder}/{'0' * 32}.json", {"sample_id": sample_id})
    _play_round(nova, sample_id)
    assert [r.rollout_id for r in nova.store.iter_records(RUN_ID, 1)] == [sample_id]
    assert len(nova.store.list_keys(f"nova-rounds/{folder}/")) == 2
