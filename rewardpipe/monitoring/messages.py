"""The sentences the monitor writes: verdict and alarm messages, with advice for known causes."""

from __future__ import annotations

import math
from typing import Any

from rewardpipe.monitoring.alarms import AGGREGATE_TARGET
from rewardpipe.monitoring.statistics import AGG


def fmt(value: float | None) -> str:
    if value is None:
        return "n/a"
    if not math.isfinite(value):
        return str(value)
    if abs(value) < 1e-12:
        value = 0.0  # float noise (a std of 5.6e-17) reads as a real spread in a message
    return f"{value:.4g}" if value != int(value) or abs(value) >= 1e6 else f"{value:.1f}"


def pct(fraction: float | None) -> str:
    if fraction is None:
        return "n/a"  # as fmt() writes a value not computed
    return f"{100 * fraction:.0f}%"


def label(name: str) -> str:
    return "the aggregate reward" if name in (AGGREGATE_TARGET, AGG) else name


#: Extra advice for known (component, cause) pairs; the generic text covers everything else.
HINTS: dict[tuple[str, str], str] = {
    ("correctness", "constant_at_minimum"): "are the tests running the model's code? (entry-point name mismatch, "
    "an import that fails, or a harness set-up error makes every test fail before its assertion)",
    ("asked_before_coding", "constant_at_minimum"): "no rollout asks and then commits code: is the bonus "
    "gated on something the policy cannot reach?",
    ("asked_before_coding", "constant_at_maximum"): "every rollout already asks first and commits; consider "
    "lowering its weight so the sparse correctness signal can move the policy",
    ("guessed_immediately", "constant_at_minimum"): "every rollout commits code on its first turn without "
    "asking: the policy has collapsed to guessing",
}


def dead_message(name: str, cause: str, s: dict[str, Any], cancelling: list[str]) -> str:
    text = _dead_message(name, cause, s, cancelling)
    if unweighted(s) and cause != "penalty_never_fires":
        text += "; its weight is 0, so it moves no reward: GRPO loses nothing by it now (weight it to train on it)"
    if s.get("errors_left_out"):
        errors, records, groups = s["errors_left_out"]
        text += (
            f" ({errors} of this step's {records} records ({pct(errors / records)}) are errors, left out, so its "
            f"groups kept {(records - errors) / groups:.1f} scored rollouts on average of {records / groups:.1f}: the "
            f"fewer a group keeps, the likelier it is constant; see the error-rate alarm)"
        )
    at_scale, size = s.get("scale_zero_groups") or (0, None)
    if at_scale and cause not in ("no_values", "sparse_values"):
        text += (
            f" (in {at_scale} of those groups it does change, but by less than epsilon times its size, about "
            f"{fmt(size)}: changes that small beside the values are float rounding, no signal to trust; a component "
            f"with a large constant offset drowns the others' changes in the reward)"
        )
    sparse = s.get("sparse_groups", 0)
    if sparse and cause != "sparse_values":
        text += (
            f" ({sparse} of those {s['eligible_groups']} groups have a finite value in only one rollout: "
            f"{s['missing']} None, {s['non_finite']} NaN or inf at this step)"
        )
    elif cause not in ("no_values", "sparse_values") and (s.get("missing") or s.get("non_finite")):
        # a component whose only difference inside groups is a None or a NaN: said, not hidden behind the numbers
        text += (
            f" ({s['missing']} None, {s['non_finite']} NaN or inf in scored rollouts at this step, left out: "
            f"the values it has are what is constant)"
        )
    return text


