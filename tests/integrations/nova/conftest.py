"""The AWS harness fixtures (moto account, synthesized stack deployed into it) for the Nova bridge tests."""

import json

import pytest

from tests.aws import harness
from tests.aws.conftest import _restore_dumpable, aws, deployment, s3, sfn, synth  # noqa: F401

# The context the Nova tests synthesize with: one synth per process, shared by the template checks and the
# end-to-end test (a synth takes ~17 s on the 2-core machine).
NOVA_CONTEXT = json.loads(harness.NOVA_BRIDGE_CONTEXT)


@pytest.fixture(scope="session")
def nova_synth() -> harness.Synth:
    return harness.synthesized(harness.NOVA_BRIDGE_CONTEXT)
