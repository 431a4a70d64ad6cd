"""Round twenty-nine, infrastructure: what the synthesized template configures that the real services treat
differently from what the stack intends (moto evaluates no alarm and enforces no timeout).

* The ``rollouts-without-record`` alarm summed the bare ``ExecutionsFailed`` and ``ExecutionsTimedOut``. Step
  Functions publishes each only for a period in which one happened, and a metric math sum over a series with no
  value at a timestamp has no value there either (missing data, which this alarm treats as not breaching): rollouts
  that failed without a record raised no alarm unless one also timed out in the same five minutes. Each metric
  of an alarm's expression is now filled with 0 (``FILL``), and a small evaluator of CloudWatch metric math checks
  every math alarm of the stack with one of its metrics reporting and the others silent.
* The state machine's 24-hour timeout could come before a state's own (a day-long Fargate step or Nova turn wait),
  ending the rollout with no record; it is now at least the longest path of its states' own timeouts.
* A run's inline tasks (tasks/inline/<run>/) had no lifecycle rule: they outlived its records forever.
* The Nova near-timeout alarm cleared itself (an all-clear) on a minute the sweeper failed to measure.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.aws import harness

pytestmark = pytest.mark.xdist_group("cdk")

CONTEXTS = pytest.mark.parametrize("context", ["", harness.NOVA_BRIDGE_CONTEXT], ids=["default", "nova-bridge"])


# -- a metric math evaluator: one period, a metric with no datapoint is MISSING -----------------------------------


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()
_TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d+)?)|([A-Za-z_][A-Za-z0-9_]*)|(==|!=|>=|<=|[-+*/(),<>]))")


def _tokens(expression: str) -> list[str]:
    out, pos = [], 0
    while pos < len(expression.rstrip()):
        match = _TOKEN.match(expression, pos)
        assert match, f"metric math the test cannot read at {expression[pos:]!r}"
        out.append(match.group(match.lastindex or 0))
        pos = match.end()
    return out


def evaluate(expression: str, values: dict[str, float | _Missing]) -> float | _Missing:
    """CloudWatch metric math for one period: an operator or comparison with a MISSING operand is MISSING;
    FILL(m, v) is v where m is MISSING; IF(c, a, b); AND/OR; numbers and metric ids."""
    tokens = _tokens(expression)
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take(expected: str | None = None) -> str:
        nonlocal pos
        token = tokens[pos]
        assert expected is None or token == expected, (expected, token, expression)
        pos += 1
        return token

    def binary(left, op, right):
        if left is MISSING or right is MISSING:
            return MISSING
        ops = {
            "+": lambda a, b: a + b,
            "-": lambda a, b: a - b,
            "*": lambda a, b: a * b,
            "/": lambda a, b: a / b if b else MISSING,
            ">": lambda a, b: float(a > b),
            "<": lambda a, b: float(a < b),
            ">=": lambda a, b: float(a >= b),
            "<=": lambda a, b: float(a <= b),
            "==": lambda a, b: float(a == b),
            "!=": lambda a, b: float(a != b),
            "AND": lambda a, b: float(bool(a) and bool(b)),
            "OR": lambda a, b: float(bool(a) or bool(b)),
        }
        return ops[op](left, right)

    def level(ops: tuple[str, ...], below):
        def parse():
            value = below()
            while peek() in ops:
                op = take()
                value = binary(value, op, below())
            return value

        return parse

    def atom():
        token = take()
        if token == "(":
            value = expr()
            take(")")
            return value
        if re.fullmatch(r"\d+(?:\.\d+)?", token):
            return float(token)
        if peek() == "(":
            take("(")
            args = [expr()]
            while peek() == ",":
                take(",")
                args.append(expr())
            take(")")
            if token == "FILL":
                return args[1] if args[0] is MISSING else args[0]
            if token == "IF":
                if args[0] is MISSING:
                    return MISSING
                return args[1] if args[0] else args[2]
            raise AssertionError(f"metric math function {token} is not known to the test")
        assert token in values, f"{token} is not a metric of the alarm"
        return values[token]

    mul = level(("*", "/"), atom)
    add = level(("+", "-"), mul)
    cmp = level((">", "<", ">=", "<=", "==", "!="), add)
    conj = level(("AND",), cmp)
    expr = level(("OR",), conj)
    value = expr()
    assert pos == len(tokens), f"unread metric math: {tokens[pos:]}"
    return value


def test_the_evaluator_reads_metric_math_as_cloudwatch_does():
    assert evaluate("a + b", {"a": 2.0, "b": MISSING}) is MISSING
    assert evaluate("FILL(a, 0) + FILL(b, 0)", {"a": 2.0, "b": MISSING}) == 2.0
    assert evaluate("IF(FILL(a, 0) > 0 AND FILL(b, 0) == 0, 1, 0)", {"a": 3.0, "b": MISSING}) == 1.0
    assert evaluate("IF(FILL(a, 0) > 0 AND FILL(b, 0) == 0, 1, 0)", {"a": 3.0, "b": 1.0}) == 0.0


def _math_alarms(template: dict) -> dict[str, dict[str, Any]]:
    return {
        str(r["Properties"]["AlarmName"]): r["Properties"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::CloudWatch::Alarm" and "Metrics" in r["Properties"]
    }


def _breaches(alarm: dict[str, Any], value: float | _Missing) -> bool:
    if isinstance(value, _Missing):  # the alarm's own treatment of missing data
        return alarm.get("TreatMissingData") == "breaching"
    threshold = alarm["Threshold"]
    return {
        "GreaterThanThreshold": value > threshold,
        "GreaterThanOrEqualToThreshold": value >= threshold,
        "LessThanThreshold": value < threshold,
        "LessThanOrEqualToThreshold": value <= threshold,
    }[alarm["ComparisonOperator"]]


@CONTEXTS
def test_every_math_alarm_has_a_value_when_only_one_of_its_metrics_reports(context):
    alarms = _math_alarms(harness.synthesized(context).template)
    assert alarms
    for name, alarm in alarms.items():
        (expression,) = [m["Expression"] for m in alarm["Metrics"] if m.get("ReturnData", True) and "Expression" in m]
        ids = [m["Id"] for m in alarm["Metrics"] if "MetricStat" in m]
        if len(ids) < 2:  # no other metric to be missing (a one-metric DIFF is read over periods, round 32)
            continue
        for reporting in ids:
            values: dict[str, float | _Missing] = {i: MISSING for i in ids}
            values[reporting] = 3.0
            assert evaluate(expression, values) is not MISSING, (
                f"{name}: {expression} has no value when only {reporting} reports (the others had no event)"
            )


def test_rollouts_that_failed_without_a_record_alarm_when_none_timed_out(synth):
    (alarm,) = [a for n, a in _math_alarms(synth.template).items() if n.endswith("rollouts-without-record")]
    (expression,) = [m["Expression"] for m in alarm["Metrics"] if "Expression" in m]
    assert _breaches(alarm, evaluate(expression, {"failed": 2.0, "timedOut": MISSING}))
    assert _breaches(alarm, evaluate(expression, {"failed": MISSING, "timedOut": 1.0}))


# -- the execution's timeout never comes before a state's own -------------------------------------------------------


def _definition(template: dict) -> dict:
    (machine,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::StepFunctions::StateMachine"]
    parts = machine["Properties"]["DefinitionString"]["Fn::Join"][1]
    return json.loads("".join(p if isinstance(p, str) else "ARN" for p in parts))


def _function_timeout(template: dict, prefix: str) -> int:
    (timeout,) = [
        r["Properties"]["Timeout"]
        for k, r in template["Resources"].items()
        if r["Type"] == "AWS::Lambda::Function" and k.startswith(prefix)
    ]
    return timeout


LONG_FARGATE = json.dumps({"rewardpipe": {"fargate": {"task_timeout_s": 86_400}}}, sort_keys=True)
LONG_NOVA_TURN = json.dumps(
    {"rewardpipe_nova": {**json.loads(harness.NOVA_BRIDGE_CONTEXT)["rewardpipe_nova"], "rollout_timeout_s": 86_400}},
    sort_keys=True,
)


@pytest.mark.parametrize("context", ["", LONG_FARGATE, LONG_NOVA_TURN], ids=["default", "fargate-day", "nova-day"])
def test_no_state_s_own_timeout_can_come_after_the_execution_s(context):
    """A state's timeout (States.Timeout) is caught into an error record; the execution's own is not. Along the
    longest path (StartEpisode, a Converse per turn, the Fargate step, Score, RecordError: a first attempt each)
    every state's timeout must come before the execution's, or the rollout ends with no record at all."""
    from rewardpipe.aws.rollout import MAX_TURNS_LIMIT

    template = harness.synthesized(context).template
    definition = _definition(template)
    states = definition["States"]
    longest_path = (
        states["StartEpisodeStep"]["TimeoutSeconds"]
        + MAX_TURNS_LIMIT * states["ConverseStep"]["TimeoutSeconds"]
        + states["RunCodeFargate"]["TimeoutSeconds"]
        + _function_timeout(template, "RolloutWorkflowScore")
        + _function_timeout(template, "RolloutWorkflowRecordError")
    )
    assert definition["TimeoutSeconds"] >= longest_path, (definition["TimeoutSeconds"], longest_path)
    if not context:
        assert definition["TimeoutSeconds"] == 86_400  # the default deployment keeps its day


# -- what the stack writes per run expires ----------------------------------------------------------------------------


def _expiring_prefixes(template: dict) -> dict[str, int]:
    (bucket,) = [
        r["Properties"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::S3::Bucket" and r["Properties"].get("VersioningConfiguration")
    ]
    return {
        rule.get("Prefix", ""): rule["ExpirationInDays"]
        for rule in bucket["LifecycleConfiguration"]["Rules"]
        if rule.get("Status") == "Enabled" and "ExpirationInDays" in rule
    }


@CONTEXTS
def test_every_prefix_written_per_run_expires_no_later_than_the_run_s_records(context):
    """A rollout started with an inline task stores it (hidden tests included) under tasks/inline/<run>/; those
    objects had no lifecycle rule and outlived the run's records, which expire, forever."""
    from rewardpipe.aws.rollout import inline_task_key
    from rewardpipe.store import run_prefix

    expiring = _expiring_prefixes(harness.synthesized(context).template)
    records = next(days for prefix, days in expiring.items() if run_prefix("r").startswith(prefix))
    written = [run_prefix("r"), inline_task_key("r", {"task_id": "t"}), "jobs/r/x/y/job.json"]
    if context:
        written.append("nova/due/r")
    for key in written:
        days = [d for prefix, d in expiring.items() if key.startswith(prefix)]
        assert days and min(days) <= records, (key, expiring)


