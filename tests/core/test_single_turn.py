"""single_turn.score_samples in the Nova Forge reward-Lambda contract."""

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rewardpipe.execution import get_executor
from rewardpipe.single_turn import score_samples
from tests.core.conftest import ADD_SOLUTION, ADD_TESTS, FakeExecutor, fence, passes_only_reference, result


def sample(answer: str = "#### 42", sample_id="s1", role="assistant", **extra):
    return {
        "id": sample_id,
        "messages": [{"role": "user", "content": "What is 6 * 7?"}, {"role": role, "content": answer}],
        **extra,
    }


def metrics(out: dict) -> dict:
    return {m["name"]: m["value"] for m in out["metrics_list"]}


def assert_contract(outputs: list) -> None:
    for out in outputs:
        assert set(out) == {"id", "aggregate_reward_score", "metrics_list"}
        assert isinstance(out["aggregate_reward_score"], (int, float))
        assert math.isfinite(out["aggregate_reward_score"])
        for metric in out["metrics_list"]:
            assert set(metric) == {"name", "value", "type"}
            assert isinstance(metric["name"], str)
            assert metric["type"] in ("Reward", "Metric")
            assert isinstance(metric["value"], (int, float)) and not isinstance(metric["value"], bool)
            assert math.isfinite(metric["value"])
        json.dumps(out, allow_nan=False)  # the Lambda response must be strict JSON, id included


def test_order_and_ids_preserved_including_non_string_ids():
    ids = ["a", 17, None, 3.5, "a"]
    answers = ["#### 42", "#### 41", "#### 42", "nothing", "\\boxed{42}"]
    batch = [sample(ans, sid, metadata={"reference_answer": 42}) for sid, ans in zip(ids, answers, strict=True)]
    outputs = score_samples(batch, "gsm8k")
    assert [o["id"] for o in outputs] == ids
    assert [o["aggregate_reward_score"] for o in outputs] == [1.5, 0.5, 1.5, 0.0, 1.25]
    assert_contract(outputs)


def test_ids_strict_json_cannot_carry_are_echoed_as_strings():
    outputs = score_samples(
        [
            sample(sample_id=float("inf"), metadata={"reference_answer": 42}),
            sample(sample_id={"k": float("nan")}, metadata={"reference_answer": 42}),
        ],
        "gsm8k",
    )
    assert [o["id"] for o in outputs] == ["inf", "{'k': nan}"]
    assert outputs[0]["aggregate_reward_score"] == 1.5
    assert_contract(outputs)


def test_a_single_object_is_tolerated():
    outputs = score_samples(sample(metadata={"reference_answer": "42"}), "gsm8k")
    assert len(outputs) == 1
    assert outputs[0]["id"] == "s1"
    assert outputs[0]["aggregate_reward_score"] == 1.5


@pytest.mark.parametrize("event", ["not a list", 42, None])
def test_non_list_event_gets_one_flagged_error(event):
    outputs = score_samples(event, "gsm8k")
    assert len(outputs) == 1
    assert metrics(outputs[0])["reward_error"] == 1
    assert metrics(outputs[0])["error_malformed_event"] == 1
    assert_contract(outputs)


def test_empty_batch_gives_empty_result():
    assert score_samples([], "gsm8k") == []


@pytest.mark.parametrize(
    "bad",
    [
        {"id": "m1"},  # missing messages
        {"id": "m1", "messages": "hello"},  # messages not a list
        {"id": "m1", "messages": [{"role": "assistant", "content": 42}]},  # content a number
        {"id": "m1", "messages": [{"content": "no role"}]},
        {"id": "m1", "messages": [], "metadata": "not an object"},
        "m1",
        None,
    ],
)
def test_malformed_sample_is_flagged_and_does_not_fail_the_batch(bad):
    good = sample(metadata={"reference_answer": 42}, sample_id="ok")
    outputs = score_samples([good, bad, good], "gsm8k")
    assert len(outputs) == 3
    assert outputs[0]["aggregate_reward_score"] == outputs[2]["aggregate_reward_score"] == 1.5
    assert metrics(outputs[0])["reward_error"] == 0
    flagged = metrics(outputs[1])
    assert flagged["reward_error"] == 1
    assert flagged["error_malformed_sample"] == 1
    assert outputs[1]["aggregate_reward_score"] == 0.0
    assert outputs[1]["id"] == (bad.get("id") if isinstance(bad, dict) else None)
    assert_contract(outputs)


@pytest.mark.parametrize(
    "where",
    [
        {"metadata": {"reference_answer": 42}},
        {"reference_answer": 42},
        {"reference_answer": {"text": "42"}},
        {"metadata": {"reference_answer": {"text": "#### 42"}}},
        {"metadata": {"reference_answer": None, "task_id": "t"}, "reference_answer": "42"},
    ],
)
def test_reference_answer_in_every_place(where):
    out = score_samples([sample("#### 42", **where)], "gsm8k")[0]
    assert metrics(out)["answer_correct"] == 1.0
    assert metrics(out)["reward_error"] == 0


