"""Round thirty-three (part 4): CloudWatch and CloudFormation limits of the monitoring construct, which moto and
cdk synth do not check."""

from __future__ import annotations

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from stacks.constructs.monitoring import TEMPLATE_MAX_RESOURCES, ResourceCountValidation

pytestmark = pytest.mark.xdist_group("cdk")


def _stack_with(resources: int) -> tuple[App, Stack]:
    app = App()
    stack = Stack(app, "s")
    holder = Construct(stack, "Holder")
    for index in range(resources):
        sqs.CfnQueue(holder, f"Q{index}")
    holder.node.add_validation(ResourceCountValidation(stack, resources))
    return app, stack


def test_a_stack_over_cloudformations_resource_limit_fails_the_synth_naming_it():
    # one dead-component alarm per reward component: ~400 components made a template CloudFormation refuses at
    # deploy time ("Number of resources ... is greater than maximum allowed, 500"), after a clean synth
    app, _ = _stack_with(TEMPLATE_MAX_RESOURCES + 1)
    with pytest.raises(Exception, match="501 resources, over CloudFormation's 500"):
        app.synth()


def test_a_stack_at_the_limit_synthesizes():
    app, _ = _stack_with(TEMPLATE_MAX_RESOURCES)
    assert app.synth().get_stack_by_name("s").template["Resources"]


def test_the_deployed_stack_counts_its_resources_and_has_room(synth, monkeypatch):
    import stacks.constructs.monitoring as monitoring

    resources = synth.template["Resources"]
    assert len(resources) <= TEMPLATE_MAX_RESOURCES
    (construct,) = [n for n in synth.stack.node.find_all() if isinstance(n, monitoring.Monitoring)]
    assert construct.node.validate() == []
    monkeypatch.setattr(monitoring, "TEMPLATE_MAX_RESOURCES", 10)  # the check is there, and counts the whole stack
    (error,) = construct.node.validate()
    assert f"declares {len(resources)} resources" in error