# -- the near-timeout alarm sends no all-clear when the sweeper stops measuring --------------------------------------


def _next_state(alarm: dict[str, Any], state: str, value: float | _Missing) -> str:
    """One evaluation of a one-period alarm (CloudWatch's treatment of missing data)."""
    if isinstance(value, _Missing):
        treat = alarm.get("TreatMissingData", "missing")
        if treat == "ignore":
            return state
        if treat == "missing":
            return "INSUFFICIENT_DATA"
        return "ALARM" if treat == "breaching" else "OK"
    return "ALARM" if _breaches(alarm, value) else "OK"


def test_a_sweep_that_failed_does_not_clear_the_nova_near_timeout_alarm():
    """The sweeper emits the oldest unanswered request's age after every sweep that worked (0 with nothing in
    flight). The alarm treated a minute without a point as not breaching: the sweep that failed while a rollout
    neared Nova's timeout turned the alarm OK and sent an all-clear, just when nothing would cut that rollout
    off at its budget."""
    template = harness.synthesized(harness.NOVA_BRIDGE_CONTEXT).template
    (alarm,) = [
        r["Properties"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::CloudWatch::Alarm"
        and str(r["Properties"]["AlarmName"]).endswith("nova-rollouts-near-timeout")
    ]
    state = _next_state(alarm, "OK", alarm["Threshold"] + 60)  # a request has waited past the alarm fraction
    assert state == "ALARM"
    assert _next_state(alarm, state, MISSING) == "ALARM"  # the sweeper failed this minute
    assert _next_state(alarm, state, 0.0) == "OK"  # answered: the sweeper says so