def rarely_varies(s: dict[str, Any]) -> str:
    """For a component constant at one end of its range in most groups but varying in some: that it can vary, and
    for a known range the chance that a group of K rollouts varies at the step's rate p of rollouts off that end,
    1 - (1 - p)^K - p^K (exact for a binary outcome: at p = 2 %, 8 % of groups of 4 and 15 % of groups of 8), so
    a reader can tell a rare success from a scorer that never lets it vary. "" when no group varied."""
    varying, k = s.get("varying_groups", 0), s.get("group_size", 0)
    if not varying:
        return ""
    text = f"it varies in {varying} of {s['eligible_groups']} groups, so it can vary, only rarely"
    # (only for a component constant at one end: one constant within groups at several values has no one end to
    # count a rate of rollouts off, and its constant_value is None)
    end = s.get("constant_value")
    if s.get("range_known") and s.get("range") and s["mean"] is not None and end is not None and k >= 2:
        lo, hi = s["range"]
        rate = abs(s["mean"] - end) / (hi - lo) if hi > lo else 0.0
        if 0.0 < rate < 1.0:
            chance = 1 - (1 - rate) ** k - rate**k
            text += (
                f" (a binary outcome varies in {pct(chance)} of groups of {k} at a rate of "
                f"{100 * rate:.2g}% off {fmt(end)}: the dead threshold is a rate that depends on the group size)"
            )
    return text


def unweighted(s: dict[str, Any]) -> bool:
    """Whether the records weight the component 0 (``s["weight"]``, set for components, never the aggregate):
    advice to lower its weight would be wrong, and its death costs the reward nothing."""
    return s.get("weight") == 0


def _dead_message(name: str, cause: str, s: dict[str, Any], cancelling: list[str]) -> str:
    who = label(name)
    frac = s["zero_variance_group_fraction"]
    share = f"{pct(frac)} of groups ({s['zero_variance_groups']}/{s['eligible_groups']})"
    value = fmt(s["constant_value"])
    hint = HINTS.get((name, cause))
    if cause in ("constant_at_minimum", "constant_at_maximum", "penalty_never_fires"):
        at = s["at_value_groups"]
        share = f"{pct(at / s['eligible_groups'])} of groups ({at}/{s['eligible_groups']})"
        if at < s["zero_variance_groups"]:
            share += f"; {pct(frac)} of groups are constant"
    rare = rarely_varies(s)
    if s.get("penalty_fires"):
        end = "minimum" if cause == "constant_at_minimum" else "maximum"
        return (
            f"{who} is {value} (its {end}, where the penalty fires) in every rollout of {share}: a penalty that fires "
            f"on every rollout of a group separates none of them"
            + (f"; {rare}" if rare else "")
            # (a known component's own advice names the collapse better than the generic question)
            + f"; {hint or 'is its condition too broad, or inverted?'}"
        )
    if cause == "constant_at_minimum":
        where = "its minimum" if s["range_known"] else "the lowest value seen at this step"
        text = f"{who} is {value} ({where}) in every rollout of {share}: it gives GRPO no signal there; "
        if rare:  # it can leave its minimum: the hints suspect a scorer or a gate that never lets it
            return text + rare + "; more rollouts per prompt, easier prompts or a denser reward give it signal"
        return text + (
            hint or "is it ever triggered? A scorer that never runs, or a gate nothing reaches, looks like this"
        )
    if cause == "penalty_never_fires":
        if rare:
            return (
                f"{who} is at its maximum {value} in every rollout of {share}: the penalty fires rarely, so it adds "
                f"little to learning now: {rare}; that is expected for a rarely triggered penalty, so this is "
                f"info, not an alarm (alarm_idle_penalties / --alarm-idle-penalties to alarm on it)"
            )
        return (
            f"{who} is at its maximum {value} in every rollout of {share}: the penalty never fires, so it "
            f"adds nothing to learning now; that is expected for a rarely triggered penalty, so this is "
            f"info, not an alarm (alarm_idle_penalties / --alarm-idle-penalties to alarm on it)"
        )
    if cause == "constant_at_maximum":
        where = "its maximum" if s["range_known"] else "the highest value seen at this step"
        text = f"{who} constant at {where} {value} in every rollout of {share}: "
        if rare:
            text += rare + "; "
        if unweighted(s):  # the hints and the advice below are about its weight
            return text + "saturated: it no longer separates rollouts"
        if hint:
            return text + "saturated; " + hint
        if s["range_known"] and s["range"][1] == 0.0 and s["range"][0] < 0.0:
            return text + (
                "the penalty never fires, so it contributes nothing to learning (alarming because "
                "idle penalties were asked to alarm)"
            )
        return text + "saturated: it no longer separates rollouts; consider lowering its weight or raising the bar"
    if cause == "no_values":
        return (
            f"{who} has no value in any scored rollout ({s['missing']} None, {s['non_finite']} NaN or inf, in "
            f"{s['eligible_groups']} groups): it gives GRPO no signal at all; does it return None, or fail to a NaN, "
            f"for every rollout?"
        )
    if cause == "sparse_values":
        eligible, sparse = s["eligible_groups"], s["sparse_groups"]
        return (
            f"{who} has a finite value in at most 1 of {s['rollouts_per_group']} rollouts in {sparse} of {eligible} "
            f"groups ({s['missing']} None, {s['non_finite']} NaN or inf; {s['values']} values): a group with one "
            f"value gives GRPO no comparison, so it gives no signal in {pct(s['zero_variance_group_fraction'])} of "
            f"groups; does it return None, or fail to a NaN, for all but one rollout of a prompt?"
        )
    if cause == "constant_everywhere":
        return (
            f"{who} is {value} in every scored rollout ({s['values']} values, std {fmt(s['std'])}): it varies "
            f"neither inside nor across groups and only shifts every reward by a constant; is it computed "
            f"from the rollout at all?"
        )
    if cause == "components_cancel":
        return (
            f"{who} is constant inside {share} although {', '.join(cancelling)} still vary inside groups: "
            f"their weighted changes cancel (opposite signs with equal weights) or their weights are 0, so "
            f"the whole reward gives no gradient"
        )
    # constant_within_groups
    text = (
        f"{who} is constant inside {share} although it varies across the batch (batch std "
        f"{fmt(s['std'])}, mean within-group std {fmt(s['within_group_std_mean'])}): it depends on the "
        f"prompt, not on the response, so GRPO learns nothing from it; batch std hides this, group std shows it"
    )
    if s.get("per_prompt"):
        end, at_end, elsewhere, penalty = s["per_prompt"]
        text += (
            f" (it is {fmt(end)} in every rollout of {at_end} group(s) and another value in every rollout of "
            f"{elsewhere}: set per prompt, not per rollout"
            + ("; a penalty that fires on whole groups reads the task, not what the model did" if penalty else "")
            + ")"
        )
    return text


