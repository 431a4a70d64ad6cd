"""Round thirty-two, infrastructure: what CloudWatch does that moto does not model.

A dead-letter queue's alarm (``<name>``: the queue holds a message) goes to ALARM at the first dead letter and stays
there while the message is kept, and CloudWatch notifies only when an alarm changes state: a second, third... dead
letter while the first was still in the queue sent nothing, so an operator who had seen the first heard of none of
the rest (of another sample, another run, hours later). Each dead-letter queue now also has ``<name>-new``, on how
much the queue's count rose from one period to the next (``DIFF(FILL(visible, 0))``): it notifies of every later
dead letter too. SQS's ``NumberOfMessagesSent`` is no way to count them: it does not count a message a source queue
moves to its dead-letter queue ("Available CloudWatch metrics for Amazon SQS"). SQS reports nothing for a queue idle
six hours, holding messages or not, so a period without a point counts as an empty queue: the dead letter that ends
the silence is a rise.
"""

from __future__ import annotations

import itertools
import re

import pytest

from tests.aws import harness

pytestmark = pytest.mark.xdist_group("cdk")

CONTEXTS = pytest.mark.parametrize("context", ["", harness.NOVA_BRIDGE_CONTEXT], ids=["default", "nova-bridge"])
_DIFF_FILL = re.compile(r"^DIFF\(FILL\((\w+),\s*(\d+(?:\.\d+)?)\)\)$")


def _queue_alarms(template: dict) -> dict[str, list[dict]]:
    """{queue logical id: the properties of every alarm on its ApproximateNumberOfMessagesVisible}."""
    out: dict[str, list[dict]] = {}
    for resource in template["Resources"].values():
        if resource["Type"] != "AWS::CloudWatch::Alarm":
            continue
        props = resource["Properties"]
        stats = [props] + [m["MetricStat"]["Metric"] for m in props.get("Metrics", []) if "MetricStat" in m]
        for stat in stats:
            if stat.get("Namespace") == "AWS/SQS" and stat.get("MetricName") == "ApproximateNumberOfMessagesVisible":
                for dimension in stat.get("Dimensions", []):
                    out.setdefault(dimension["Value"]["Fn::GetAtt"][0], []).append(props)
    return out


def _points(props: dict, series: list, t: int) -> list:
    """The alarm's datapoints at period ``t`` (its last EvaluationPeriods periods), computed from the queue's
    per-period Maximum ``series`` (None: SQS reported nothing) over those periods only, as the alarm queries them."""
    n = props["EvaluationPeriods"]
    window = series[max(0, t - n + 1) : t + 1]
    if "Metrics" not in props:
        return window
    (expression,) = [m["Expression"] for m in props["Metrics"] if m.get("ReturnData", True) and "Expression" in m]
    match = _DIFF_FILL.match(expression)
    assert match, f"an expression this test cannot evaluate: {expression}"
    filled = [float(match.group(2)) if v is None else v for v in window]
    return [None] + [b - a for a, b in itertools.pairwise(filled)]


def _notifications(props: dict, series: list) -> list[int]:
    """The periods at which the alarm enters ALARM (its AlarmActions run), evaluated once per period."""
    from tests.infra.test_round_twentynine_infra import _breaches

    state, entered = "OK", []
    for t in range(len(series)):
        points = [p for p in _points(props, series, t) if p is not None]
        if not points:
            treat = props.get("TreatMissingData", "missing")
            new = state if treat == "ignore" else "ALARM" if treat == "breaching" else "OK"
        else:
            breaching = sum(_breaches(props, p) for p in points)
            new = "ALARM" if breaching >= props.get("DatapointsToAlarm", props["EvaluationPeriods"]) else "OK"
        if new == "ALARM" and state != "ALARM" and props.get("AlarmActions"):
            entered.append(t)
        state = new
    return entered


HOURS = 12  # five-minute periods


def _sent(alarms: list[dict], series: list) -> set[int]:
    return {t for props in alarms for t in _notifications(props, series)}


@CONTEXTS
def test_every_dead_letter_is_heard_of_not_only_the_first(context):
    """Before: the second dead letter (another rollout's, hours later) sent nothing, the first still queued."""
    queues = _queue_alarms(harness.synthesized(context).template)
    assert len(queues) == (2 if not context else 8)
    quiet, first, idle, second = [0] * 3, [1] * (6 * HOURS), [None] * (7 * HOURS), [2] * 3
    for queue, alarms in queues.items():
        # The first dead letter, kept six hours (SQS reports it), then silence, then a second one.
        sent = _sent(alarms, quiet + first + idle + second)
        assert sent & {3, 4}, f"{queue}: the first dead letter sent nothing"
        assert not sent & set(range(5, len(quiet + first + idle))), f"{queue}: notified with nothing new"
        assert sent & {len(quiet + first + idle), len(quiet + first + idle) + 1}, f"{queue}: the second, unheard of"
        # A second one while SQS still reports the first.
        sent = _sent(alarms, quiet + first + second)
        assert sent & {len(quiet + first), len(quiet + first) + 1}, f"{queue}: the second, unheard of"
        # An idle empty queue, and a dead letter redriven, tell nobody anything.
        assert not _sent(alarms, quiet + [None] * HOURS + quiet), queue
        assert _sent(alarms, quiet + first + [0] * 3) == _sent(alarms, quiet + first), queue


