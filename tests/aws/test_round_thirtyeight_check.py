"""Round thirty-eight, the scheduled check on AWS: what a variance check costs in S3 requests, and what it makes of
records that land in a step after it was judged.

Requests are counted with botocore's ``before-parameter-build`` hook on the store's client against moto's S3."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from tests.aws import harness
from tests.aws.test_round_thirtyseven_e_steps import _groups
from tests.aws.test_round_thirtyseven_e_steps import world as late_world  # noqa: F401 - its fixture
from tests.test_monitor import batch, varied

pytestmark = pytest.mark.xdist_group("cdk")


@pytest.fixture
def world(late_world):  # noqa: F811 - the fixture imported above, by its name here
    """Round thirty-seven's bucket, alarm topic and settings, with a count of each ListObjectsV2 the store's client
    sends, by (prefix, delimiter)."""
    lists: Counter[tuple[str, str]] = Counter()

    def count(params, **_):
        lists[(params.get("Prefix", ""), params.get("Delimiter", ""))] += 1

    late_world["store"].client.meta.events.register("before-parameter-build.s3.ListObjectsV2", count)
    return {**late_world, "lists": lists}


def _check(world, **request) -> dict:
    from rewardpipe.aws.monitoring import CheckRequest, run_check
    from rewardpipe.aws.settings import Settings

    return run_check(CheckRequest(**request), Settings.from_env(), store=world["store"])


@pytest.mark.parametrize("request_", [{"run_id": "a", "step": 1}, {}], ids=["one run", "scheduled"])
def test_a_check_lists_the_runs_once(world, request_):
    store = world["store"]
    for run in ("a", "b"):
        for step in (0, 1, 2):
            for record in batch(varied, groups=3, k=2, step=step, run=run):
                store.put_record(record)
    out = _check(world, **request_)
    assert out["checked"] >= 2
    # the per-run metrics' holders and the alarms' streaks each listed runs/ again (three listings a scheduled check)
    assert world["lists"][("runs/", "/")] == 1


def _alarm_series(stdout: str) -> dict[str, list[dict]]:
    """What the dead-component and error-rate alarms read from one check (their metrics: DeadStreak per component
    and ErrorStreak, without a run dimension), as CloudWatch aggregates the check's points (1-minute periods)."""
    read = {}
    for (name, dims), periods in harness.cloudwatch_statistic_sets(stdout).items():
        if name in ("DeadStreak", "ErrorStreak") and "run" not in dict(dims):
            read[f"{name}:{dict(dims).get('component', '')}"] = list(periods.values())
    return read


def test_a_re_judged_step_counts_once_in_what_the_alarms_read(world, capsys, monkeypatch):
    """The provisional judgement and the re-judgement each emit the step's points, in two checks (two periods at
    the least: the schedule is at least the alarms' minute apart). Within each check the alarms' series get one
    point each, the streak of the state as committed: the re-judged step's streak starts from the targets before
    it, so its streak is not counted twice, and no Sum or SampleCount of the period is doubled."""
    monkeypatch.setenv("DEAD_STEPS", "2")  # a dead step 0 alone raises no alarm: it stays provisional
    store = world["store"]
    _groups(store, 0, [f"g{n}" for n in range(5)], varied=False)  # run "late", as round thirty-seven's
    _groups(store, 1, ["g0"])
    capsys.readouterr()
    assert [(r["step"], r["verdicts"]["correctness"]) for r in _check(world)["results"]] == [(0, "dead")]
    first = _alarm_series(capsys.readouterr().out)
    assert first["DeadStreak:correctness"] == [{"SampleCount": 1, "Sum": 1.0, "Minimum": 1.0, "Maximum": 1.0}]

    _groups(store, 0, [f"late{n}" for n in range(6)], varied=False)
    assert [(r["step"], r["records"]) for r in _check(world)["results"]] == [(0, 44)]
    again = _alarm_series(capsys.readouterr().out)
    # judged again from the targets before it: still a streak of one step, sent once
    assert again["DeadStreak:correctness"] == [{"SampleCount": 1, "Sum": 1.0, "Minimum": 1.0, "Maximum": 1.0}]
    assert all(len(periods) == 1 and periods[0]["SampleCount"] == 1 for periods in again.values())