#: ``kind`` of the warning for a run whose every group holds one rollout (see :func:`run_warnings`).
SINGLE_ROLLOUT_GROUPS = "single_rollout_groups"
#: ``kind`` of the warning for a component with values outside its declared range.
VALUES_OUT_OF_RANGE = "values_out_of_range"
#: ``kind`` of the warning for a component the records of some steps leave out altogether.
COMPONENT_ABSENT = "component_absent"
#: ``kind`` of the warning for steps where the rule-based user replaced the LLM-played one in many rollouts.
USER_REPLACED = "llm_user_replaced"
#: The share of a step's records with ``llm_user_fallbacks`` > 0 from which that step is named in the warning: a
#: reply the rules cannot vet now and then is by design; one rollout in ten is a simulator that is failing.
USER_REPLACED_SHARE = 0.1


def run_warnings(reports: list[Any]) -> list[dict[str, str]]:
    """Warnings about the run as a whole (each ``{"kind", "message"}``), apart from verdicts and alarms.

    ``single_rollout_groups``: every group of every step holds one record. GRPO's advantage compares a rollout with
    the others of its group, so the monitor judges nothing: each verdict stays ``insufficient_data``, no pool of
    such steps reaches one, and no alarm can ever be raised. Each step said so in a verdict's message only; a run
    of ``-k 1`` (or a group id per rollout) read as "no alarms". One group of two records anywhere: no warning.

    ``values_out_of_range``: a component held values outside its declared range (``--range``, the reward's own),
    which the verdicts read for their cause; named with its steps and the values seen.

    ``component_absent``: a component given at some steps is missing from every scored record of others.

    ``llm_user_replaced``: at some steps, in at least USER_REPLACED_SHARE of the records, the environment's
    LLM-played user was replaced by its rule-based user (the record's ``llm_user_fallbacks`` metric): those rollouts
    were trained against another user than the one configured, which no verdict shows."""
    return (
        _single_rollout_groups(reports)
        + _values_out_of_range(reports)
        + _components_absent(reports)
        + _user_replaced(reports)
    )


