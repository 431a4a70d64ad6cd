"""Round thirty-five, the variance check: a step's run warnings reach the SNS topic, once per run and kind, as
notices, never as alarms. ``llm_user_replaced`` (the environment's LLM-played user replaced by its rule-based one in
10 % or more of a step's rollouts) was in the step's result and the function's log only, which nobody reads in AWS.
Each failed before its fix (docs/changelog.md, round thirty-five, the trainer integrations and the monitor)."""

from __future__ import annotations

import pytest

from tests.aws import harness
from tests.aws.test_monitor_handler import _record, world  # noqa: F401 - the fixture
from tests.aws.test_monitor_outbox import delivered

# Its handlers are checked against their functions' IAM policies, read from the synthesized template.
pytestmark = pytest.mark.xdist_group("cdk")

RUN = "usr"


def _user_replaced_steps(store, steps=(0, 1)) -> None:
    """Steps of run ``usr`` whose every third rollout had a reply of the LLM-played user replaced."""
    for step in steps:
        for group in range(5):
            for i in range(4):
                record = _record(RUN, step, group, i)
                record.metrics["llm_user_fallbacks"] = int(i == 0)
                store.put_record(record)


def _check(step, sns=None):  # type: ignore[no-untyped-def]
    from rewardpipe.aws.monitoring import CheckRequest, run_check
    from rewardpipe.aws.settings import Settings

    return run_check(CheckRequest(run_id=RUN, step=step), Settings.from_env(), sns_client=sns)


def _notices(messages):  # type: ignore[no-untyped-def]
    return [m for m in messages if m.get("notice") == "run_warning"]


def test_the_llm_user_replaced_warning_is_sent_once_per_run_as_a_notice(world):  # noqa: F811 - the fixture
    store = world["store"]
    _user_replaced_steps(store)
    out = _check(0)
    (summary,) = out["results"]
    assert [w["kind"] for w in summary["warnings"]] == ["llm_user_replaced"]
    messages = delivered(world)
    (notice,) = _notices(messages)
    assert notice["kind"] == "llm_user_replaced" and notice["run_id"] == RUN and notice["step"] == 0
    assert "rule-based user replaced the LLM-played user in 5 of 20" in notice["message"]
    # a notice, not an alarm: no alarm object, no entry in the step's alarms, and the alarms still go out
    assert all(a["kind"] != "llm_user_replaced" for a in summary["alarms"])
    assert not [k for k in store.list_keys(f"runs/{RUN}/alarms/") if "llm_user" in k]
    assert any(m.get("kind") == "dead_component" for m in messages)

    again = _check(1)  # the next step has the warning too: in its result, not sent again
    assert [w["kind"] for w in again["results"][0]["warnings"]] == ["llm_user_replaced"]
    assert _notices(delivered(world)) == []


def test_the_notices_message_attributes_tell_it_from_an_alarm(world):  # noqa: F811 - the fixture
    import json

    import boto3

    sns = boto3.client("sns", region_name=harness.REGION)
    sent: list[dict] = []
    real_publish = sns.publish

    def publish(**kwargs):  # type: ignore[no-untyped-def]
        sent.append(kwargs)
        return real_publish(**kwargs)

    sns.publish = publish
    _user_replaced_steps(world["store"], steps=(0,))
    _check(0, sns)
    (notice,) = [k for k in sent if json.loads(k["Message"]).get("notice") == "run_warning"]
    attributes = {name: value["StringValue"] for name, value in notice["MessageAttributes"].items()}
    assert attributes["notice"] == "run_warning" and attributes["kind"] == "llm_user_replaced"
    assert attributes["run_id"] == RUN
    assert notice["Subject"].startswith("[rewardpipe] warning llm_user_replaced run usr step 0")
    alarms = [k for k in sent if k is not notice]
    assert alarms and all("notice" not in k["MessageAttributes"] for k in alarms)


def test_a_notice_that_could_not_be_sent_fails_the_check_and_goes_out_on_its_retry(world):  # noqa: F811 - the fixture
    import boto3
    from botocore.exceptions import EndpointConnectionError

    from rewardpipe.aws.monitoring import CheckFailed

    sns = boto3.client("sns", region_name=harness.REGION)
    real_publish = sns.publish
    down = {"on": True}

    def publish(**kwargs):  # type: ignore[no-untyped-def]
        if down["on"] and "notice" in kwargs["MessageAttributes"]:
            raise EndpointConnectionError(endpoint_url="https://sns.us-east-1.amazonaws.com")
        return real_publish(**kwargs)

    sns.publish = publish
    _user_replaced_steps(world["store"], steps=(0,))
    with pytest.raises(CheckFailed, match="warning-delivery:llm_user_replaced"):
        _check(0, sns)
    assert _notices(delivered(world)) == []
    down["on"] = False
    _check(0, sns)  # Lambda retries the failed invocation: the step is a replay, its warning is sent now
    assert [n["kind"] for n in _notices(delivered(world))] == ["llm_user_replaced"]
    _check(0, sns)  # and once only
    assert _notices(delivered(world)) == []


def test_a_healthy_run_sends_no_notice(world):  # noqa: F811 - the fixture
    from tests.aws.test_monitor_outbox import check

    check(world, step=0)
    assert _notices(delivered(world)) == []