def test_the_streak_alarms_read_a_statistic_a_repeated_point_cannot_inflate(synth):
    """CloudWatch aggregates the points of one period into a statistic set (harness.cloudwatch_statistic_sets): a
    step's streak sent twice in a period doubles a Sum or a SampleCount and can move an Average, never a Maximum
    past the larger point. The alarms that read the check's streaks use Maximum over one minute, without the run
    dimension (one point per check, the test above)."""
    alarms = [
        r["Properties"]
        for r in synth.template["Resources"].values()
        if r["Type"] == "AWS::CloudWatch::Alarm" and r["Properties"].get("MetricName") in ("DeadStreak", "ErrorStreak")
    ]
    assert len(alarms) >= 2
    for props in alarms:
        assert props["Statistic"] == "Maximum" and props["Period"] == 60, props["AlarmName"]
        assert "run" not in {d["Name"] for d in props["Dimensions"]}, props["AlarmName"]


def test_a_step_is_listed_once_to_judge_it_and_once_a_check_to_see_it_grew(world):
    """Judging a step provisionally listed it to keep its key count, then again to read it; judging it again after
    the check's listing saw it grew listed it twice more (three listings of one prefix in that check). The count kept
    is now that of the keys read."""
    store, lists = world["store"], world["lists"]
    _groups(store, 0, [f"g{n}" for n in range(5)])
    _groups(store, 1, ["g0"])
    assert [(r["step"], r["records"]) for r in _check(world)["results"]] == [(0, 20)]
    assert lists[("runs/late/step=0/", "")] == 1  # was 2
    _groups(store, 0, [f"late{n}" for n in range(6)])  # no alarm: the step stays open to a new judgement
    lists.clear()
    assert [(r["step"], r["records"]) for r in _check(world)["results"]] == [(0, 44)]
    assert lists[("runs/late/step=0/", "")] == 1  # was 3
    lists.clear()
    assert _check(world)["results"] == []  # its count is that of the keys judged: looked at, not judged again
    assert lists[("runs/late/step=0/", "")] == 1
    assert store.get_json("runs/late/monitor/state.json")["provisional"]["keys"] == 44


def test_a_steps_listing_is_read_as_given_and_only_for_one_step(tmp_path):
    from rewardpipe.store import LocalStore, step_prefix

    store = LocalStore(tmp_path)
    for record in batch(varied, groups=2, k=2, step=0, run="r"):
        store.put_record(record)
    keys = store.list_keys(step_prefix("r", 0))
    assert len(list(store.iter_records("r", 0, listed=keys[:1]))) == 1  # what the caller listed is what is read
    with pytest.raises(ValueError, match="one step"):
        list(store.iter_records("r", listed=keys))


def test_records_landing_after_the_next_step_was_judged_are_reported_late(world, capsys):
    """Round thirty-seven judges a step again only while no later step is judged: records landing in step 0 after
    step 1 was judged were never judged, and nothing said so. A check that judges a step looks at one step judged
    before, in turn, with the listing a judgement no longer makes: a check lists no more than before."""
    store, lists = world["store"], world["lists"]
    _groups(store, 0, [f"g{n}" for n in range(5)])
    _groups(store, 1, [f"g{n}" for n in range(5)])
    _groups(store, 2, ["g0"])
    assert "late_records" not in _check(world)  # steps 0 and 1 judged
    _groups(store, 0, [f"late{n}" for n in range(6)], varied=False)
    capsys.readouterr()
    idle = _check(world)  # judges nothing: looks at nothing more than round thirty-seven's step
    assert idle["results"] == [] and "late_records" not in idle

    _groups(store, 2, [f"g{n}" for n in range(1, 5)])
    _groups(store, 3, ["g0"])
    lists.clear()
    out = _check(world)
    assert [(r["step"], r["records"]) for r in out["results"]] == [(2, 20)]
    assert out["late_records"] == [{"run_id": "late", "step": 0, "keys_read": 20, "stored": 44}]
    warnings = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"late_records"' in line]
    assert [w["step"] for w in warnings] == [0] and warnings[0]["level"] == "WARNING"
    # still not judged (round thirty-seven's contract), and no alarm for it
    assert store.get_json("runs/late/monitor/step=0.json")["steps"][0]["records"] == 20
    steps = sum(n for (prefix, _), n in lists.items() if "/step=" in prefix)
    assert steps == 3  # step 1 (grew?), step 2 (judged), step 0 (late?): a judgement listed its step twice before

    _groups(store, 3, [f"g{n}" for n in range(1, 5)])
    _groups(store, 4, ["g0"])
    again = _check(world)
    assert [r["step"] for r in again["results"]] == [3] and "late_records" not in again  # reported once