@CONTEXTS
def test_the_new_dead_letters_alarm_sends_no_all_clear(context):
    """Its OK only means nothing more arrived: the queue may still hold dead letters (``<name>`` says that)."""
    for queue, alarms in _queue_alarms(harness.synthesized(context).template).items():
        rises = [a for a in alarms if "Metrics" in a]
        assert len(rises) == 1, queue
        (rise,) = rises
        assert rise["AlarmActions"] and not rise.get("OKActions"), queue
        (holds,) = [a for a in alarms if "Metrics" not in a]
        assert rise["AlarmName"] == f"{holds['AlarmName']}-new", queue


# -- the trainer writes its replies and inputs, not the rollout's state ---------------------------------------------


def _trainer_may(action: str, key: str) -> bool:
    from fnmatch import fnmatchcase

    from tests.aws.test_client import _key_patterns, _trainer_policy

    statements = _trainer_policy(harness.synthesized())
    s3 = [st for st in statements if st["Effect"] == "Allow" and action in st["Action"]]
    return any(fnmatchcase(key, pattern) for st in s3 for pattern in _key_patterns(st))


def test_the_trainer_may_write_its_replies_and_inputs_but_not_the_episode_or_its_score():
    """The TrainerPolicy allowed s3:PutObject on all of ``runs/*/state/*``: a trainer role (or whoever holds it) could
    rewrite a rollout's episode or put the ``scored.json`` RecordError answers with (a score of its choosing for a
    failed rollout). It writes a reply too large to send (``reply-<n>.json``), large inputs (``state/inputs/``) and
    inline tasks only, and still reads the conversation."""
    for key in (
        "runs/r/state/att-1/reply-3.json",
        "runs/r/state/inputs/att-1/turns-0123456789abcdef.json",
        "tasks/inline/r/t-0123456789abcdef.json",
    ):
        assert _trainer_may("s3:PutObject", key), key
    for key in (
        "runs/r/state/att-1/episode.json",
        "runs/r/state/att-1/scored.json",
        "runs/r/state/att-1/replay.json",
        "runs/r/state/att-1/failed-2.json",
    ):
        assert not _trainer_may("s3:PutObject", key), key
        assert _trainer_may("s3:GetObject", key), key  # reading is all it needs of them


def _role_may(template: dict, function_prefix: str, action: str, key: str) -> bool:
    """Whether the role of the function whose logical id starts with ``function_prefix`` has ``action`` on ``key``
    in its identity policies (the template's AWS::IAM::Policy resources attached to it)."""
    from fnmatch import fnmatchcase

    from tests.aws.test_client import _key_patterns

    resources = template["Resources"]
    (function,) = [
        r for k, r in resources.items() if r["Type"] == "AWS::Lambda::Function" and k.startswith(function_prefix)
    ]
    role = function["Properties"]["Role"]["Fn::GetAtt"][0]
    statements = [
        st
        for r in resources.values()
        if r["Type"] == "AWS::IAM::Policy" and {"Ref": role} in r["Properties"]["Roles"]
        for st in r["Properties"]["PolicyDocument"]["Statement"]
        if st["Effect"] == "Allow" and action in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])
    ]
    patterns = [p for st in statements if "Fn::Join" in str(st["Resource"]) for p in _key_patterns(st)]
    return any(fnmatchcase(key, pattern) for pattern in patterns)


def test_the_nova_router_writes_a_turns_large_reply_and_no_other_state_object():
    """The router, which handles Nova's generate responses (model text), could put any object under its run's
    ``state/``: the episode, or the ``scored.json`` RecordError answers with. It writes large replies only."""
    from rewardpipe.store import run_prefix
    from stacks.constructs.nova_bridge import NovaBridgeSettings

    template = harness.synthesized(harness.NOVA_BRIDGE_CONTEXT).template
    state = f"{run_prefix(NovaBridgeSettings().run_id)}state/att-1/"
    assert _role_may(template, "NovaBridgeRouter", "s3:PutObject", f"{state}reply-4.json")
    for name in ("episode.json", "scored.json", "failed-2.json", "replay.json"):
        assert not _role_may(template, "NovaBridgeRouter", "s3:PutObject", f"{state}{name}"), name
