"""Which xdist group the running test is in, for the one rule the harness enforces: a CDK synth (~15-30 s of
CPU and a Node process) happens only on the worker that runs the ``cdk`` group. A test outside the group that
reaches a synth (through a fixture, or the IAM check that looks up a handler's function in the template) makes
the other worker synthesize the same app again (tests/conftest.py sets this; tests/aws/harness.py checks it)."""

from __future__ import annotations

CDK_GROUP = "cdk"

#: (node id, xdist group or None) of the test being set up, run or torn down; None between tests.
running: tuple[str, str | None] | None = None


def check_may_synthesize() -> None:
    if running is not None and running[1] != CDK_GROUP:
        raise RuntimeError(
            f"{running[0]} synthesizes the CDK app outside xdist_group({CDK_GROUP!r}): mark the test (or its module) "
            f"with pytest.mark.xdist_group({CDK_GROUP!r}) so one worker synthesizes for the whole run"
        )
