"""The local runner: one record per slot, whatever fails, with the failure attributed to the right party."""

from rewardpipe.envs.ask_before_coding.environment import ENVIRONMENT, AskBeforeCoding
from rewardpipe.execution import get_executor
from rewardpipe.models import Message, Rollout, Task
from rewardpipe.rewards import get_reward
from rewardpipe.runner import plan_step, run_slots, score_rollouts

TASK = Task(
    task_id="add",
    prompt="Write `add(a, b)`.",
    spec=["Both arguments are integers.", "Return their sum."],
    entry_point="add",
    tests=(
        "import unittest\nclass T(unittest.TestCase):\n    def test_sum(self):\n"
        "        self.assertEqual(add(2, 3), 5)\n"
    ),
    reference_solution="def add(a, b):\n    return a + b\n",
)
REWARD = get_reward("ask_before_coding")


class AskThenFail:
    """Asks once, then the endpoint 'goes down'."""

    def next_turn(self, state, task):
        if state.assistant_turns == 0:
            return "What types are the arguments?"
        raise ConnectionError("endpoint unreachable")


class BrokenSimulator:
    def respond(self, state, task):
        raise RuntimeError("simulator model crashed")


class CrashingExecutor:
    def run(self, job):
        raise OSError("fork failed")

    def run_batch(self, jobs, workers=None):
        raise OSError("pool died")


def test_plan_step_is_round_robin_with_unique_ids():
    tasks = [TASK, TASK.model_copy(update={"task_id": "other"})]
    slots = plan_step(tasks, step=1, groups_per_step=3, group_size=2)
    assert [s.task.task_id for s in slots] == ["other", "other", "add", "add", "other", "other"]
    assert len({s.rollout_id for s in slots}) == 6
    assert len({s.group_id for s in slots}) == 3


def test_a_policy_failure_mid_conversation_is_an_error_record_with_the_turns_so_far():
    slots = plan_step([TASK], 0, 1, 2)
    records = run_slots(
        slots, policy=AskThenFail(), env=ENVIRONMENT, executor=get_executor(), reward=REWARD, run_id="r", max_turns=4
    )
    assert [r.status for r in records] == ["error", "error"]
    assert records[0].error.kind == "policy_error"
    assert "ConnectionError: endpoint unreachable" in records[0].error.message
    assert records[0].metrics["assistant_turns"] == 1
    assert records[0].aggregate is None and set(records[0].components.values()) == {None}


def test_a_simulator_failure_is_attributed_to_the_simulator():
    [record] = run_slots(
        plan_step([TASK], 0, 1, 1),
        policy=AskThenFail(),
        env=AskBeforeCoding(BrokenSimulator()),
        executor=get_executor(),
        reward=REWARD,
        run_id="r",
        max_turns=4,
    )
    assert record.error.kind == "simulator_error"


class StartFails(AskBeforeCoding):
    """An environment whose start hook raises, for one task only."""

    def start(self, task):
        if task.task_id == "add":
            raise RuntimeError("could not set the task up")
        return super().start(task)


def test_an_environment_whose_start_fails_costs_that_rollout_only():
    other = TASK.model_copy(update={"task_id": "other"})
    records = run_slots(
        plan_step([TASK, other], 0, 2, 1),
        policy=AskThenFail(),
        env=StartFails(BrokenSimulator()),
        executor=get_executor(),
        reward=REWARD,
        run_id="r",
        max_turns=4,
    )
    by_task = {r.task_id: r for r in records}
    assert set(by_task) == {"add", "other"}
    assert by_task["add"].error.kind == "simulator_error"
    assert "RuntimeError: could not set the task up" in by_task["add"].error.message
    assert "could not set the task up" not in by_task["other"].error.message  # it ran, and failed on its own


