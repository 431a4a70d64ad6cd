"""Round thirty-four, the deploy's settings and template against the real services' rules.

* The settings reference (docs/reference/settings.md) listed only the top-level model's checks across settings: the
  Fargate cpu/memory pair rule the settings enforce (round thirty-three) was on no page, and ``fargate.cpu`` was
  described by a note to developers. Every nested settings model's checks are listed now, under their keys, and the
  Fargate rule names each CPU size's memory sizes as the check does.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.xdist_group("cdk")


def test_the_settings_reference_states_the_fargate_size_rule_for_every_cpu():
    from scripts import gen_docs
    from stacks.config import FARGATE_MEMORY_MIB

    page = gen_docs.render_settings()
    (rule,) = [line for line in page.splitlines() if "`fargate.memory_mib`" in line and "`fargate.cpu`" in line]
    for cpu, sizes in FARGATE_MEMORY_MIB.items():
        step = sizes[1] - sizes[0]
        named = ", ".join(map(str, sizes)) if len(sizes) <= 4 else f"{sizes[0]} to {sizes[-1]} in steps of {step}"
        assert f"{cpu}: {named}" in rule, (cpu, rule)


def test_every_nested_settings_model_check_is_on_the_settings_page():
    import inspect

    from pydantic import BaseModel

    from scripts import gen_docs

    page = gen_docs.render_settings()

    def models(model):
        yield model
        for field in model.model_fields.values():
            if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
                yield from models(field.annotation)

    checked = 0
    for context_key, reference, _ in gen_docs.SETTINGS_MODELS:
        if context_key != "rewardpipe":
            continue  # the Nova bridge's settings have owners of their own
        for model in models(gen_docs.load_model(reference)):
            for decorator in model.__pydantic_decorators__.model_validators.values():
                doc = inspect.getdoc(decorator.func)
                assert doc, f"{model.__name__}.{decorator.func.__name__} checks settings and says nothing"
                assert " ".join(doc.split()) in page, (model.__name__, doc)
                checked += 1
    assert checked >= 6


def test_fargate_cpu_is_described_for_users():
    from scripts import gen_docs

    (row,) = [line for line in gen_docs.render_settings().splitlines() if line.startswith("| `fargate.cpu`")]
    assert "Literal" not in row and "16384" in row


# -- IAM policy sizes, checked at synth ----------------------------------------------------------------------------
# Round thirty-three measured every policy against IAM's quotas in a test only: a deployment whose grants outgrew a
# role (a judge secret, more turn channels, a longer stack name) synthesized cleanly and failed at that role, halfway
# through the deployment. aws-cdk moves what does not fit a role's inline policy into managed OverflowPolicy ones,
# and a role may have 10 attached. The synth fails now, naming the role, its figure and the quota.


def _role_with_grants(count: int):
    """A role sent to ``count`` queues: each grant names a queue ARN CloudFormation fills in, which aws-cdk counts
    at its placeholder's length when it decides what fits the role's inline policy, and IAM at its real one."""
    from aws_cdk import App, Stack
    from aws_cdk import aws_iam as iam
    from aws_cdk import aws_sqs as sqs

    from stacks.limits import PolicySizeValidation

    app = App()
    stack = Stack(app, "s")
    role = iam.Role(stack, "Worker", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    for index in range(count):
        sqs.Queue(stack, f"Q{index}").grant_send_messages(role)
    stack.node.add_validation(PolicySizeValidation(stack))
    return app


def _role_with_statements(count: int):
    from aws_cdk import App, Stack
    from aws_cdk import aws_iam as iam

    from stacks.limits import PolicySizeValidation

    app = App()
    stack = Stack(app, "s")
    role = iam.Role(stack, "Worker", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    for index in range(count):
        role.add_to_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[f"arn:aws:s3:::b/p-{index}/*"]))
    stack.node.add_validation(PolicySizeValidation(stack))
    return app


def test_a_role_with_more_managed_policies_than_iam_attaches_fails_the_synth_naming_it():
    with pytest.raises(Exception, match=r"s/Worker/Resource: 1\d managed policies attached to the role .* 10 by"):
        _role_with_statements(900).synth()


def test_a_role_within_the_quotas_synthesizes():
    assert _role_with_grants(80).synth().get_stack_by_name("s").template["Resources"]
    assert _role_with_statements(400).synth().get_stack_by_name("s").template["Resources"]


def test_the_deployed_stack_checks_its_policies_at_synth(monkeypatch):
    import stacks.limits as limits
    from stacks.rewardpipe_stack import RewardPipeStack
    from tests.aws import harness

    stack = harness.synthesized().stack
    assert isinstance(stack, RewardPipeStack)
    assert stack.node.validate() == []
    monkeypatch.setattr(limits, "ROLE_POLICY_CHARS", 100)
    monkeypatch.setattr(limits, "TRUST_POLICY_CHARS", 50)
    problems = stack.node.validate()
    assert any("Score" in p and "inline policies" in p for p in problems)
    assert any("trust policy" in p for p in problems)


def test_the_streak_alarms_say_how_many_runs_carry_their_own_series(resources):
    """Round thirty-four capped the runs with per-run DeadStreak/ErrorStreak series (RUN_METRIC_RUNS); the alarms'
    descriptions said the run dimension names the failing run, which is untrue past the cap."""
    from rewardpipe.aws.monitoring import RUN_METRIC_RUNS

    streak_alarms = [
        r["Properties"]
        for r in resources.values()
        if r["Type"] == "AWS::CloudWatch::Alarm" and r["Properties"].get("MetricName") in ("DeadStreak", "ErrorStreak")
    ]
    assert streak_alarms
    for alarm in streak_alarms:
        assert f"first {RUN_METRIC_RUNS} active runs" in alarm["AlarmDescription"], alarm["AlarmDescription"]
