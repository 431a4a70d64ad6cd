"""Round thirty-six (third wave), local/AWS parity leftovers: the variance check's summary of a step gives the
aggregate reward's verdict, as the local monitor's step does.

Before this round the check's result gave each component's verdict (``verdicts``) and no verdict for the aggregate,
although its alarms include the aggregate's (``component: "aggregate"``) and the local monitor's step has both
(``components.<name>.verdict``, ``aggregate.verdict``). A run whose components cancel (the aggregate constant in every
group while each component varies) was ``ok`` everywhere in the summary and alarmed all the same.
"""

from __future__ import annotations

import pytest

from rewardpipe.models import Record
from tests.aws.test_monitor_handler import _record, world  # noqa: F401 - the fixture

pytestmark = pytest.mark.xdist_group("cdk")

RUN = "cancel"


def _cancelling(step: int, group: int, i: int) -> Record:
    """Each component varies inside its group; their weighted sum does not (the aggregate is dead)."""
    won = float(i % 2)
    update = {
        "components": {"correctness": won, "asked_before_coding": 1.0 - won},
        "weights": {"correctness": 1.0, "asked_before_coding": 1.0},
        "aggregate": 1.0,
    }
    return _record(RUN, step, group, i).model_copy(update=update)


def test_the_checks_summary_gives_the_aggregates_verdict_as_the_local_monitor_does(world):  # noqa: F811
    from rewardpipe.aws.monitoring import CheckRequest, run_check, thresholds
    from rewardpipe.aws.settings import Settings
    from rewardpipe.monitoring import monitor_records

    records = [_cancelling(0, group, i) for group in range(5) for i in range(4)]
    for record in records:
        world["store"].put_record(record)
    settings = Settings.from_env()
    (local,) = monitor_records(records, thresholds(settings)).to_dict()["steps"]

    checked = run_check(CheckRequest(run_id=RUN, step=0), settings)["results"]
    replayed = run_check(CheckRequest(run_id=RUN, step=0), settings)["results"]
    assert [s["replayed"] for s in (*checked, *replayed)] == [False, True]
    for summary in (*checked, *replayed):
        assert summary["aggregate_verdict"] == local["aggregate"]["verdict"] == "dead"
        assert summary["verdicts"] == {name: c["verdict"] for name, c in local["components"].items()}
        assert set(summary["verdicts"].values()) == {"ok"}
    assert ("aggregate", "dead_component") in {(a["component"], a["kind"]) for a in checked[0]["alarms"]}