def test_an_executor_crash_costs_records_not_the_batch():
    policy = ENVIRONMENT.scripted_policy(seed=3, weights={"guess": 1.0, "loop": 1.0})
    slots = plan_step([TASK], 0, 1, 8)
    records = run_slots(
        slots, policy=policy, env=ENVIRONMENT, executor=CrashingExecutor(), reward=REWARD, run_id="r", max_turns=2
    )
    assert len(records) == 8
    kinds = {r.metrics.get("end_reason"): r for r in records}
    # guesses needed the executor: error records; loops committed nothing: scored with correctness 0.0
    guessed = [r for r in records if r.status == "error"]
    looped = [r for r in records if r.status == "scored"]
    assert guessed and looped, kinds
    assert all(r.error.kind == "executor_crash" and "fork failed" in r.error.message for r in guessed)
    assert all(r.components["correctness"] == 0.0 for r in looped)


def test_score_rollouts_executes_the_final_commit_and_flags_unknown_tasks():
    code = "```python\ndef add(a, b):\n    return a + b\n```"
    rollouts = [
        Rollout(
            rollout_id="a",
            group_id="g",
            task_id="add",
            messages=[
                Message(role="user", content="x"),
                Message(role="assistant", content="```python\ndef add(a, b):\n    return 0\n```"),
                Message(role="user", content="wrong"),
                Message(role="assistant", content=code),
            ],
        ),
        Rollout(rollout_id="b", group_id="g", task_id="nope", messages=[Message(role="assistant", content=code)]),
    ]
    first, second = score_rollouts(
        rollouts, {"add": TASK}, executor=get_executor(), env=ENVIRONMENT, reward=REWARD, run_id="r"
    )
    assert first.components["correctness"] == 1.0  # the last commit is what counts
    assert second.status == "error" and second.error.kind == "unknown_task"


def test_a_task_whose_tests_pass_callbacks_runs_in_the_declared_fallback_mode():
    # The tests hand the model a function: that cannot cross the split boundary, so the task author
    # declares the screened in-process fallback, and the record says which mode ran.
    callback_tests = (
        "import unittest\nclass T(unittest.TestCase):\n"
        "    def test_applies(self):\n        self.assertEqual(apply_twice(lambda x: x + 1, 1), 3)\n"
    )
    base = dict(
        task_id="cb",
        prompt="Write `apply_twice(f, x)`.",
        spec=["Apply f two times."],
        entry_point="apply_twice",
        tests=callback_tests,
        reference_solution="def apply_twice(f, x):\n    return f(f(x))\n",
    )
    commit = "```python\ndef apply_twice(f, x):\n    return f(f(x))\n```"
    rollout = Rollout(
        rollout_id="r",
        group_id="g",
        task_id="cb",
        messages=[Message(role="user", content="x"), Message(role="assistant", content=commit)],
    )
    [split] = score_rollouts(
        [rollout], {"cb": Task(**base)}, executor=get_executor(), env=ENVIRONMENT, reward=REWARD, run_id="r"
    )
    assert split.status == "error"  # a harness limitation, never a zero for the model
    [fallback] = score_rollouts(
        [rollout],
        {"cb": Task(**base, trust_mode="inprocess")},
        executor=get_executor(),
        env=ENVIRONMENT,
        reward=REWARD,
        run_id="r",
    )
    assert fallback.status == "scored" and fallback.components["correctness"] == 1.0
    assert fallback.metrics["exec_mode"] == "inprocess"


# -- issue 9: run throughput (overlap) and exact shortcuts -------------------------------------------


class SlowRecordingExecutor:
    """Answers after a short wait, noting when each job started relative to the policy's turns."""

    def __init__(self, events):
        self.events = events

    def run(self, job):
        import time

        from rewardpipe.execution.result import ExecutionResult, ExecutionStatus

        self.events.append(("exec", job.id))
        time.sleep(0.02)
        return ExecutionResult(id=job.id, status=ExecutionStatus.PASSED, passed=1, total=1)


class CommitAtOnce:
    def __init__(self, events):
        self.events = events

    def next_turn(self, state, task):
        self.events.append(("talk", state.rollout_id))
        return "```python\ndef add(a, b):\n    return a + b\n```"


