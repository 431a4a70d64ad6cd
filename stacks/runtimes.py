"""AWS Lambda's published runtime deprecation schedule, as data, and the check every deployment must pass.

After a runtime's *block function create* date, CloudFormation cannot create a function on it (a fresh
``cdk deploy`` fails at the first one); after *block function update*, it cannot update one. The stack's
functions -- ours and the Node.js ones CDK adds for its custom resources -- must stay clear of both:
:func:`runtime_problems` reports every function (and layer) whose runtime is unknown here or within
:data:`MARGIN_DAYS` of a block date, against a given day (the tests use today's date).

Two copies of the schedule are consulted and the earlier date wins, so neither can hide a deadline:

* :data:`SCHEDULE`, transcribed from the Lambda developer guide's runtime tables (:data:`SOURCE`,
  "Supported runtimes" and the Python page, as read on :data:`CHECKED`);
* cfn-lint's ``LmbdRuntimeLifecycle.json`` (maintained by AWS's cfn-lint team from the same tables; its
  W2531/E2531 rules read it), which a cfn-lint upgrade refreshes.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from dataclasses import dataclass
from pathlib import Path

SOURCE = "https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtimes.html#runtimes-supported"
CHECKED = dt.date(2026, 12, 2)
MARGIN_DAYS = 90


@dataclass(frozen=True)
class Lifecycle:
    deprecation: dt.date
    block_create: dt.date
    block_update: dt.date


def _d(text: str) -> dt.date:
    return dt.date.fromisoformat(text)


# identifier: (deprecation, block function create, block function update). The Python rows are the guide's Python
# page ("Building Lambda functions with Python", https://docs.aws.amazon.com/lambda/latest/dg/lambda-python.html)
# as it stands after AWS extended python3.10 and python3.11 in 2026 (the earlier table blocked python3.11 creates
# on 2026-07-31); python3.9 has left that table and keeps its last published dates. nodejs18.x/20.x are the
# runtimes table's dates after their 2026 extension (also quoted in cfn-lint issue 4531); nodejs22.x/24.x are as
# cfn-lint 1.58.0's copy states them.
SCHEDULE: dict[str, Lifecycle] = {
    "python3.14": Lifecycle(_d("2029-06-30"), _d("2029-07-31"), _d("2029-08-31")),
    "python3.13": Lifecycle(_d("2029-06-30"), _d("2029-07-31"), _d("2029-08-31")),
    "python3.12": Lifecycle(_d("2028-10-31"), _d("2028-11-30"), _d("2029-01-10")),
    "python3.11": Lifecycle(_d("2027-06-30"), _d("2027-07-31"), _d("2027-08-31")),
    "python3.10": Lifecycle(_d("2026-10-31"), _d("2027-02-01"), _d("2027-03-03")),
    "python3.9": Lifecycle(_d("2025-12-15"), _d("2026-02-03"), _d("2026-03-09")),
    "nodejs24.x": Lifecycle(_d("2028-04-30"), _d("2028-06-01"), _d("2028-07-01")),
    "nodejs22.x": Lifecycle(_d("2027-04-30"), _d("2027-06-01"), _d("2027-07-01")),
    "nodejs20.x": Lifecycle(_d("2026-04-30"), _d("2027-02-01"), _d("2027-03-03")),
    "nodejs18.x": Lifecycle(_d("2025-09-01"), _d("2027-02-01"), _d("2027-03-03")),
}


@functools.cache
def cfn_lint_schedule() -> dict[str, Lifecycle]:
    """cfn-lint's copy of the schedule ({} where cfn-lint is not installed: the runtime install lacks it)."""
    try:
        import cfnlint
    except ImportError:
        return {}
    path = Path(cfnlint.__file__).parent / "data" / "AdditionalSpecs" / "LmbdRuntimeLifecycle.json"
    data = json.loads(path.read_text())
    return {
        name: Lifecycle(_d(v["deprecated"]), _d(v["create-block"]), _d(v["update-block"]))
        for name, v in data.items()
        if all(isinstance(v.get(k), str) for k in ("deprecated", "create-block", "update-block"))
    }


def earliest(runtime: str) -> Lifecycle | None:
    """The runtime's dates, each the earlier of the two copies (None if neither knows the runtime)."""
    copies = [c for c in (SCHEDULE.get(runtime), cfn_lint_schedule().get(runtime)) if c is not None]
    if not copies:
        return None
    return Lifecycle(
        min(c.deprecation for c in copies), min(c.block_create for c in copies), min(c.block_update for c in copies)
    )


def runtime_problems(template: dict, today: dt.date, margin_days: int = MARGIN_DAYS) -> list[str]:
    """Every Lambda function or layer of ``template`` whose runtime is unknown, or is blocked for creates or
    updates within ``margin_days`` of ``today``."""
    problems = []
    for logical_id, resource in template.get("Resources", {}).items():
        props = resource.get("Properties") or {}
        if resource["Type"] == "AWS::Lambda::Function":
            runtimes = [props["Runtime"]] if "Runtime" in props else []  # a container image has none
        elif resource["Type"] == "AWS::Lambda::LayerVersion":
            runtimes = list(props.get("CompatibleRuntimes", []))
        else:
            continue
        for runtime in runtimes:
            if not isinstance(runtime, str):
                problems.append(f"{logical_id}: runtime {runtime!r} is not a literal; it cannot be checked")
                continue
            dates = earliest(runtime)
            if dates is None:
                problems.append(
                    f"{logical_id}: runtime {runtime} is not in the deprecation schedule "
                    f"(stacks/runtimes.py; add its row from {SOURCE})"
                )
                continue
            horizon = today + dt.timedelta(days=margin_days)
            for what, day in (("function create", dates.block_create), ("function update", dates.block_update)):
                if day <= horizon:
                    problems.append(
                        f"{logical_id}: {runtime} blocks {what} on {day.isoformat()}, "
                        f"{(day - today).days} days after {today.isoformat()} (less than "
                        f"{margin_days}); move to a newer runtime"
                    )
                    break
    return problems
