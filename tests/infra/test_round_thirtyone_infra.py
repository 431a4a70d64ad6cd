"""Round thirty-one, infrastructure: what the real services do that moto does not model.

Lambda's SQS event source scales a consumer up to the account's concurrency quota (for a FIFO queue, up to its
active message groups; the bridge gives every sample its own group) unless the mapping sets a maximum concurrency
(``ScalingConfig.MaximumConcurrency``, 2-1000; AWS Lambda, "Configuring scaling behavior for SQS event source
mappings": it keeps one queue from using the rest of the account's concurrency, and reserves nothing). The bridge's
three queue consumers had none: a Nova step's burst of rollout requests or turns could take the whole account,
throttling the rollout functions (their turns end in error records once their retries run out) and the single-turn
reward Lambda Nova calls. moto runs no pollers, so no moto test sees it; the template does."""

from __future__ import annotations

import pytest

from stacks.config import SettingsError
from stacks.constructs.nova_bridge import (
    MAX_EVENT_SOURCE_CONCURRENCY,
    MIN_EVENT_SOURCE_CONCURRENCY,
    NovaBridgeSettings,
    load_nova_settings,
)
from tests.aws import harness

pytestmark = pytest.mark.xdist_group("cdk")

# Lambda's default concurrency quota per account and Region (Lambda quotas): the bridge's consumers together
# must leave most of it to the functions a rollout and Nova's reward calls need.
DEFAULT_ACCOUNT_CONCURRENCY = 1000


def _sqs_mappings(template: dict) -> dict[str, dict]:
    resources = template["Resources"]
    queues = {name for name, r in resources.items() if r["Type"] == "AWS::SQS::Queue"}
    found = {}
    for name, resource in resources.items():
        if resource["Type"] != "AWS::Lambda::EventSourceMapping":
            continue
        source = resource["Properties"].get("EventSourceArn")
        if isinstance(source, dict) and source.get("Fn::GetAtt", [None])[0] in queues:
            found[name] = resource["Properties"]
    return found


def test_every_queue_consumer_has_a_maximum_concurrency():
    mappings = _sqs_mappings(harness.synthesized(harness.NOVA_BRIDGE_CONTEXT).template)
    assert len(mappings) == 3, sorted(mappings)  # intake, forwarder, router
    limits = {}
    for name, properties in mappings.items():
        limit = (properties.get("ScalingConfig") or {}).get("MaximumConcurrency")
        assert isinstance(limit, int), f"{name}: no ScalingConfig.MaximumConcurrency"
        assert MIN_EVENT_SOURCE_CONCURRENCY <= limit <= MAX_EVENT_SOURCE_CONCURRENCY, name
        limits[name] = limit
    assert set(limits.values()) == {NovaBridgeSettings().max_concurrency}
    assert sum(limits.values()) <= DEFAULT_ACCOUNT_CONCURRENCY // 2


@pytest.mark.parametrize("value", [0, 1, 1001, "100", 2.5, True])
def test_a_maximum_concurrency_outside_what_lambda_accepts_is_refused_at_synth(value):
    with pytest.raises(SettingsError, match="max_concurrency"):
        load_nova_settings({"enabled": True, "max_concurrency": value})


def test_the_documented_range_is_accepted():
    for value in (MIN_EVENT_SOURCE_CONCURRENCY, MAX_EVENT_SOURCE_CONCURRENCY):
        assert load_nova_settings({"enabled": True, "max_concurrency": value}).max_concurrency == value


# -- whatever may invoke a function asynchronously: its failures are kept ------------------------------------------


@pytest.mark.parametrize("context", ["", harness.NOVA_BRIDGE_CONTEXT], ids=["default", "nova-bridge"])
def test_every_function_others_may_invoke_keeps_the_events_it_failed_on(context):
    """Lambda retries a failed asynchronous invocation twice, then discards the event unless the function has an
    on-failure destination (AWS Lambda, "Asynchronous invocation"). A function that something outside the stack's
    own roles may invoke (its resource policy: an EventBridge rule, a training job's role) may be invoked that way:
    whether Nova invokes the rollout proxy synchronously or asynchronously is not documented, and the proxy had no
    destination, so a rollout request it could not queue was dropped and its sample waited out Nova's timeout.
    Each such function's failed events go to a queue that an alarm watches."""
    from tests.infra.test_round_twentyeight_infra import _alarmed_queues, _of_type, _queue_of

    resources = harness.synthesized(context).template["Resources"]
    invokable = {
        p["Properties"]["FunctionName"]["Fn::GetAtt"][0]
        for p in _of_type(resources, "AWS::Lambda::Permission").values()
    }
    assert invokable, "no function with a resource policy"
    configs = {
        c["Properties"]["FunctionName"]["Ref"]: c["Properties"]
        for c in _of_type(resources, "AWS::Lambda::EventInvokeConfig").values()
    }
    alarmed = _alarmed_queues(resources)
    for function in sorted(invokable):
        assert function in configs, f"{function}: no on-failure destination for its asynchronous invocations"
        on_failure = configs[function]["DestinationConfig"]["OnFailure"]["Destination"]
        assert _queue_of(on_failure) in alarmed, function
    if context:
        assert any(name.startswith("NovaBridgeRolloutProxy") for name in invokable)


# -- a dead letter kept untouched: no all-clear ---------------------------------------------------------------------


@pytest.mark.parametrize("context", ["", harness.NOVA_BRIDGE_CONTEXT], ids=["default", "nova-bridge"])
def test_a_dead_letter_kept_past_six_idle_hours_does_not_clear_its_alarm(context):
    """SQS publishes a queue's metrics only while the queue is active, which CloudWatch counts as up to six hours
    after its last API call ("Available CloudWatch metrics for Amazon SQS": every metric is reported only while
    the queue is active). A dead-letter queue holding a message nobody reads goes quiet after six hours, message
    or not. Its alarm treated that silence as not breaching: it turned OK and sent the topic an all-clear while
    the dead letter was still there. Missing data now keeps the alarm's state (an idle empty queue stays OK)."""
    from tests.infra.test_failure_alarms import _alarms_on
    from tests.infra.test_round_twentynine_infra import MISSING, _next_state

    template = harness.synthesized(context).template
    alarms = _alarms_on(template, "AWS/SQS", "ApproximateNumberOfMessagesVisible")
    assert len(alarms) == (2 if not context else 8)  # each dead-letter queue, the bridge's event one included
    for queue, alarm in alarms.items():
        held = _next_state(alarm, "OK", 1)  # a message was dead-lettered
        assert held == "ALARM", queue
        assert _next_state(alarm, held, MISSING) == "ALARM", f"{queue}: an idle queue still holding it turned OK"
        assert _next_state(alarm, "OK", MISSING) == "OK", f"{queue}: an idle empty queue left OK"
        assert _next_state(alarm, held, 0) == "OK", f"{queue}: a redriven queue did not clear"
