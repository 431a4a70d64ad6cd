"""Evidence for an alarm: a few rollouts chosen to show *why* the verdict was reached.

Every dead, dying and error-rate alarm carries ``examples``: up to :data:`EXAMPLES_PER_ALARM` rollouts
from the step's sample of full groups (:data:`rewardpipe.monitoring.statistics.SAMPLE_GROUPS`), each with
``rollout_id``, ``group_id``, ``step``, ``transcript_key`` (relative to the store root, where the runner
stores the rollout's transcript) and ``reason``. What is chosen depends on the cause:

* an outcome component (correctness) dead at its minimum: rollouts whose code ran and failed, with the
  failing test's reason, before timeouts and rollouts that committed no code;
* a bonus never earned (``unreachable_gate``): the closest misses (for asked_before_coding: rollouts that
  asked but did not commit, or committed without asking; otherwise the best total reward);
* any other dead or dying component: rollouts from different zero-variance groups, with what they did
  (turns, questions, committed code) when the reward recorded it;
* the aggregate cancelling: rollouts of one constant group whose components differ;
* error rate: error records with their error kind and message.

Reasons can quote what the model wrote (exception text): they are cut to :data:`REASON_CHARS` characters
with control and format characters shown as escapes (``\\x1b``), so they are safe in a terminal, JSON, HTML (the
report escapes its text) and an SNS message.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from rewardpipe.models import is_score
from rewardpipe.monitoring.alarms import AGGREGATE_TARGET, ERRORS_TARGET, Alarm
from rewardpipe.monitoring.messages import fmt
from rewardpipe.monitoring.statistics import AGG, SampledRollout, StepAcc, lone_value_groups, zero_variance_groups
from rewardpipe.monitoring.thresholds import Thresholds, varies
from rewardpipe.safe_text import printable
from rewardpipe.store import transcript_key  # the one key function the runner writes transcripts with

EXAMPLES_PER_ALARM = 3
REASON_CHARS = 300


@dataclass
class Example:
    rollout_id: str
    group_id: str
    step: int
    transcript_key: str | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def clean(text: Any, limit: int = REASON_CHARS) -> str:
    """One printable line of at most ``limit`` characters: control and format characters (ANSI escapes, bidi
    overrides, line breaks, tabs) shown as visible escapes (``\\x1b``), as every other output shows them
    (:func:`rewardpipe.safe_text.printable`); a cut never splits an escape."""
    pieces = [printable(char, keep_newlines=False).replace("\t", "\\x09") for char in str(text)[: limit + 1]]
    if sum(map(len, pieces)) <= limit:
        return "".join(pieces)
    kept, size = [], 0
    for piece in pieces:
        if size + len(piece) > limit - 3:
            break
        kept.append(piece)
        size += len(piece)
    return "".join(kept) + "..."


def _value(r: SampledRollout, component: str) -> float | None:
    return r.aggregate if component == AGGREGATE_TARGET else r.components.get(component)


def _valued(rollouts: Sequence[SampledRollout], component: str) -> list[SampledRollout]:
    """The scored rollouts where ``component`` (or the aggregate) has a number: the ones its verdict was judged on.
    A rollout where it is None, NaN or inf shows nothing of a constant value or a missed bonus."""
    return [r for r in rollouts if r.status == "scored" and is_score(_value(r, component))]


def _constant_groups(acc: StepAcc, component: str, eps: float) -> list[tuple[list[SampledRollout], int]]:
    """The sampled groups where ``component`` is constant (zero variance as the step's figures count it), each as
    its rollouts that have a value, with the number of its scored rollouts that have none (None, NaN or inf)."""
    groups = []
    weight = None if component == AGGREGATE_TARGET else acc.weights.get(component)
    for rollouts in acc.sample.values():
        valued = _valued(rollouts, component)
        values = [_value(r, component) or 0.0 for r in valued]
        if len(values) >= 2 and not varies(values, eps, weight):
            groups.append((valued, sum(1 for r in rollouts if r.status == "scored") - len(valued)))
    return groups


def _unsampled_constant_leads(acc: StepAcc, component: str, eps: float, wanted: int) -> list[SampledRollout]:
    """Up to ``wanted`` rollouts of zero-variance groups outside the step's sample (its first groups), one a group
    (its first scored rollout, where it has a value): the evidence of a component the first groups do not show
    constant (they are another task's, or the few that still vary). Such an alarm had no example at all."""
    name = AGG if component == AGGREGATE_TARGET else component
    leads: list[SampledRollout] = []
    if wanted <= 0:  # (the sample showed enough groups: no lead rebuilt for nothing)
        return leads
    for group in zero_variance_groups(name, acc, eps):
        if len(leads) == wanted:
            break
        lead = acc.lead(group) if group not in acc.sample else None
        if lead is not None and is_score(_value(lead, component)):
            leads.append(lead)
    return leads


def _unsampled_lead_off(acc: StepAcc, component: str, eps: float, shown: str) -> list[SampledRollout]:
    """The first rollout of the first zero-variance group beyond the sample whose value is not ``shown`` (as
    :func:`fmt` writes it), read from the per-group table before any rollout is rebuilt; [] when there is none."""
    name = AGG if component == AGGREGATE_TARGET else component
    table = acc.table.get(name)
    if table is None:
        return []
    index = {key: i for i, key in enumerate(acc.groups)}
    for group in zero_variance_groups(name, acc, eps):
        if group in acc.sample or fmt(float(table.minimum[index[group]])) == shown:
            continue
        lead = acc.lead(group)
        if lead is not None and is_score(_value(lead, component)):
            return [lead]
    return []


def _cancelling_leads(acc: StepAcc, eps: float) -> list[tuple[Any, SampledRollout, str]]:
    """For an aggregate whose components cancel and whose sampled groups do not show it: the first rollouts of
    groups beyond the sample where the aggregate is constant although a component varies, naming the components."""
    varying: dict[Any, list[str]] = {}
    for name in sorted(n for n in acc.table if n != AGG):
        for group in zero_variance_groups(name, acc, eps, varying=True):
            varying.setdefault(group, []).append(name)
    ranked: list[tuple[Any, SampledRollout, str]] = []
    for group in zero_variance_groups(AGG, acc, eps):
        lead = acc.lead(group) if group in varying and group not in acc.sample else None
        if lead is not None and is_score(lead.aggregate):
            names = ", ".join(varying[group])
            parts = ", ".join(f"{k}={fmt(v)}" for k, v in sorted(lead.components.items()))
            reason = f"aggregate {fmt(lead.aggregate)}, like its whole group, from {parts} ({names} vary inside it)"
            ranked.append((0, lead, clean(reason)))
        if len(ranked) == EXAMPLES_PER_ALARM:
            break
    return ranked


def _execution_reason(r: SampledRollout) -> tuple[int, str]:
    """(rank, reason) of a rollout for "why did the tests give nothing": ran-and-failed ranks first."""
    m = r.metrics
    status = m.get("exec_status")
    detail = f": {m['exec_reason']}" if m.get("exec_reason") else ""
    if status == "failed":
        if m.get("exec_reason"):
            return 0, f"code ran and failed: {m['exec_reason']}"
        return 0, f"code ran and failed: {m.get('tests_passed', '?')}/{m.get('tests_total', '?')} tests passed"
    if status == "timeout":
        return 1, f"code timed out{detail}"
    if m.get("committed") is False:
        return (
            2,
            f"no code committed ({m.get('assistant_turns', '?')} assistant turns, {m.get('questions', '?')} questions)",
        )
    if status is not None:
        return 3, f"execution {status}{detail}"
    return 4, ""


def _behaviour(r: SampledRollout) -> str:
    """What the rollout did, from the reward's diagnostics (empty when it recorded none)."""
    m = r.metrics
    if "assistant_turns" not in m and "committed" not in m:
        return ""
    code = "committed code" if m.get("committed") else "committed no code"
    return f"{m.get('assistant_turns', '?')} assistant turn(s), {m.get('questions', '?')} question(s), {code}"


def _gate_progress(component: str) -> Callable[[SampledRollout], tuple[float, str]]:
    if component == "asked_before_coding":

        def progress(r: SampledRollout) -> tuple[float, str]:
            questions = r.metrics.get("questions")
            asked = isinstance(questions, (int, float)) and questions > 0  # (a text value asks nothing)
            committed = bool(r.metrics.get("committed"))
            if asked and not committed:
                return 2.0, f"closest miss: asked {r.metrics.get('questions')} question(s) but never committed code"
            if committed and not asked:
                return 1.0, "closest miss: committed code without asking first"
            return 0.0, "neither asked nor committed code"

        return progress

    def best_total(r: SampledRollout) -> tuple[float, str]:
        total = r.aggregate if is_score(r.aggregate) else -math.inf  # no total ranks after every total
        return total / 1e6, f"closest miss: total reward {fmt(r.aggregate)} without earning {component}"

    return best_total


def _spread(ranked: list[tuple[Any, SampledRollout, str]]) -> list[tuple[SampledRollout, str]]:
    """Best first, but one rollout per group before a second from the same group. A group is its step's: the steps
    of a pooled verdict reuse group ids (a trainer callback's batches are all ``g0``, ``g1``...), and taken by id
    alone a pool's examples came from its first step only, a group of it twice."""
    ranked.sort(key=lambda item: item[0])
    chosen, groups = [], set()
    for _, r, reason in ranked:
        group = (getattr(r, "step", None), r.group_id)
        if group not in groups:
            chosen.append((r, reason))
            groups.add(group)
    for _, r, reason in ranked:
        if (r, reason) not in chosen:
            chosen.append((r, reason))
    return chosen[:EXAMPLES_PER_ALARM]


def choose_examples(alarm: Alarm, acc: StepAcc, th: Thresholds, causes: Sequence[str] = ()) -> list[Example]:
    """The rollouts that best explain ``alarm`` (a dead, dying or error-rate alarm) at its step.

    ``causes``: the names of the diagnoses attached to the alarm (``unreachable_gate`` picks closest misses).
    """
    if alarm.kind == "recovered" or alarm.run_id is None:
        return []
    component, eps = alarm.component, th.epsilon
    ranked: list[tuple[Any, SampledRollout, str]] = []
    if component == ERRORS_TARGET:
        for rollouts in acc.sample.values():
            for r in rollouts:
                if r.status != "scored":
                    kind = r.error.kind if r.error else "unknown"
                    ranked.append((0, r, clean(f"error {kind}: {r.error.message if r.error else ''}")))
    elif "unreachable_gate" in causes:
        progress = _gate_progress(component)
        for rollouts in acc.sample.values():
            for r in _valued(rollouts, component):  # a miss is a rollout the bonus was judged in
                score, reason = progress(r)
                ranked.append((-score, r, clean(reason)))
    elif alarm.cause == "no_values":
        for rollouts in acc.sample.values():
            for r in rollouts:
                if r.status == "scored":
                    ranked.append(
                        (0, r, clean(f"{component} = {_value(r, component)!r}, like every rollout of the step"))
                    )
    elif alarm.cause == "sparse_values":
        shown = 0  # two groups: the lone value of each first, then one rollout beside it that has none
        for rollouts in acc.sample.values():
            scored = [r for r in rollouts if r.status == "scored"]
            finite = [r for r in scored if is_score(_value(r, component))]
            if len(scored) < 2 or len(finite) != 1 or shown == 2:
                continue
            shown += 1
            where = f"the only finite value of {len(scored)} in its group"
            ranked.append((0, finite[0], clean(f"{component} = {fmt(_value(finite[0], component))}, {where}")))
            for r in [r for r in scored if r is not finite[0]][:1]:
                ranked.append((1, r, clean(f"{component} = {_value(r, component)!r}: no value to compare with")))
        if not ranked:  # no sampled group shows it (the groups that have the component are the step's later ones)
            for key in lone_value_groups(AGG if component == AGGREGATE_TARGET else component, acc):
                lead = acc.lead(key) if key not in acc.sample else None
                if lead is None:
                    continue
                value = _value(lead, component)
                reason = (
                    f"{component} = {fmt(value)}, the only finite value in its group"
                    if is_score(value)
                    else f"{component} = {value!r}, and its group has one finite value: no comparison"
                )
                ranked.append((0, lead, clean(reason)))
                if len(ranked) == EXAMPLES_PER_ALARM:
                    break
    elif alarm.cause == "within_group_std_decaying":
        # no group is constant yet: the narrowest sampled groups show how little is left to compare
        spreads = []
        for rollouts in acc.sample.values():
            valued = _valued(rollouts, component)
            values = [float(_value(r, component) or 0.0) for r in valued]
            if len(values) >= 2:
                spreads.append((max(values) - min(values), min(values), max(values), valued))
        for spread, low, high, valued in sorted(spreads, key=lambda item: item[0])[:EXAMPLES_PER_ALARM]:
            reason = (
                f"{component} spans {fmt(low)} to {fmt(high)} across the {len(valued)} rollouts of its group "
                f"(range {spread:.3g}): among the step's narrowest groups"
            )
            ranked.append((spread, valued[0], reason))
    elif alarm.cause == "components_cancel":
        for group, _ in _constant_groups(acc, component, eps):
            differing = [r for r in group if r.components != group[0].components]
            for r in ([group[0], *differing[:1]]) if differing else []:
                parts = ", ".join(f"{k}={fmt(v)}" for k, v in sorted(r.components.items()))
                ranked.append((0, r, clean(f"aggregate {fmt(r.aggregate)}, like its whole group, from {parts}")))
            if ranked:
                break
        if not ranked:  # no sampled group shows it (its constant groups are the step's later ones)
            ranked = _cancelling_leads(acc, eps)
    else:
        # Constant within groups, at different values across them: the first group of each value before a second
        # group of any (three groups where a penalty set per prompt is 0 hid the tasks whose groups it fires on).
        seen_values: dict[Any, int] = {}
        for group, without in _constant_groups(acc, component, eps):
            # "every rollout of its group" was said of a group whose other rollouts had a NaN or None, the
            # component's only difference there (left out of the figures: no number to compare)
            others = f" that has a number ({without} other scored rollout(s): None, NaN or inf)" if without else ""
            as_text = fmt(_value(group[0], component))
            repeats = seen_values[as_text] = seen_values.get(as_text, -1) + 1
            for r in group:
                value = _value(r, component)
                if alarm.cause == "constant_at_minimum" and component in th.outcome_components:
                    rank, reason = _execution_reason(r)
                elif alarm.cause == "constant_within_groups":
                    rank, reason = repeats, _behaviour(r)
                else:
                    rank, reason = 0, _behaviour(r)
                base = f"{component} = {fmt(value)}, like every rollout of its group{others}"
                ranked.append((rank, r, f"{reason}; {base}" if reason else base))  # (cleaned once chosen)
        groups = len({(getattr(r, "step", None), r.group_id) for _, r, _ in ranked})
        unsampled = _unsampled_constant_leads(acc, component, eps, EXAMPLES_PER_ALARM - groups)
        if alarm.cause == "constant_within_groups" and len(seen_values) == 1:
            # every sampled constant group at one value: a group beyond the sample at another shows the contrast
            unsampled = _unsampled_lead_off(acc, component, eps, next(iter(seen_values)))[:1] + unsampled
        for r in unsampled:
            as_text = fmt(_value(r, component))
            base = f"{component} = {as_text}, like every rollout of its group that has a number"
            if alarm.cause == "constant_at_minimum" and component in th.outcome_components:
                rank, reason = _execution_reason(r)
            elif alarm.cause == "constant_within_groups":
                rank, reason = seen_values.get(as_text, -1) + 1, _behaviour(r)
                seen_values[as_text] = rank
            else:
                rank, reason = 0, _behaviour(r)
            ranked.append((rank, r, f"{reason}; {base}" if reason else base))  # (cleaned once chosen)
    # A verdict pooled over small steps (rewardpipe.monitoring.pooling) picks rollouts of several steps. A reason is
    # cleaned here, once chosen (clean is idempotent): cleaning every rollout of every constant sampled group, 64 a
    # component for 3 examples, was 60 % of the time of a step with 1,000 components.
    return [
        Example(r.rollout_id, r.group_id, step, _key(alarm, r, step), clean(reason))
        for r, reason in _spread(ranked)
        for step in [getattr(r, "step", alarm.step)]
    ]


def _key(alarm: Alarm, record: Any, step: int) -> str | None:
    """Where the runner stored the rollout's transcript; None for ids no store key can hold (records read
    from a file: a run id too long for a folder name, or none)."""
    try:
        return transcript_key(alarm.run_id, step, record.group_id, record.rollout_id)  # type: ignore[arg-type]
    except ValueError:
        return None
