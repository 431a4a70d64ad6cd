"""The environment and its reward under pytest, with rewardpipe's own checks (`pytest test_animals.py`)."""

from pathlib import Path

import pytest
from animals_env import ENVIRONMENT, AnimalState, AnimalTask
from animals_reward import ANIMALS

from rewardpipe import EnvContext, Message
from rewardpipe.testing import check_environment, check_reward, score

TASKS = Path(__file__).resolve().parent / "animals.jsonl"
OTTER = AnimalTask(task_id="otter", prompt="Find the animal.", animal="otter", facts={"fur": True})


def test_the_environment_passes_doctor():
    report = check_environment(ENVIRONMENT, TASKS)  # raises AssertionError naming every problem
    assert report.warnings == []


def test_the_reward_can_move_and_stays_in_range():
    check_reward(
        ANIMALS,
        [
            {"completion": "Guess: otter", "task": OTTER, "state": AnimalState(found=True, questions=1, answered=1)},
            {"completion": "Guess: cat", "task": OTTER, "state": AnimalState(wrong_guesses=3)},
            {"completion": "Is it nice?", "task": OTTER, "state": AnimalState(questions=2, answered=1)},
        ],
    )


def test_one_score_component_by_component():
    result = score(
        ANIMALS,
        completion="Guess: otter",
        task=OTTER,
        state=AnimalState(found=True, questions=2, answered=1, wrong_guesses=1),
    )
    assert result.components == {"found": 1.0, "on_topic": 0.5, "wrong_guesses": pytest.approx(-1 / 3)}


def test_the_user_answers_from_the_hidden_facts():
    state = ENVIRONMENT.start(OTTER).append(Message(role="assistant", content="Does it have fur?"))
    state = ENVIRONMENT.on_policy_turn(state, OTTER, "Does it have fur?")
    state = ENVIRONMENT.respond(state, OTTER, EnvContext(ids=state.ids, turn=1, seed=0))
    assert state.messages[-1].content == "Yes." and state.next_action == "policy"


if __name__ == "__main__":  # `python test_animals.py`: this file's tests, one line each (or `pytest test_animals.py`)

    class OneLineEach:
        def pytest_runtest_logreport(self, report):
            if report.when == "call" or report.failed:
                print(f"{report.outcome}: {report.nodeid.rsplit('::', 1)[-1]}")
                if report.failed:
                    print(report.longreprtext)

    raise SystemExit(pytest.main(["-p", "no:cacheprovider", "-p", "no:terminal", __file__], plugins=[OneLineEach()]))
