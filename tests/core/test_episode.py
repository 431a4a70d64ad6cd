"""Episode steps (the state machine Step Functions drives) and run_episode end to end."""

import pytest

from rewardpipe.envs.ask_before_coding.environment import DEFAULT_EXEC_TIMEOUT_S, AskBeforeCoding
from rewardpipe.envs.ask_before_coding.environment import AskBeforeCodingState as EpisodeState
from rewardpipe.envs.ask_before_coding.scenarios import stub_guess
from rewardpipe.envs.ask_before_coding.simulator import RuleBasedSimulator, SimulatorReply
from rewardpipe.episode import (
    EpisodeError,
    PolicyExhausted,
    apply_env_turn,
    apply_policy_turn,
    end_without_commit,
    execution_job,
    finish_episode,
    run_episode,
    start_episode,
)
from rewardpipe.execution import get_executor
from rewardpipe.models import Rollout
from rewardpipe.parsing import TurnKind
from rewardpipe.policies import ReplayPolicy, fenced
from rewardpipe.rewards import get_reward
from tests.core.conftest import ADD_SOLUTION, COMMIT, QUESTION, STATEMENT, FakeExecutor, make_task, result

TASK = make_task()
REWARD = get_reward("ask_before_coding")
SIM = RuleBasedSimulator()
ENV = AskBeforeCoding(SIM)
IDS = dict(run_id="run-1", step=2, group_id="g-1", rollout_id="r-1")


def fresh(max_turns: int = 6) -> EpisodeState:
    return start_episode(TASK, env=ENV, max_turns=max_turns, **IDS)


def policy_turn(state: EpisodeState, text: str) -> EpisodeState:
    return apply_policy_turn(state, text, ENV, TASK)


def simulator_turn(state: EpisodeState, task, simulator) -> EpisodeState:
    return apply_env_turn(state, task, AskBeforeCoding(simulator))


def test_start_episode_begins_with_the_prompt_and_a_policy_turn():
    state = fresh()
    assert [(m.role, m.content) for m in state.messages] == [("user", TASK.prompt)]
    assert state.next_action == "policy"
    assert (state.run_id, state.step, state.group_id, state.rollout_id, state.task_id) == (
        "run-1",
        2,
        "g-1",
        "r-1",
        TASK.task_id,
    )


def test_question_hands_over_to_the_simulator():
    state = policy_turn(fresh(), QUESTION)
    assert state.next_action == "env"
    assert state.model_dump(mode="json")["next_action"] == "simulator"  # the literal stored snapshots carry
    assert state.turn_kinds == [TurnKind.QUESTION]
    assert state.messages[-1].role == "assistant"


def test_simulator_turn_appends_reply_records_reveal_and_returns_to_policy():
    state = policy_turn(fresh(), "Are negative numbers allowed?")
    state = simulator_turn(state, TASK, SIM)
    assert state.next_action == "policy"
    assert state.messages[-1].role == "user"
    assert state.messages[-1].content == TASK.spec[0]
    assert state.revealed == [0]


def test_simulator_re_reporting_a_reveal_does_not_duplicate_it():
    class Repeats:
        def respond(self, state, task):
            return SimulatorReply("again", 0)

    state = policy_turn(fresh(), QUESTION)
    state.revealed = [0]
    assert simulator_turn(state, TASK, Repeats()).revealed == [0]


def test_commit_goes_to_execution_with_the_code():
    state = policy_turn(fresh(), COMMIT)
    assert state.next_action == "execute"
    assert state.end_reason == "committed"
    assert state.final_code == "def f(x):\n    return x\n"


def test_non_committing_turn_at_the_turn_limit_goes_to_scoring():
    state = fresh(max_turns=2)
    state = policy_turn(state, QUESTION)
    state = simulator_turn(state, TASK, SIM)
    state = policy_turn(state, STATEMENT)
    assert state.next_action == "score"
    assert state.end_reason == "turn_limit"
    assert execution_job(state, TASK, ENV) is None


def test_commit_on_the_last_turn_still_executes():
    state = policy_turn(fresh(max_turns=1), COMMIT)
    assert state.next_action == "execute"


def test_steps_do_not_mutate_their_input_state():
    state = fresh()
    policy_turn(state, QUESTION)
    assert state.messages[-1].role == "user" and state.turn_kinds == []