def test_metadata_reference_wins_over_top_level():
    out = score_samples([sample("#### 42", metadata={"reference_answer": 42}, reference_answer=7)], "gsm8k")[0]
    assert metrics(out)["answer_correct"] == 1.0


def test_missing_reference_is_an_error_not_a_zero():
    out = score_samples([sample("#### 42")], "gsm8k")[0]
    assert metrics(out)["reward_error"] == 1
    assert metrics(out)["error_bad_reference"] == 1
    assert "answer_correct" not in metrics(out)


def test_nova_assistant_role_and_list_of_parts_content():
    raw = {
        "id": "n",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "What is 6 * 7?"}]},
            {
                "role": "nova_assistant",
                "content": [{"type": "text", "text": "It is\n"}, {"type": "text", "text": "#### 42"}],
            },
        ],
        "metadata": {"reference_answer": 42},
    }
    out = score_samples([raw], "gsm8k")[0]
    assert metrics(out)["format"] == 1.0
    assert metrics(out)["answer_correct"] == 1.0
    assert out["aggregate_reward_score"] == 1.5


def test_components_are_rewards_and_diagnostics_are_metrics():
    out = score_samples([sample(metadata={"reference_answer": 42})], "gsm8k")[0]
    types = {m["name"]: m["type"] for m in out["metrics_list"]}
    assert types["format"] == types["answer_correct"] == "Reward"
    assert types["response_chars"] == types["reward_error"] == "Metric"


def test_weights_override_is_applied():
    out = score_samples([sample(metadata={"reference_answer": 42})], "gsm8k", weights={"format": 0.0})[0]
    assert out["aggregate_reward_score"] == 1.0


def test_overflowing_aggregate_is_flagged_as_non_finite():
    weights = {"format": 1e308, "answer_correct": 1e308}
    out = score_samples([sample(metadata={"reference_answer": 42})], "gsm8k", weights=weights)[0]
    assert metrics(out)["error_non_finite_score"] == 1
    assert metrics(out)["reward_error"] == 1
    assert out["aggregate_reward_score"] == 0.0


def test_bad_reward_configuration_raises():
    with pytest.raises(ValueError):
        score_samples([sample()], "gsm8k", weights={"nope": 1.0})
    with pytest.raises(ValueError):
        score_samples([sample()], "no_such_reward")


# --- code_correctness --------------------------------------------------------------------------------------

REFERENCE = {"tests": ADD_TESTS, "entry_point": "add"}
WRONG = "def add(a, b):\n    return a - b\n"


def code_sample(code: str | None, sample_id, **extra):
    answer = "Here:\n" + fence(code) if code is not None else "I cannot do that."
    return sample(answer, sample_id, **extra)


def test_code_correctness_pass_and_fail_in_one_batch_with_the_real_executor():
    batch = [
        code_sample(ADD_SOLUTION, "pass", metadata={"reference_answer": REFERENCE}),
        code_sample(WRONG, "fail", reference_answer=REFERENCE),
        code_sample(ADD_SOLUTION, "no-tests", metadata={"reference_answer": {"entry_point": "add"}}),
        code_sample(None, "no-code", metadata={"reference_answer": REFERENCE}),
    ]
    outputs = score_samples(batch, "code_correctness", executor=get_executor(), workers=2)
    assert [o["id"] for o in outputs] == ["pass", "fail", "no-tests", "no-code"]
    by_id = {o["id"]: metrics(o) for o in outputs}
    assert by_id["pass"]["correctness"] == 1.0 and by_id["pass"]["reward_error"] == 0
    assert outputs[0]["aggregate_reward_score"] == 1.0
    assert by_id["fail"]["correctness"] < 1.0 and by_id["fail"]["reward_error"] == 0
    assert by_id["no-tests"]["reward_error"] == 1 and by_id["no-tests"]["error_bad_reference"] == 1
    assert by_id["no-code"]["correctness"] == 0.0 and by_id["no-code"]["has_code"] == 0.0
    assert_contract(outputs)


def test_code_correctness_runs_every_job_in_one_batch_with_the_sample_timeout():
    executor = FakeExecutor(result("passed", 2, 2))
    batch = [
        code_sample(ADD_SOLUTION, "a", reference_answer={**REFERENCE, "timeout_s": 3}),
        code_sample(ADD_SOLUTION, "b", reference_answer={**REFERENCE, "tests_format": "unittest"}),
    ]
    outputs = score_samples(batch, "code_correctness", executor=executor)
    assert [job.timeout_s for job in executor.jobs] == [3.0, 10.0]
    assert all(job.code == ADD_SOLUTION for job in executor.jobs)
    assert [metrics(o)["correctness"] for o in outputs] == [1.0, 1.0]


