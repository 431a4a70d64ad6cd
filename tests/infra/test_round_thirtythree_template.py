"""Round thirty-three, the synthesized template against the limits of the real services.

* ``fargate.cpu`` was checked against Fargate's CPU units and ``fargate.memory_mib`` only against the sandbox's
  needs, never the pair: ``{"cpu": 256, "memory_mib": 8192}`` or ``{"cpu": 1024, "memory_mib": 2500}`` synthesized,
  and ECS's RegisterTaskDefinition refused the task definition when the stack was deployed ("Invalid 'cpu' setting
  for task"), halfway through the deployment. The settings refuse a pair Fargate does not offer, naming the sizes
  it does; the synthesized task definition is checked against the same table.
* IAM's policy size quotas were checked nowhere (moto enforces none): every role's inline policies together, every
  managed policy and every trust policy are measured as IAM counts them, with each value CloudFormation fills in at
  its longest, in the default and the Nova bridge configurations (a guard: every policy fits today).
"""

from __future__ import annotations

import pytest

from stacks.config import SettingsError, load_settings

pytestmark = pytest.mark.xdist_group("cdk")

# The Amazon ECS Developer Guide's table ("Troubleshoot Amazon ECS task definition invalid CPU or memory errors"),
# as written there, in GB: 256 (.25 vCPU) 512 MiB, 1 GB, 2 GB; 512: 1 to 4 GB; 1024: 2 to 8 GB; 2048: 4 to 16 GB in
# 1 GB steps; 4096: 8 to 30 GB in 1 GB steps; 8192: 16 to 60 GB in 4 GB steps; 16384: 32 to 120 GB in 8 GB steps.
DOCUMENTED_GB = {
    256: [0.5, 1, 2],
    512: [1, 2, 3, 4],
    1024: [2, 3, 4, 5, 6, 7, 8],
    2048: list(range(4, 17)),
    4096: list(range(8, 31)),
    8192: list(range(16, 61, 4)),
    16384: list(range(32, 121, 8)),
}


def _documented(cpu: int) -> set[int]:
    return {int(gb * 1024) for gb in DOCUMENTED_GB[cpu]}


def test_the_table_is_the_documented_one():
    from stacks.config import FARGATE_CPU_UNITS, FARGATE_MEMORY_MIB

    assert set(FARGATE_MEMORY_MIB) == set(FARGATE_CPU_UNITS) == set(DOCUMENTED_GB)
    for cpu in FARGATE_CPU_UNITS:
        assert set(FARGATE_MEMORY_MIB[cpu]) == _documented(cpu), cpu


@pytest.mark.parametrize(
    "cpu, memory_mib, offered",
    [
        (256, 8192, "512, 1024, 2048 MiB"),
        (256, 1536, "512, 1024, 2048 MiB"),  # between two sizes of the smallest task
        (1024, 2500, "2048 to 8192 in steps of 1024 MiB"),  # not a whole GB
        (1024, 16384, "2048 to 8192 in steps of 1024 MiB"),  # more than the CPU's largest
        (4096, 4096, "8192 to 30720 in steps of 1024 MiB"),  # less than the CPU's smallest
        (8192, 17408, "16384 to 61440 in steps of 4096 MiB"),  # a 1 GB step where Fargate takes 4 GB ones
        (16384, 36864, "32768 to 122880 in steps of 8192 MiB"),
    ],
)
def test_a_task_size_fargate_does_not_offer_fails_the_synth_naming_the_sizes_it_does(cpu, memory_mib, offered):
    """Before: each of these synthesized, and the deployment failed at the task definition."""
    with pytest.raises(SettingsError) as info:
        load_settings({"fargate": {"cpu": cpu, "memory_mib": memory_mib}})
    message = str(info.value)
    assert f"fargate.memory_mib = {memory_mib}" in message and f"fargate.cpu = {cpu}" in message
    assert offered in message


@pytest.mark.parametrize("cpu", sorted(DOCUMENTED_GB))
def test_every_documented_size_is_taken(cpu):
    for memory_mib in sorted(_documented(cpu)):
        settings = load_settings({"fargate": {"cpu": cpu, "memory_mib": memory_mib}})
        assert (settings.fargate.cpu, settings.fargate.memory_mib) == (cpu, memory_mib)


def test_the_synthesized_task_definition_is_a_size_fargate_offers(resources):
    (task,) = [r for r in resources.values() if r["Type"] == "AWS::ECS::TaskDefinition"]
    props = task["Properties"]
    assert props["RequiresCompatibilities"] == ["FARGATE"]
    cpu, memory = int(props["Cpu"]), int(props["Memory"])
    assert memory in _documented(cpu), (cpu, memory)
    # no container asks for more than the task has
    assert all(int(c.get("Memory", 0)) <= memory for c in props["ContainerDefinitions"])


# -- IAM policy sizes ---------------------------------------------------------------------------------------------
# IAM quotas (IAM User Guide, "IAM and AWS STS quotas"): "Role policy size cannot exceed 10,240 characters" (every
# inline policy of the role together), a managed policy at most 6,144 characters and a role trust policy 2,048 (the
# account's AssumeRolePolicySizeQuota default); "IAM does not count white space". A policy over its quota fails the
# deployment at that resource. aws-cdk adds every grant of a role to one inline DefaultPolicy, so each grant added to
# a role grows it: counted here with every value CloudFormation fills in at its longest.
# Measured by stacks.limits (policy_chars, with every value at its longest), which the synth checks as well.


def _longest() -> dict[str, int]:
    from stacks.limits import policy_longest_values

    return policy_longest_values()


def _chars(node, types: dict[str, str], longest: dict[str, int]) -> int:
    from stacks.limits import UNKNOWN_VALUE, policy_chars, value_bound

    def known(value):  # every value a policy names has a documented bound (no ARN counted at the catch-all)
        if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in ("Ref", "Fn::GetAtt"):
            assert value_bound(value, types, longest) < UNKNOWN_VALUE, f"no bound known for {value}: add it"
        elif isinstance(value, dict):
            for v in value.values():
                known(v)
        elif isinstance(value, list):
            for v in value:
                known(v)

    known(node)
    return policy_chars(node, types, longest)


@pytest.mark.parametrize("context", ["", "nova"], ids=["default", "nova-bridge"])
def test_every_policy_fits_its_iam_quota_at_its_longest(context):
    from stacks.limits import MANAGED_POLICY_CHARS, ROLE_POLICY_CHARS, TRUST_POLICY_CHARS
    from tests.aws import harness

    resources = harness.synthesized(harness.NOVA_BRIDGE_CONTEXT if context else "").template["Resources"]
    types = {logical: r["Type"] for logical, r in resources.items()}
    longest = _longest()
    per_role: dict[str, int] = {}
    for logical, resource in resources.items():
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::IAM::Policy":
            for role in props.get("Roles", []):
                per_role[role["Ref"]] = per_role.get(role["Ref"], 0) + _chars(props["PolicyDocument"], types, longest)
        elif resource["Type"] == "AWS::IAM::ManagedPolicy":
            size = _chars(props["PolicyDocument"], types, longest)
            assert size <= MANAGED_POLICY_CHARS, (logical, size)
        elif resource["Type"] == "AWS::IAM::Role":
            size = _chars(props["AssumeRolePolicyDocument"], types, longest)
            assert size <= TRUST_POLICY_CHARS, (logical, size)
            for policy in props.get("Policies") or []:
                per_role[logical] = per_role.get(logical, 0) + _chars(policy["PolicyDocument"], types, longest)
    assert per_role and all(size <= ROLE_POLICY_CHARS for size in per_role.values()), per_role