@pytest.mark.parametrize(
    "prepare, step",
    [
        (lambda: fresh(), lambda s: simulator_turn(s, TASK, SIM)),
        (lambda: policy_turn(fresh(), QUESTION), lambda s: policy_turn(s, QUESTION)),
        (lambda: policy_turn(fresh(), COMMIT), lambda s: policy_turn(s, COMMIT)),
        (lambda: policy_turn(fresh(), COMMIT), lambda s: simulator_turn(s, TASK, SIM)),
        (lambda: fresh(), lambda s: finish_episode(s, TASK, None, REWARD, ENV)),
        (lambda: policy_turn(fresh(), QUESTION), lambda s: finish_episode(s, TASK, None, REWARD, ENV)),
    ],
)
def test_calling_a_step_in_the_wrong_phase_raises(prepare, step):
    with pytest.raises(EpisodeError, match="r-1"):
        step(prepare())


def test_episode_state_json_round_trip_preserves_everything():
    state = policy_turn(fresh(), "Are negative numbers allowed?")
    state = simulator_turn(state, TASK, SIM)
    state = policy_turn(state, COMMIT)
    data = state.model_dump(mode="json")
    again = EpisodeState.model_validate(data)
    assert again == state
    assert again.turn_kinds == [TurnKind.QUESTION, TurnKind.COMMIT]
    assert again.revealed == [0]
    assert again.final_code == state.final_code
    # and the restored state can carry on where it stopped
    assert execution_job(again, TASK, ENV) == execution_job(state, TASK, ENV)


def test_execution_job_uses_the_task_timeout_and_hidden_tests():
    task = make_task(timeout_s=3.5, tests_format="unittest")
    state = apply_policy_turn(start_episode(task, env=ENV, **IDS), COMMIT, ENV, task)
    job = execution_job(state, task, ENV)
    assert job.timeout_s == 3.5
    assert job.tests == task.tests
    assert job.entry_point == "add"
    assert job.id == "r-1"
    assert job.code == state.final_code


def test_execution_job_defaults_the_timeout():
    assert execution_job(policy_turn(fresh(), COMMIT), TASK, ENV).timeout_s == DEFAULT_EXEC_TIMEOUT_S


def test_end_without_commit_is_scored_as_it_stands():
    state = end_without_commit(policy_turn(fresh(), QUESTION), "policy_exhausted")
    record = finish_episode(state, TASK, None, REWARD, ENV)
    assert record.status == "scored"
    assert record.components["correctness"] == 0.0
    assert record.metrics["end_reason"] == "policy_exhausted"


def test_to_rollout_keeps_the_transcript():
    state = policy_turn(fresh(), QUESTION)
    rollout = state.to_rollout()
    assert rollout.messages == state.messages
    assert (rollout.rollout_id, rollout.group_id, rollout.step) == ("r-1", "g-1", 2)


# --- run_episode -------------------------------------------------------------------------------------------


def replay(*turns: str, rollout_id: str = "r-1") -> ReplayPolicy:
    messages = [{"role": "user", "content": "p"}]
    for turn in turns:
        messages += [{"role": "assistant", "content": turn}, {"role": "user", "content": "ok"}]
    return ReplayPolicy([Rollout(rollout_id=rollout_id, group_id="g", task_id=TASK.task_id, messages=messages)])


def run(policy, simulator=SIM, executor=None, **kwargs):
    executor = executor or FakeExecutor(result("failed", 1, 2))
    return run_episode(TASK, policy, AskBeforeCoding(simulator), executor, REWARD, **{**IDS, **kwargs})


def test_normal_episode_matches_a_hand_computation():
    executor = FakeExecutor(result("failed", 1, 2))
    record = run(replay(STATEMENT, "Are negative numbers allowed?", COMMIT), executor=executor)
    assert record.status == "scored" and record.error is None
    assert record.components == {
        "correctness": 0.5,
        "asked_before_coding": 0.6,
        "guessed_immediately": 0.0,
        "loop_penalty": 0.0,
    }
    assert record.aggregate == pytest.approx(1.0 * 0.5 + 0.6 * 0.6)
    assert record.metrics["end_reason"] == "committed"
    assert record.metrics["spec_revealed"] == 1
    assert record.metrics["spec_items"] == 3
    assert (record.run_id, record.step, record.group_id, record.rollout_id, record.task_id) == (
        "run-1",
        2,
        "g-1",
        "r-1",
        TASK.task_id,
    )
    assert len(executor.jobs) == 1 and executor.jobs[0].code == "def f(x):\n    return x\n"


