"""rewardpipe.testing: doctor's checks inside a user's pytest."""

from __future__ import annotations

import json

import pytest

from tests.api.conftest import GUESS_TASKS, JSON_SAMPLES


def test_check_environment_passes_a_healthy_environment_and_returns_its_diagnoses(acme):
    from acme_rl.guess import ENVIRONMENT

    from rewardpipe.testing import check_environment

    report = check_environment(ENVIRONMENT, GUESS_TASKS)
    assert [d.task_id for d in report] == ["g-07", "g-42", "g-93"] and report.warnings == []
    assert check_environment("guess", [{"task_id": "x", "prompt": "Guess.", "secret": 50}])[0].ok


def test_check_environment_fails_naming_each_problem(acme):
    from acme_rl.guess import GuessNumber

    from rewardpipe.testing import check_environment

    class Lazy(GuessNumber):
        def scenarios(self, task):
            scenarios = super().scenarios(task)
            return {"reference": scenarios["always_one"], "mumbles": scenarios["mumbles"]}

    with pytest.raises(AssertionError) as caught:
        check_environment(Lazy(), GUESS_TASKS)
    message = str(caught.value)
    assert "[reference_not_best]" in message and "g-42" in message and "outcome 'solved'" in message


def test_check_environment_runs_the_sandbox_for_an_environment_that_runs_code():
    from rewardpipe.envs.ask_before_coding import BUNDLED_TASKS, ENVIRONMENT
    from rewardpipe.models import load_tasks
    from rewardpipe.testing import check_environment

    [diagnosis] = check_environment(ENVIRONMENT, load_tasks(BUNDLED_TASKS)[:1])
    assert diagnosis.component_values["correctness"] == [0.0, 1.0]


def test_check_reward_checks_variation_range_and_errors(acme):
    from rewardpipe.testing import check_reward, score

    samples = [json.loads(line) for line in JSON_SAMPLES.read_text().splitlines()]
    samples = [{"messages": s["messages"], "reference": s["reference"]} for s in samples]
    with pytest.raises(AssertionError, match=r"\[component_never_varies\] component 'too_long'"):
        check_reward("json_answer", samples)
    scores = check_reward("json_answer", [*samples, {"completion": "x" * 500, "reference": 4}])
    assert scores[-1].components["too_long"] == -1.0
    with pytest.raises(AssertionError, match=r"\[component_raised\].*explodes_on_boom"):
        check_reward("json_flaky", [{"completion": "BOOM", "reference": 4}], require_variation=False)
    assert score("json_answer", completion='{"answer": 4}', reference=4).aggregate == 1.5
