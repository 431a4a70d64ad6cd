"""The AWS harness fixtures (moto account, synthesized stack deployed into it) for the Nova bridge tests."""

import json

import pytest

from tests.aws import harness
from tests.aws.conftest import _restore_dumpable, aws, deployment, s3, sfn, synth  # noqa: F401

# The context the Nova tests synthesize with: one synth per process, shared by the template checks and the
# end-to-end test (a synth takes ~17 s on the 2-core machine).
NOVA_CONTEXT = {"rewardpipe_nova": {"enabled": True, "rollout_timeout_s": 600}}


@pytest.fixture(scope="session")
def nova_synth() -> harness.Synth:
    return harness.synthesized(json.dumps(NOVA_CONTEXT, sort_keys=True))
