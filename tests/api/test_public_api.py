"""The public API v1 is importable from ``rewardpipe`` itself, and importing ``rewardpipe`` stays cheap (a
Lambda cold start imports it): every name loads on first use."""

from __future__ import annotations

import json
import subprocess
import sys

import rewardpipe

PUBLIC = [
    "component",
    "Component",
    "Reward",
    "TaskRow",
    "EpisodeState",
    "Message",
    "Environment",
    "EnvContext",
    "ExecutionJob",
    "ExecutionResult",
    "Transcript",
    "RolloutIds",
    "ScriptedPolicy",
    "ScoringInput",
    "PolicyExhausted",
    "ContextLimitReached",
    "load_reward",
    "load_environment",
    "testing",
    "API_VERSION",
]


def test_every_public_name_imports_from_the_package():
    for name in PUBLIC:
        assert getattr(rewardpipe, name) is not None, name
    assert rewardpipe.API_VERSION == 1 and set(PUBLIC) <= set(rewardpipe.__all__)
    assert rewardpipe.testing.check_environment and rewardpipe.Environment.api == 1


def test_importing_rewardpipe_loads_nothing_else():
    probe = "import json, sys; import rewardpipe; print(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(
        subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    )
    assert [m for m in loaded if m.startswith("rewardpipe.")] == []
    assert "pydantic" not in loaded


def test_an_unknown_name_is_an_attribute_error():
    import pytest

    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        rewardpipe.Nope  # noqa: B018
