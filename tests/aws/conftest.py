"""moto harness for the AWS tests (see harness.py for what is patched and why)."""

from __future__ import annotations

import json
import os

import pytest

from tests.aws import harness, iam

harness.apply_test_env()
harness.use_user_package()  # the user package fixture (tests/fixtures/acme_rewards), as a layer would provide it


@pytest.fixture(scope="session")
def synth() -> harness.Synth:
    return harness.synthesized()


@pytest.fixture
def aws(monkeypatch):
    """A fresh moto account with Step Functions execution and in-process Lambdas."""
    from moto import mock_aws

    from rewardpipe.aws.settings import reset_clients

    for key, value in harness.TEST_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    harness.install_patches(monkeypatch)
    harness.start_server()
    harness.LAMBDA_FAULTS.clear()
    harness.LAMBDA_SERVICE_FAULTS.clear()
    harness.CONTAINER_RUNS.clear()
    harness.CONTAINER_FAULT_ENV.clear()
    harness.LIMIT_VIOLATIONS.clear()
    harness.CHECKED.clear()
    reset_clients()
    with mock_aws(config=harness.MOTO_CONFIG):
        yield
        busy = harness.quiesce_executions()
        violations = harness.check_limits()
    harness.LIMIT_VIOLATIONS.clear()
    denials = list(iam.DENIALS)
    if os.environ.get("REWARDPIPE_IAM_LOG"):  # every checked call, for counting what the harness saw
        with open(os.environ["REWARDPIPE_IAM_LOG"], "a", encoding="utf-8") as log:
            log.writelines(json.dumps(call) + "\n" for call in iam.CHECKED_CALLS)
    iam.reset()
    harness.DEPLOYMENTS.clear()
    harness.LAMBDA_FAULTS.clear()
    harness.LAMBDA_SERVICE_FAULTS.clear()
    for key in harness.ADDED_ENV:  # before any failure below, so a failing test leaves nothing to the next
        os.environ.pop(key, None)
    harness.ADDED_ENV.clear()
    reset_clients()
    if busy:
        pytest.fail(
            f"Step Functions threads still busy {harness.QUIESCE_TIMEOUT_S:.0f} s after the test ended "
            f"(its executions stopped): {busy}"
        )
    if violations:
        pytest.fail("AWS limits exceeded (moto would not have refused these):\n" + "\n".join(violations[:20]))
    if denials:
        pytest.fail(
            "AWS would have denied these calls (IAM, from the synthesized template; tests/aws/iam.py):\n"
            + "\n".join(dict.fromkeys(denials))
        )


@pytest.fixture
def deployment(aws, synth) -> harness.Deployment:
    return harness.Deployment(synth).deploy()


@pytest.fixture
def sfn(aws):
    import boto3

    return boto3.client("stepfunctions", region_name=harness.REGION)


@pytest.fixture
def s3(aws):
    import boto3

    return boto3.client("s3", region_name=harness.REGION)


@pytest.fixture(autouse=True)
def _restore_dumpable():
    """Handlers make their process non-dumpable (rewardpipe.aws.hardening); in-process tests run them in
    the pytest worker, so give the worker its normal state back for whatever test runs next."""
    yield
    from rewardpipe.aws import hardening

    libc = hardening._libc()
    if libc is not None:
        libc.prctl(hardening.PR_SET_DUMPABLE, 1, 0, 0, 0)