def test_executions_start_while_later_conversations_are_still_played():
    events: list = []
    slots = plan_step([TASK], 0, 2, 4)
    records = run_slots(
        slots,
        policy=CommitAtOnce(events),
        env=ENVIRONMENT,
        executor=SlowRecordingExecutor(events),
        reward=REWARD,
        run_id="r",
        max_turns=2,
        workers=2,
    )
    assert [r.rollout_id for r in records] == [s.rollout_id for s in slots]  # slot order kept
    assert all(r.status == "scored" and r.components["correctness"] == 1.0 for r in records)
    first_exec = next(i for i, (kind, _) in enumerate(events) if kind == "exec")
    last_talk = max(i for i, (kind, _) in enumerate(events) if kind == "talk")
    assert first_exec < last_talk  # the sandbox did not wait for the whole step's conversations


def test_the_loop_shortcut_gives_the_same_verdict_as_the_exact_ratio():
    import random

    from rewardpipe.rewards.ask_before_coding import LOOP_SIMILARITY_THRESHOLD, turn_similarity

    rnd = random.Random(0)
    words = ["def", "add", "return", "a", "b", "+", "(", ")", ":", "x", "what", "type", "?", "\n", "    "]
    threshold = LOOP_SIMILARITY_THRESHOLD
    near = 0
    for _ in range(400):
        a = " ".join(rnd.choice(words) for _ in range(rnd.randint(1, 60)))
        b = list(a) if rnd.random() < 0.5 else list(" ".join(rnd.choice(words) for _ in range(rnd.randint(1, 60))))
        for _ in range(rnd.randint(0, 8)):  # a few edits: some pairs land near the threshold
            if b:
                b[rnd.randrange(len(b))] = rnd.choice("xyz ")
        b = "".join(b)
        exact, shortcut = turn_similarity(a, b), turn_similarity(a, b, above=threshold)
        assert (exact > threshold) == (shortcut > threshold), (a, b)
        if exact > threshold:
            assert shortcut == exact
        near += abs(exact - threshold) < 0.1
    assert near > 10  # the sample really probed the threshold


# -- round thirteen, left over: answers run one by one as conversations end are settled at the step's end -----

POINT_TESTS = (
    "import unittest\n"
    "# {marker}: tests no answer of this executor has loaded before\n"
    "ORIGIN = Point(0, 0)\n"
    "class T(unittest.TestCase):\n"
    "    def test_dist(self):\n"
    "        self.assertEqual(dist(ORIGIN, Point(3, 4)), 5)\n"
)
LEFT_OUT = "```python\ndef dist(a, b):\n    return 0\n```"  # no Point: the tests cannot load with it
RIGHT = (
    "```python\nclass Point:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n"
    "def dist(a, b):\n    return ((a.x - b.x) ** 2 + (a.y - b.y) ** 2) ** 0.5\n```"
)


class CommitsInTurn:
    """Commits at once: the first rollout's answer leaves out a name the tests read at load, the second is right."""

    def __init__(self):
        self.answers = [LEFT_OUT, RIGHT]

    def next_turn(self, state, task):
        return self.answers.pop(0)


def test_an_answer_that_left_a_name_out_and_ran_first_is_the_models_zero_once_its_step_is_done():
    import uuid

    task = TASK.model_copy(
        update={
            "task_id": "dist",
            "entry_point": "dist",
            "tests": POINT_TESTS.format(marker=uuid.uuid4().hex),
            "reference_solution": RIGHT.strip("`").removeprefix("python\n"),
        }
    )
    slots = plan_step([task], 0, 1, 2)
    records = run_slots(
        slots, policy=CommitsInTurn(), env=ENVIRONMENT, executor=get_executor(), reward=REWARD, run_id="r", workers=1
    )
    assert [r.status for r in records] == ["scored", "scored"], [r.error for r in records]
    assert [r.components["correctness"] for r in records] == [0.0, 1.0]