def test_looping_episode_hits_the_turn_limit_without_executing():
    executor = FakeExecutor(result("passed", 1, 1))
    record = run(replay(*[QUESTION] * 5), executor=executor, max_turns=3)
    assert executor.jobs == []
    assert record.metrics["end_reason"] == "turn_limit"
    assert record.metrics["assistant_turns"] == 3
    assert record.components["loop_penalty"] == -0.5
    assert record.components["correctness"] == 0.0
    assert record.aggregate == pytest.approx(0.2 * -0.5)


def test_replay_running_out_is_scored_with_policy_exhausted():
    record = run(replay(QUESTION, QUESTION))
    assert record.status == "scored"
    assert record.metrics["end_reason"].startswith("policy_exhausted")
    assert record.metrics["assistant_turns"] == 2


class Raises:
    def __init__(self, exc):
        self.exc = exc

    def next_turn(self, state, task):
        raise self.exc

    def respond(self, state, task):
        raise self.exc


def assert_error_record(record, kind):
    assert record.status == "error"
    assert record.error.kind == kind
    assert record.aggregate is None
    assert set(record.components) == set(REWARD.component_names)
    assert all(value is None for value in record.components.values())
    assert record.weights == REWARD.weights


def test_policy_exception_becomes_a_policy_error_record():
    record = run(Raises(ConnectionError("endpoint down")))
    assert_error_record(record, "policy_error")
    assert "ConnectionError: endpoint down" in record.error.message


def test_policy_exception_after_some_turns_is_still_a_policy_error():
    class FailsSecond:
        def next_turn(self, state, task):
            if state.assistant_turns:
                raise TimeoutError("slow")
            return QUESTION

    record = run(FailsSecond())
    assert_error_record(record, "policy_error")
    assert record.metrics["assistant_turns"] == 1


def test_policy_returning_non_text_is_a_policy_error():
    class ReturnsNumber:
        def next_turn(self, state, task):
            return 42

    assert_error_record(run(ReturnsNumber()), "policy_error")


def test_simulator_exception_becomes_a_simulator_error_record():
    record = run(replay(QUESTION, COMMIT), simulator=Raises(RuntimeError("simulator crashed")))
    assert_error_record(record, "simulator_error")
    assert "simulator crashed" in record.error.message
    assert record.metrics["assistant_turns"] == 1


def test_executor_exception_becomes_an_executor_crash_record():
    record = run(replay(QUESTION, COMMIT), executor=FakeExecutor(OSError("no sandbox")))
    assert_error_record(record, "executor_crash")
    assert "OSError: no sandbox" in record.error.message


def test_harness_error_result_becomes_an_execution_error_record_not_a_zero():
    record = run(replay(QUESTION, COMMIT), executor=FakeExecutor(result("error", reason="harness died")))
    assert record.status == "error"
    assert record.error.kind == "execution_error"
    assert record.components["correctness"] is None
    assert record.components["asked_before_coding"] == 1.0  # behaviour still visible for diagnosis
    assert record.aggregate is None


def test_unknown_replay_rollout_is_a_policy_error():
    assert_error_record(run(replay(QUESTION, rollout_id="someone-else")), "policy_error")


# --- real executor, end to end -----------------------------------------------------------------------------


def test_end_to_end_ask_then_commit_the_reference_passes_with_the_real_executor():
    policy = replay("Are negative numbers allowed?", "Thanks.\n" + fenced(ADD_SOLUTION))
    record = run(policy, executor=get_executor())
    assert record.status == "scored", record.error
    assert record.components["correctness"] == 1.0
    assert record.components["asked_before_coding"] == 1.0
    assert record.aggregate == pytest.approx(1.6)
    assert record.metrics["tests_passed"] == record.metrics["tests_total"] == 2


def test_end_to_end_immediate_stub_guess_fails_with_the_real_executor():
    record = run(replay("Here:\n" + fenced(stub_guess(TASK))), executor=get_executor())
    assert record.status == "scored", record.error
    assert record.components["correctness"] == 0.0
    assert record.components["guessed_immediately"] == -1.0
    assert record.aggregate == pytest.approx(-0.4)


def test_policy_exhausted_is_importable_for_custom_policies():
    class Done:
        def next_turn(self, state, task):
            raise PolicyExhausted()

    record = run(Done())
    assert record.status == "scored"
    assert record.metrics["end_reason"] == "policy_exhausted"