@pytest.mark.parametrize(
    "reference, kind",
    [
        ({"tests": ADD_TESTS}, "bad_reference"),  # missing entry_point
        ("just a string", "bad_reference"),
        ({**REFERENCE, "timeout_s": "soon"}, "bad_reference"),
        ({**REFERENCE, "timeout_s": {"s": 1}}, "bad_reference"),
        ({**REFERENCE, "tests_format": "pytest"}, "bad_reference"),
    ],
)
def test_bad_code_reference_fails_only_that_sample(reference, kind):
    executor = FakeExecutor(result("passed", 2, 2))
    batch = [
        code_sample(ADD_SOLUTION, "bad", reference_answer=reference),
        code_sample(ADD_SOLUTION, "good", reference_answer=REFERENCE),
    ]
    outputs = score_samples(batch, "code_correctness", executor=executor)
    assert metrics(outputs[0])[f"error_{kind}"] == 1
    assert metrics(outputs[1])["correctness"] == 1.0
    assert len(executor.jobs) == 1


def test_code_reference_as_a_json_string_in_text():
    executor = FakeExecutor(result("passed", 2, 2))
    wrapped = {"text": json.dumps(REFERENCE)}
    out = score_samples(
        [code_sample(ADD_SOLUTION, "j", reference_answer=wrapped)], "code_correctness", executor=executor
    )[0]
    assert metrics(out)["correctness"] == 1.0
    assert executor.jobs[0].entry_point == "add"


def test_code_tests_carried_in_metadata():
    executor = FakeExecutor(result("failed", 1, 2))
    out = score_samples(
        [code_sample(ADD_SOLUTION, "m", metadata=dict(REFERENCE))], "code_correctness", executor=executor
    )[0]
    assert metrics(out)["correctness"] == 0.5


def test_harness_error_is_flagged_not_zero():
    executor = FakeExecutor(result("error", reason="harness broke"))
    out = score_samples(
        [code_sample(ADD_SOLUTION, "e", reference_answer=REFERENCE)], "code_correctness", executor=executor
    )[0]
    assert metrics(out)["reward_error"] == 1
    assert metrics(out)["error_execution_error"] == 1
    assert "correctness" not in metrics(out)


def test_executor_crash_flags_every_code_sample_but_not_the_codeless_one():
    executor = FakeExecutor(RuntimeError("pool died"))
    batch = [
        code_sample(ADD_SOLUTION, "a", reference_answer=REFERENCE),
        code_sample(None, "b", reference_answer=REFERENCE),
    ]
    outputs = score_samples(batch, "code_correctness", executor=executor)
    assert metrics(outputs[0])["error_executor_crash"] == 1
    assert metrics(outputs[1])["reward_error"] == 0
    assert metrics(outputs[1])["correctness"] == 0.0


def test_code_followed_by_a_confirmation_question_is_still_scored_single_turn():
    executor = FakeExecutor(result("passed", 2, 2))
    answer = fence(ADD_SOLUTION) + "\nDoes this look right?"
    out = score_samples([sample(answer, "q", reference_answer=REFERENCE)], "code_correctness", executor=executor)[0]
    assert metrics(out)["correctness"] == 1.0


def multi_turn(*assistant_turns, sample_id="mt"):
    messages = [{"role": "user", "content": "Write add."}]
    for turn in assistant_turns:
        messages += [{"role": "assistant", "content": turn}, {"role": "user", "content": "Sure."}]
    return {"id": sample_id, "messages": messages[:-1], "reference_answer": REFERENCE}


def test_ask_before_coding_through_the_nova_contract_executes_the_committed_turn():
    executor = FakeExecutor(passes_only_reference)
    batch = [
        multi_turn("Are negatives allowed?", "Here:\n" + fence(ADD_SOLUTION), sample_id="asked"),
        multi_turn("Here:\n" + fence(ADD_SOLUTION), "Should I add docs?", sample_id="commit-then-ask"),
        multi_turn("Are negatives allowed?", sample_id="never-committed"),
    ]
    outputs = score_samples(batch, "ask_before_coding", executor=executor)
    asked, commit_then_ask, never = (metrics(o) for o in outputs)
    assert asked["correctness"] == 1.0 and asked["asked_before_coding"] == 1.0
    assert outputs[0]["aggregate_reward_score"] == pytest.approx(1.6)
    assert commit_then_ask["reward_error"] == 0  # the committed code ran although a question came last
    assert commit_then_ask["correctness"] == 1.0 and commit_then_ask["guessed_immediately"] == -1.0
    assert never["correctness"] == 0.0 and never["reward_error"] == 0
    assert len(executor.jobs) == 2


def test_weight_override_keeps_the_rule_for_which_code_runs():
    executor = FakeExecutor(passes_only_reference)
    answer = fence(ADD_SOLUTION) + "\nDoes this look right?"
    out = score_samples(
        [sample(answer, "q", reference_answer=REFERENCE)],
        "code_correctness",
        weights={"has_code": 0.5},
        executor=executor,
    )[0]
    assert metrics(out)["correctness"] == 1.0
    assert out["aggregate_reward_score"] == pytest.approx(1.5)


