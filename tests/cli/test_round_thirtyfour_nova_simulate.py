"""Round thirty-four: `rewardpipe nova simulate` names the samples answered with an error answer.

The check fails (exit 1) on such answers since this round, but the command said nothing of why: its table showed
`error` in a column, `--json` had no field for them and stderr no line."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_bad_input_matrix import _invoke

URLS = ["--rollout-request-arn", "q1", "--rollout-response-url", "q2", "--generate-request-url", "q3"]
URLS += ["--generate-response-url", "q4", "--region", "us-east-1", "--timeout", "1"]


@pytest.fixture
def one_error_answer(monkeypatch, tmp_path):
    from rewardpipe.integrations.nova import trainer_sim
    from rewardpipe.integrations.nova.trainer_sim import SimulationReport

    def simulate(*_args, **_kwargs):
        responses = {
            "s_0": {"sample_id": "s_0", "stop_reason": "end_of_conversation", "rewards": {"aggregate_score": 1.0}},
            "s_1": {"sample_id": "s_1", "stop_reason": "error", "rewards": {"aggregate_score": 0.5}},
        }
        return SimulationReport(["s_0", "s_1"], responses, [], [], [], 1.0)

    monkeypatch.setattr(trainer_sim, "simulate", simulate)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


def test_the_error_answers_are_named_on_stderr(one_error_answer):
    result = _invoke(["nova", "simulate", *URLS])
    assert result.exit_code == 1, result.output
    assert "stop_reason error" in result.stderr and "s_1" in result.stderr and "s_0" not in result.stderr


def test_the_json_result_lists_them(one_error_answer):
    result = _invoke(["nova", "simulate", *URLS, "--json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is False and report["errored"] == ["s_1"]
