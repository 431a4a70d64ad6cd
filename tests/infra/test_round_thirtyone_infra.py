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