def test_timeout_scores_zero():
    executor = FakeExecutor(result("timeout", 1, 2))
    out = score_samples(
        [code_sample(ADD_SOLUTION, "t", reference_answer=REFERENCE)], "code_correctness", executor=executor
    )[0]
    assert metrics(out)["correctness"] == 0.0
    assert metrics(out)["reward_error"] == 0


# --- property: never raises, always one result per input -----------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.floats(allow_nan=True) | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
message_like = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "nova_assistant", "system", ""]) | json_values},
    optional={
        "content": st.text(max_size=60) | st.sampled_from(["#### 42", fence("x = 1"), "\\boxed{3}"]) | json_values
    },
)
sample_like = st.fixed_dictionaries(
    {},
    optional={
        "id": json_values,
        "messages": st.lists(message_like, max_size=4) | json_values,
        "metadata": st.dictionaries(st.sampled_from(["reference_answer", "tests", "entry_point"]), json_values)
        | json_values,
        "reference_answer": json_values,
    },
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(sample_like | json_values, max_size=6), reward=st.sampled_from(["gsm8k", "code_correctness"]))
def test_any_json_list_gives_one_result_per_input_and_never_raises(batch, reward):
    outputs = score_samples(batch, reward, executor=FakeExecutor(result("passed", 1, 1)))
    assert len(outputs) == len(batch)
    assert_contract(outputs)
    for raw, out in zip(batch, outputs, strict=True):
        if isinstance(raw, dict):
            sent = raw.get("id")
            try:
                json.dumps(sent, allow_nan=False)
            except ValueError:
                sent = str(sent)
            assert out["id"] == sent


# --- what Nova sees for a sample that could not be scored (error_reward) ------------------------------------


def _prompt_sample(prompt: str, answer: str, sample_id, reference="42"):
    return {
        "id": sample_id,
        "messages": [{"role": "user", "content": prompt}, {"role": "nova_assistant", "content": answer}],
        "metadata": {"reference_answer": reference},
    }


def _mixed_batch():
    return [
        _prompt_sample("p1", "#### 42", "p1-right"),  # 1.5 with the default gsm8k weights
        _prompt_sample("p1", "#### 7", "p1-wrong"),  # scored, low
        _prompt_sample("p1", "#### 42", "p1-broken", reference=None),  # no reference: flagged
        _prompt_sample("p2", "#### 42", "p2-broken", reference=None),  # flagged, no scored sibling
        {"id": "garbage"},  # malformed: flagged, no prompt
    ]


def test_neutral_error_reward_is_the_mean_of_the_same_prompts_scored_samples():
    outputs = score_samples(_mixed_batch(), "gsm8k", error_reward="neutral")
    by_id = {o["id"]: o for o in outputs}
    right, wrong = by_id["p1-right"]["aggregate_reward_score"], by_id["p1-wrong"]["aggregate_reward_score"]
    assert right != wrong
    assert by_id["p1-broken"]["aggregate_reward_score"] == pytest.approx((right + wrong) / 2)
    # No scored sample of its own prompt: the batch's scored mean (here the same two samples).
    assert by_id["p2-broken"]["aggregate_reward_score"] == pytest.approx((right + wrong) / 2)
    assert by_id["garbage"]["aggregate_reward_score"] == pytest.approx((right + wrong) / 2)
    for sample_id in ("p1-broken", "p2-broken", "garbage"):
        assert metrics(by_id[sample_id])["reward_error"] == 1  # the flag is always there
    assert metrics(by_id["p1-right"])["reward_error"] == 0
    assert_contract(outputs)


def test_neutral_gives_a_flagged_sample_zero_grpo_advantage():
    outputs = score_samples(_mixed_batch()[:3], "gsm8k", error_reward="neutral")
    group = [o["aggregate_reward_score"] for o in outputs]
    mean = sum(group) / len(group)
    assert outputs[2]["aggregate_reward_score"] - mean == pytest.approx(0.0)


def test_zero_error_reward_and_a_batch_with_nothing_scored():
    outputs = score_samples(_mixed_batch(), "gsm8k", error_reward="zero")
    assert [o["aggregate_reward_score"] for o in outputs if metrics(o)["reward_error"]] == [0.0, 0.0, 0.0]
    nothing_scored = score_samples([{"id": 1}, {"id": 2}], "gsm8k", error_reward="neutral")
    assert [o["aggregate_reward_score"] for o in nothing_scored] == [0.0, 0.0]


def test_fail_batch_refuses_a_batch_with_an_unscorable_sample_only():
    from rewardpipe.single_turn import BatchFailed

    with pytest.raises(BatchFailed, match="1 of 2 samples"):
        score_samples(_mixed_batch()[1:3], "gsm8k", error_reward="fail_batch")
    fine = score_samples(_mixed_batch()[:2], "gsm8k", error_reward="fail_batch")
    assert [metrics(o)["reward_error"] for o in fine] == [0, 0]