def _user_replaced(reports: list[Any]) -> list[dict[str, str]]:
    """``llm_user_replaced``: the steps where the rule-based user replaced the LLM-played one in many records."""
    counted = [r for r in reports if r.records and getattr(r, "user_fallback_records", 0)]
    steps = [r for r in counted if r.user_fallback_records / r.records >= USER_REPLACED_SHARE]
    if not steps:
        return []
    replaced, records = sum(r.user_fallback_records for r in steps), sum(r.records for r in steps)
    shown = _first_steps([r.step for r in steps])
    return [
        {
            "kind": USER_REPLACED,
            "message": (
                f"the simulated user: the rule-based user replaced the LLM-played user in {replaced} of {records} "
                f"rollouts ({pct(replaced / records)}) of {len(steps)} step(s) ({shown})"
                f": those rollouts were played against the rule-based user, not the configured model; the records' "
                f"llm_user_no_text counts replies with no text (the user's max_tokens too low?), the others were "
                f"replies the rules could not vet or a failing user endpoint"
            ),
        }
    ]


def _components_absent(reports: list[Any]) -> list[dict[str, str]]:
    """``component_absent``: a component the records give at some steps is absent from every scored record of
    another. Given as ``null`` it is judged (``dead``, ``no_values``) and alarmed; left out of the records it
    vanished from that step's table without a word, however long it stayed away."""
    seen = {name for report in reports for name in report.components}
    warnings = []
    for name in sorted(seen):
        gone = [report.step for report in reports if report.scored and name not in report.components]
        if gone:
            shown = _first_steps(gone)
            warnings.append(
                {
                    "kind": COMPONENT_ABSENT,
                    "message": (
                        f"{label(name)[:80]} is absent from every scored record of {len(gone)} step(s) ({shown}) and "
                        f"so not judged there, though other steps' records give it: a scorer that stopped reporting "
                        f"it? (a component with no value should be given as null, which is judged)"
                    ),
                }
            )
    return warnings


def _first_steps(steps: list[int]) -> str:
    """The first ten of ``steps``, and "..." if there are more."""
    return ", ".join(map(str, steps[:10])) + (", ..." if len(steps) > 10 else "")


def _values_out_of_range(reports: list[Any]) -> list[dict[str, str]]:
    """``values_out_of_range``: per component, the steps where a group held a value outside its declared range
    (a scorer returning what it says it never does, or a range declared wrong: either way its verdicts, which
    read the range for their cause, are not to be trusted as they are)."""
    found: dict[str, list[tuple[int, int, Any, Any]]] = {}
    for report in reports:
        for name, stats in report.components.items():
            if getattr(stats, "out_of_range_groups", 0):
                found.setdefault(name, []).append((report.step, stats.out_of_range_groups, stats.min, stats.max))
    warnings = []
    for name, steps in found.items():
        shown = _first_steps([step for step, *_ in steps])
        low = min(s[2] for s in steps if s[2] is not None)
        high = max(s[3] for s in steps if s[3] is not None)
        groups = sum(s[1] for s in steps)
        warnings.append(
            {
                "kind": VALUES_OUT_OF_RANGE,
                "message": (
                    f"{label(name)[:80]} has values outside its declared range in {groups} group(s) at "
                    f"{len(steps)} step(s) ({shown}; seen {low:g} to {high:g}): fix the scorer, or declare the range "
                    f"it really has (--range {name[:80]}=LO:HI)"
                ),
            }
        )
    return warnings


def _single_rollout_groups(reports: list[Any]) -> list[dict[str, str]]:
    measured = [report for report in reports if report.records]
    if not measured or any(report.records > report.groups for report in measured):
        return []
    rollouts = sum(report.records for report in measured)
    steps = len(measured)
    return [
        {
            "kind": SINGLE_ROLLOUT_GROUPS,
            "message": (
                f"every group of the steps judged holds one rollout ({rollouts} rollouts in {rollouts} groups over "
                f"{steps} step{'s' if steps != 1 else ''}): GRPO compares a rollout with the others of its group, so "
                f"no verdict can be reached (each stays insufficient_data) and no alarm can be raised, whatever the "
                f"rewards do; give each prompt 2 or more rollouts under one group_id (`run --group-size`, TRL's "
                f"num_generations, verl's rollout.n)"
            ),
        }
    ]
