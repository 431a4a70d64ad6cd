"""Infrastructure tests share the one synth of this test process (tests/aws/harness.py)."""

from __future__ import annotations

import pytest

from tests.aws import harness

harness.apply_test_env()


@pytest.fixture(scope="session")
def synth() -> harness.Synth:
    return harness.synthesized()


@pytest.fixture(scope="session")
def template(synth):
    return synth.assertions


@pytest.fixture(scope="session")
def resources(synth) -> dict:
    return synth.template["Resources"]