def test_an_unknown_error_reward_is_a_configuration_error():
    with pytest.raises(ValueError, match="error_reward"):
        score_samples([], "gsm8k", error_reward="mean")


# --- deadline: every sample answered before the invocation's time runs out ------------------------------------


class FakeClock:
    """Stands in for the time module: executions advance it, so waves and deadlines are deterministic."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class SlowExecutor(FakeExecutor):
    """Each job takes ``seconds`` of fake time, or times out if its budget is shorter."""

    def __init__(self, clock: FakeClock, seconds: float):
        super().__init__(result("passed", 2, 2))
        self.clock, self.seconds = clock, seconds

    def run_batch(self, jobs, workers=None):
        jobs = list(jobs)
        self.jobs.extend(jobs)
        self.clock.now += max(min(self.seconds, job.timeout_s) for job in jobs)
        return [result("timeout", 0, 2) if job.timeout_s < self.seconds else result("passed", 2, 2) for job in jobs]


def test_samples_past_the_deadline_are_flagged_not_lost(monkeypatch):
    import rewardpipe.single_turn as single_turn

    clock = FakeClock()
    monkeypatch.setattr(single_turn, "time", clock)
    executor = SlowExecutor(clock, seconds=4.0)
    reference = {**REFERENCE, "timeout_s": 5}
    batch = [code_sample(ADD_SOLUTION, f"s{i}", reference_answer=reference) for i in range(5)]
    outputs = score_samples(batch, "code_correctness", executor=executor, workers=1, deadline=clock.now + 9.5)
    kinds = [next((m["name"] for m in o["metrics_list"] if m["name"].startswith("error_")), "scored") for o in outputs]
    # one lane: s0 ends at +4, s1 at +8; then 1.5 s left, less than a job's own 5 s limit: never started
    assert kinds == [
        "scored",
        "scored",
        "error_deadline_exceeded",
        "error_deadline_exceeded",
        "error_deadline_exceeded",
    ]
    assert [job.timeout_s for job in executor.jobs] == [5, 5]  # every job that ran had its whole budget
    assert metrics(outputs[4])["reward_error"] == 1 and metrics(outputs[0])["correctness"] == 1.0
    assert_contract(outputs)


def test_no_time_left_answers_every_sample_flagged_without_running_code(monkeypatch):
    import rewardpipe.single_turn as single_turn

    clock = FakeClock()
    monkeypatch.setattr(single_turn, "time", clock)
    executor = SlowExecutor(clock, seconds=1.0)
    batch = [code_sample(ADD_SOLUTION, i, reference_answer=REFERENCE) for i in range(3)]
    outputs = score_samples(batch, "code_correctness", executor=executor, deadline=clock.now + 0.5)
    assert executor.jobs == []
    assert all(metrics(o)["error_deadline_exceeded"] == 1 and metrics(o)["reward_error"] == 1 for o in outputs)


def test_a_job_that_times_out_within_its_own_budget_is_still_the_models_timeout(monkeypatch):
    import rewardpipe.single_turn as single_turn

    clock = FakeClock()
    monkeypatch.setattr(single_turn, "time", clock)
    executor = FakeExecutor(result("timeout", 0, 2))
    out = score_samples(
        [code_sample(ADD_SOLUTION, "t", reference_answer=REFERENCE)],
        "code_correctness",
        executor=executor,
        deadline=clock.now + 600,
    )[0]
    assert metrics(out)["reward_error"] == 0 and metrics(out)["correctness"] == 0.0


def test_a_memory_hungry_sample_fails_alone_under_the_configured_sandbox_cap(monkeypatch):
    """REWARDPIPE_SANDBOX_MEMORY_MB reaches the real sandbox: the hog fails as a sample, its neighbour passes."""
    from rewardpipe.execution.sandbox import make_executor

    monkeypatch.setenv("REWARDPIPE_SANDBOX_MEMORY_MB", "256")
    executor = make_executor()
    assert executor.config.memory_mb == 256
    hog = "def add(a, b):\n    block = bytearray(600 * 1024 * 1024)\n    return a + b + len(block) * 0\n"
    try:
        outputs = score_samples(
            [
                code_sample(hog, "hog", reference_answer=REFERENCE),
                code_sample(ADD_SOLUTION, "ok", reference_answer=REFERENCE),
            ],
            "code_correctness",
            executor=executor,
            workers=2,
        )
    finally:
        executor.close()
    assert metrics(outputs[0])["correctness"] < 1.0
    assert metrics(outputs[1])["correctness"] == 1.0 and metrics(outputs[1])["reward_error"] == 0


def test_a_bad_sandbox_memory_setting_names_the_variable():
    from rewardpipe.execution.sandbox import SandboxConfig, SandboxConfigError

    assert SandboxConfig.from_env({"REWARDPIPE_SANDBOX_MEMORY_MB": "692"}).memory_mb == 692
    with pytest.raises(SandboxConfigError, match="REWARDPIPE_SANDBOX_MEMORY_MB"):
        SandboxConfig.from_env({"REWARDPIPE_SANDBOX_MEMORY_MB": "lots"})


def test_samples_not_answered_by_answer_by_are_flagged_whatever_the_reward(monkeypatch):
    """The deadline covers reading and scoring too, not only code: a reward with no code at all (here each
    score takes 10 s of fake time) must not run a batch past the invocation's end."""
    import rewardpipe.single_turn as single_turn
    from rewardpipe.rewards.base import Component, Reward

    clock = FakeClock()
    monkeypatch.setattr(single_turn, "time", clock)

    def slow_component(data):
        clock.now += 10.0
        return 1.0

    reward = Reward("slow", (Component("slow", 1.0, slow_component),))
    batch = [sample(sample_id=f"s{i}") for i in range(5)]
    outputs = score_samples(batch, reward, answer_by=clock.now + 25.0, error_reward="zero")
    assert [o["id"] for o in outputs] == [f"s{i}" for i in range(5)]
    # s0, s1, s2 start at +0, +10, +20; at +30 the time is up: s3 and s4 are answered at once, flagged
    assert [metrics(o)["reward_error"] for o in outputs] == [0, 0, 0, 1, 1]
    assert metrics(outputs[3])["error_deadline_exceeded"] == 1 and clock.now == 1030.0
    assert_contract(outputs)


