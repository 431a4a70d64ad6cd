"""Round thirty-six (fourth wave): :class:`GroupWatch` red-teamed with the values and shapes a reward can hand it.

A verifiers reward function is user code: it can return a 400-digit integer, a value whose weighted sum overflows, or
a rollout's metrics can be missing. One such rollout must be that rollout's error record, never a corrupted group,
a lost step or an exception out of the watch.
"""

from __future__ import annotations

from rewardpipe.integrations.verifiers_watch import GroupWatch
from rewardpipe.models import NOT_A_SCORE_KINDS
from rewardpipe.store import LocalStore

WEIGHTS = {"a": 1.0}


def _pending_ids(watch: GroupWatch) -> list[tuple[str, str]]:
    return [(record["group_id"], record["rollout_id"]) for record in watch._pending]


def test_a_value_past_a_floats_range_is_that_rollouts_error_and_the_groups_stay_apart():
    """It raised OverflowError mid-group: the rollouts before it stayed pending and the next group was filed under
    the same group id, its first rollout's id twice."""
    watch = GroupWatch(groups_per_step=3)
    watch.add_group([{"a": 1.0}, {"a": 10**400}, {"a": 0.0}], WEIGHTS)
    watch.add_group([{"a": 1.0}, {"a": 0.0}], WEIGHTS)
    ids = _pending_ids(watch)
    assert len(ids) == len(set(ids)) == 5 and {group for group, _ in ids} == {"g0", "g1"}
    statuses = [record["status"] for record in watch._pending]
    assert statuses == ["scored", "error", "scored", "scored", "scored"]


def test_a_rollout_whose_metrics_are_no_mapping_is_its_error_record():
    watch = GroupWatch(groups_per_step=2)
    watch.add_group([{"a": 1.0}, None, "text"], WEIGHTS)  # type: ignore[list-item]
    assert [record["status"] for record in watch._pending] == ["scored", "error", "error"]


def test_an_overflowing_weighted_sum_is_an_error_record_and_the_step_is_stored_whole(tmp_path):
    """An aggregate of inf could not be written as JSON, and the first refused record lost every later one."""
    store = LocalStore(tmp_path / "store")
    watch = GroupWatch(groups_per_step=1, run_id="vf", store=store)
    report = watch.add_group([{"a": 1e90}, {"a": 0.0}, {"a": 1.0}], {"a": 1e90})
    assert report is not None and not watch.failures
    records = sorted(store.iter_records("vf"), key=lambda record: record.rollout_id)
    assert [record.status for record in records] == ["error", "scored", "scored"]
    assert records[0].error is not None and records[0].error.kind in NOT_A_SCORE_KINDS


def test_an_empty_group_is_not_a_step():
    watch = GroupWatch(groups_per_step=1)
    assert watch.add_group([], WEIGHTS) is None
    report = watch.add_group([{"a": 1.0}, {"a": 0.0}], WEIGHTS)
    assert report is not None and report.step == 0


def test_a_record_the_store_refuses_loses_itself_only(tmp_path):
    class Refusing(LocalStore):
        def put_record(self, record):
            if record.rollout_id == "g0-r0":
                raise ValueError("refused")
            return super().put_record(record)

    store = Refusing(tmp_path / "store")
    watch = GroupWatch(groups_per_step=1, run_id="vf", store=store)
    watch.add_group([{"a": 1.0}, {"a": 0.0}, {"a": 1.0}], WEIGHTS)
    assert sorted(record.rollout_id for record in store.iter_records("vf")) == ["g0-r1", "g0-r2"]
    assert len(watch.failures) == 1 and "1 of 3" in watch.failures[0] and "refused" in watch.failures[0]


def test_a_kept_conversation_is_bounded_as_the_trl_callbacks_transcripts():
    """A watch holds every rollout's conversation for KEPT_STEPS steps, then stores it: a completion (or a tool's
    output) of any length was held and written whole."""
    from rewardpipe.integrations.verifiers_watch import KEPT_MESSAGE_CHARS, KEPT_MESSAGES

    long = [{"role": "user", "content": "task"}] + [
        {"role": "assistant", "content": [{"type": "text", "text": "x" * 10**6}]},
        {"role": "tool", "content": "y" * 10**6, "tool_call_id": "c1"},
    ] * KEPT_MESSAGES
    watch = GroupWatch(groups_per_step=2)
    watch.add_group([{"a": 1.0}], WEIGHTS, [long])
    (kept,) = [conversation for _, conversation in watch._transcripts.values()]
    assert len(kept) == KEPT_MESSAGES and kept[0] == long[0] and kept[-1]["tool_call_id"] == "c1"
    assert len(kept[-1]["content"]) <= KEPT_MESSAGE_CHARS and len(kept[-2]["content"][0]["text"]) <= KEPT_MESSAGE_CHARS


def test_an_alarm_whose_example_conversation_is_no_list_of_messages_is_logged_and_the_step_reported():
    """Its log line read the last message's content with .get: a conversation of strings raised inside the judgement,
    after the monitor state had moved on, and the step's report and its other alarms were lost."""
    watch = GroupWatch(groups_per_step=4)
    for _ in range(4):
        report = watch.add_group([{"a": 1.0}, {"a": 1.0}], WEIGHTS, [["just text"], ["more"]])
    assert report is not None and watch.reports and watch.alarms