def test_a_batch_past_answer_by_before_reading_is_answered_flagged_in_order(monkeypatch):
    import rewardpipe.single_turn as single_turn

    clock = FakeClock()
    monkeypatch.setattr(single_turn, "time", clock)
    batch = [sample(sample_id="a", metadata={"reference_answer": 42}), {"id": "bad"}, "junk"]
    outputs = score_samples(batch, "gsm8k", answer_by=clock.now - 1)
    assert [o["id"] for o in outputs] == ["a", "bad", None]
    assert all(metrics(o)["error_deadline_exceeded"] == 1 for o in outputs)


def test_neutral_error_reward_stays_finite_when_scores_are_near_the_float_maximum():
    """Finite weights are valid configuration; two rewards of 1e308 overflowed the mean's sum and the
    OverflowError lost the whole batch. Since round twenty an aggregate beyond ±MAX_SCORE_MAGNITUDE is the
    sample's error in the answer as in its record (aggregate_out_of_range); the batch is still answered, and
    the neutral value of the largest scores allowed stays finite."""
    batch = [
        _prompt_sample("p", "#### 42", "a"),
        _prompt_sample("p", "#### 42", "b"),
        _prompt_sample("p", "#### 42", "broken", reference=None),
    ]
    outputs = score_samples(batch, "gsm8k", {"answer_correct": 1e308}, error_reward="neutral")
    assert [metrics(o)["error_aggregate_out_of_range"] for o in outputs[:2]] == [1, 1]
    assert all(math.isfinite(o["aggregate_reward_score"]) for o in outputs)
    assert_contract(outputs)
    outputs = score_samples(batch, "gsm8k", {"answer_correct": 1e100, "format": 0.0}, error_reward="neutral")
    assert [o["aggregate_reward_score"] for o in outputs[:2]] == [pytest.approx(1e100)] * 2
    assert outputs[2]["aggregate_reward_score"] == pytest.approx(1e100) and metrics(outputs[2])["reward_error"] == 1
    assert_contract(outputs)


def test_fit_response_drops_diagnostics_then_flags_then_metrics_never_a_sample():
    from rewardpipe.single_turn import ResponseTooLarge, fit_response

    outputs = score_samples(
        [sample(sample_id=i, metadata={"reference_answer": 42}) for i in range(50)] + [{"id": "bad"}], "gsm8k"
    )
    full = len(json.dumps(outputs))
    assert fit_response(outputs, full) == (outputs, None)
    sizes, names = [], []
    for limit in (full - 1, full * 6 // 10, full * 4 // 10, full // 5):  # the stages take ~67 %, ~34 %, ~13 %
        fitted, note = fit_response(outputs, limit)
        assert note and len(json.dumps(fitted)) <= limit
        assert [(o["id"], o["aggregate_reward_score"]) for o in fitted] == [
            (o["id"], o["aggregate_reward_score"]) for o in outputs
        ]
        sizes.append(len(json.dumps(fitted)))
        names.append(sorted({m["name"] for o in fitted for m in o.get("metrics_list", [])}))
    assert sizes == sorted(sizes, reverse=True)
    assert names[0] == ["answer_correct", "error_malformed_sample", "format", "reward_error"]  # rewards and flags
    assert names[1] == names[2] == ["reward_error"] and names[3] == []
    assert set(fitted[0]) == {"id", "aggregate_reward_score"}  # metrics_list is optional in the contract
    with pytest.raises(ResponseTooLarge, match="51 samples"):
        fit_response(outputs, 100)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_a_component_computing_nan_or_infinity_flags_its_sample_and_the_rest_are_unchanged(bad):
    from rewardpipe.rewards.base import Component, Reward

    reward = Reward(
        "r",
        (
            Component("main", 1.0, lambda data: 1.0),
            Component("shaky", 0.0, lambda data: bad if data.transcript.assistant_texts[-1] == "x" else 0.5),
        ),
    )
    batch = [_prompt_sample("p", "ok", "a"), _prompt_sample("p", "x", "b"), _prompt_sample("p", "ok", "c")]
    outputs = score_samples(batch, reward, error_reward="neutral")
    assert [o["aggregate_reward_score"] for o in outputs] == [1.0, 1.0, 1.0]
    assert [metrics(o)["reward_error"] for o in outputs] == [0, 1, 0]
    assert metrics(outputs[1])["error_non_finite_score"] == 1
    assert_contract(outputs)


@pytest.mark.parametrize(("bad", "weight"), [(1e101, 1.0), (1e308, 1.0), (-1e308, 0.0), (1e200, 0.0)])
def test_a_component_beyond_the_score_bound_flags_its_sample_as_the_record_does(bad, weight):
    """Round twenty: a finite value beyond ±MAX_SCORE_MAGNITUDE (a component that parses the model's answer as a
    number, fed "1e308") was answered to Nova, verifiers and verl as a score (1e308), while the record written for
    it was an error (rewardpipe.episode.checked_score). Every answer now goes through the same check."""
    from rewardpipe.integrations import verifiers
    from rewardpipe.rewards.base import Component, Reward

    reward = Reward(
        "r",
        (
            Component("main", 1.0, lambda data: 1.0),
            Component("parsed", weight, lambda data: bad if data.transcript.assistant_texts[-1] == "x" else 0.5),
        ),
    )
    batch = [_prompt_sample("p", "ok", "a"), _prompt_sample("p", "x", "b"), _prompt_sample("p", "ok", "c")]
    outputs = score_samples(batch, reward, error_reward="neutral")
    assert [metrics(o)["reward_error"] for o in outputs] == [0, 1, 0]
    assert metrics(outputs[1])["error_component_out_of_range"] == 1
    assert all(abs(o["aggregate_reward_score"]) <= 1e100 for o in outputs)
    assert_contract(outputs)
    functions, _ = verifiers.rubric_functions(reward)
    assert all(math.isnan(fn(completion="x", answer="42", prompt="p")) for fn in functions)  # verl: the same path


def test_an_executor_failing_mid_batch_keeps_the_results_of_the_waves_before_it(monkeypatch):
    """The batch runs in waves; an executor that breaks in the second wave (say, no thread can be started)
    used to turn every sample of the batch into executor_crash, the finished ones included."""
    import rewardpipe.single_turn as single_turn

    clock = FakeClock()
    monkeypatch.setattr(single_turn, "time", clock)

    class BreaksAfterTwoJobs(SlowExecutor):
        def run_batch(self, jobs, workers=None):
            if len(self.jobs) >= 2:
                raise RuntimeError("can't start new thread")
            return super().run_batch(jobs, workers)

    batch = [code_sample(ADD_SOLUTION, f"s{i}", reference_answer=REFERENCE) for i in range(4)]
    outputs = score_samples(
        batch, "code_correctness", executor=BreaksAfterTwoJobs(clock, 1.0), workers=1, deadline=clock.now + 100
    )
    assert [metrics(o)["reward_error"] for o in outputs] == [0, 0, 1, 1]
    assert metrics(outputs[0])["correctness"] == 1.0 and metrics(outputs[2])["error_executor_crash"] == 1


def test_an_executor_failing_midway_without_a_deadline_keeps_the_results_it_gave():
    class FailsAfterOne(FakeExecutor):
        def run_batch(self, jobs, workers=None):
            jobs = list(jobs)
            yield result("passed", 2, 2).model_copy(update={"id": jobs[0].id})
            raise RuntimeError("the pool broke")

    batch = [code_sample(ADD_SOLUTION, f"s{i}", reference_answer=REFERENCE) for i in range(3)]
    outputs = score_samples(batch, "code_correctness", executor=FailsAfterOne(result("passed", 2, 2)))
    assert [metrics(o)["reward_error"] for o in outputs] == [0, 1, 1]


class _CrashingExecutor:
    def run_batch(self, jobs, workers=None):
        raise OSError("pool died")


def test_a_sample_naming_an_unknown_task_whose_execution_crashed_is_one_error_record():
    from rewardpipe.models import Message
    from rewardpipe.rewards import get_reward
    from rewardpipe.single_turn import ScoreSample, score_sample_records

    samples = [
        ScoreSample(
            rollout_id=rollout,
            group_id="g",
            task_id=task_id,
            messages=[
                Message(role="user", content="Write add."),
                Message(role="assistant", content=fence(ADD_SOLUTION)),
            ],
            reference={"tests": ADD_TESTS, "entry_point": "add"},
        )
        for rollout, task_id in (("a", "missing"), ("b", "missing too"))
    ]
    transcripts = []
    records = score_sample_records(
        samples,
        get_reward("code_correctness"),
        run_id="r",
        executor=_CrashingExecutor(),
        tasks={"known": object()},
        on_transcript=transcripts.append,
    )
    assert [r.error.kind for r in records] == ["unknown_task", "unknown_task"]
    assert [t.verdict.status for t in transcripts] == ["error", "error"]
    assert all(t.verdict.reason.startswith("unknown_task: task 'missing") for t in transcripts)


# A sample without an assistant message has no answer: the contract's malformed sample, flagged, never a silent 0
# (before, each of these was scored 0.0 with reward_error = 0). The check is `rewardpipe score`'s.
NO_ANSWER_MESSAGES = {
    "user-only": [{"role": "user", "content": "What is 6 * 7?"}],
    "empty": [],
    "system-only": [{"role": "system", "content": "be brief"}],
    "system-and-user": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "What is 6 * 7?"}],
    "tool-only": [{"role": "user", "content": "q"}, {"role": "tool", "content": "#### 42", "tool_call_id": "c1"}],
    "user-says-the-answer": [{"role": "user", "content": "#### 42\n" + fence(ADD_SOLUTION)}],
}


@pytest.mark.parametrize("reward", ["gsm8k", "code_correctness", "ask_before_coding"])
@pytest.mark.parametrize("shape", sorted(NO_ANSWER_MESSAGES))
@pytest.mark.parametrize("error_reward", ["neutral", "zero"])
def test_a_sample_without_an_assistant_message_is_a_flagged_malformed_sample(reward, shape, error_reward):
    executor = FakeExecutor(passes_only_reference)
    good = sample("#### 42\n" + fence(ADD_SOLUTION), "good", reference_answer=REFERENCE)
    if reward == "gsm8k":
        good["reference_answer"] = "42"
    bad = {"id": shape, "messages": NO_ANSWER_MESSAGES[shape], "reference_answer": good["reference_answer"]}
    outputs = score_samples([good, bad], reward, executor=executor, error_reward=error_reward)
    assert metrics(outputs[0])["reward_error"] == 0 and outputs[0]["aggregate_reward_score"] > 0
    flagged = metrics(outputs[1])
    assert flagged["reward_error"] == 1 and flagged["error_malformed_sample"] == 1
    assert outputs[1]["id"] == shape
    expected = 0.0 if error_reward == "zero" else outputs[0]["aggregate_reward_score"]  # neutral: the batch's mean
    assert outputs[1]["aggregate_reward_score"] == pytest.approx(expected)
    assert len(executor.jobs) == (0 if reward == "gsm8k" else 1)  # nothing of the answerless sample ran
    assert_contract(outputs)


def test_a_sample_without_an_answer_fails_the_batch_under_fail_batch():
    from rewardpipe.single_turn import BatchFailed

    with pytest.raises(BatchFailed):
        batch = [sample(reference_answer="42"), {"id": "x", "messages": [], "reference_answer": "42"}]
        score_samples(batch, "gsm8k", error_reward="fail_batch")
    assert score_samples([sample(reference_answer="42")], "gsm8k", error_reward="fail_batch")  # the control


@pytest.mark.parametrize(
    "answer", [{"role": "assistant", "content": ""}, {"role": "assistant", "content": None}, {"role": "model"}]
)
def test_an_empty_assistant_message_is_an_answer_and_is_scored(answer):
    """As in `rewardpipe score` and docs/reference/inputs.md: the model said nothing, which is its answer."""
    messages = [{"role": "user", "content": "q"}, answer]
    out = score_samples([{"id": 1, "messages": messages, "reference_answer": "42"}])[0]
    assert metrics(out)["reward_error"] == 0 and out["aggregate_reward_score"] == 0.0


def test_score_samples_refuses_exactly_the_lines_rewardpipe_score_refuses(tmp_path):
    """The Lambda path and `rewardpipe score` read one conversation the same way: what the file reader refuses
    for its messages is flagged malformed here, and what it accepts is scored unflagged."""
    from rewardpipe.single_turn import SampleReader

    conversations = [*NO_ANSWER_MESSAGES.values()]
    conversations += [
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": "#### 42"}],
        [{"role": "user", "content": "q"}, {"role": "nova_assistant", "content": [{"type": "text", "text": "#### 4"}]}],
        [{"role": "assistant", "content": ""}],
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": "#### 4"}, {"role": "user", "content": ""}],
    ]
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps({"messages": m, "reference": "42"}) + "\n" for m in conversations))
    refused_by_file = [sample is None for _, sample, _ in SampleReader(path)]
    outputs = score_samples([{"id": i, "messages": m, "reference_answer": "42"} for i, m in enumerate(conversations)])
    flagged = [bool(metrics(o)["reward_error"]) for o in outputs]
    assert flagged == refused_by_file == [True] * len(NO_ANSWER_MESSAGES) + [False] * 4
