"""Round thirty on the reward, environment and monitoring side.

R1. A recovery judged over pooled small steps did not say so: the ``recovered`` alarm of a component whose
verdict was pooled over steps 2-3 (each step alone had too few groups for a verdict) said "recovered at step 3:
zero-variance groups down to 0%" with the pool's figures (4 eligible groups, where step 3 had 2) and no
``pooled_steps``, where the dead alarm it closed said both. A recovery judged over a pool now says so in its
message and carries ``pooled_steps`` in its figures, as the dead alarm does.

R2. The dead alarm of a pooled verdict counted pooled verdicts as steps: with ``raise_after=2``, steps 0-3 judged
as two pools raised "(dead for 2 consecutive steps)" and ``consecutive_dead_steps: 2``, where four steps were
dead. A streak of pooled verdicts is now said as the verdicts it is, over the steps they span.

R2b. A step of many groups holding one scored rollout each (a group id per rollout, one rollout per prompt, or every
group cut to one by errors) said "pooling small steps: 0 of 4 groups so far over steps 0-2" for ever: it is no
small step, and no pool of such steps reaches a verdict. The message now says what it is, and why it may be so.

R3. Asking leave to go on drew a hidden detail: "Can I start?" revealed one on 11 of the 46 bundled tasks ("the
start date", "may start with 1"), "Can I run it?" on 5 ("runs of spaces"), "Which one?" on 13 ("one hour"), so
the question then the code scored asked_before_coding 1.0 and no guessed_immediately, where "Can I begin?" drew
nothing. A verb of the programmer's own next move right after "I", "we" or "me", and "one" as a pronoun, name no
subject; what the verb is said of stays ("Should I start counting from the next business day?"). So do the words
of how much with no noun ("Is that the whole thing?" told "the last whole word" on 7 tasks; "Is that the full
task?" "full stops"), as round twenty made "Above?" and "Least?" ask nothing.

R4. An alarm's example rollouts were drawn from every scored rollout of a constant group, those where the component
had no value (None, NaN) included: a component constant at 0.5 in the rollouts that have it alarmed with three
examples reading "format = n/a, like every rollout of its group", and a bonus never earned showed as its "closest
misses" the rollouts with the best total where the bonus was never judged (None). Examples are now drawn from the
rollouts the verdict was judged on; a rollout without a total ranks after every total.

R5. tool_call compared a number as written: ``<answer>12,000</answer>`` (the bundled task asks for "the number
only", and a model groups its thousands) missed the goal ``12000``, as did ``54,321`` for ``54321``: a right answer
scored 0 on four of the six bundled answer tasks. An answer that is one number with thousands separators (the gsm8k
reward's grouping rule, now shared) is read without them; "1,2", "41,42" or "12,000 cents" are compared as before.
"""

from __future__ import annotations

import pytest

from rewardpipe.monitoring import monitor_records
from rewardpipe.monitoring.pooling import StepHistory
from tests.monitoring.test_small_batches import TH, records


def _steps(step, dead, **kwargs):
    """Two groups of four rollouts: ``format`` constant 0.0 when ``dead``, else varying in every group."""
    out = records(step, dead=("format",), **kwargs)
    if not dead:
        for record in out:
            record["components"]["format"] = float(int(record["rollout_id"][-1]) % 2)
    return out


def _alarms(plan, th=TH):
    history, state, found = StepHistory(), None, []
    for step, dead in plan:
        result = monitor_records(_steps(step, dead), th, state, history)
        state = result.state
        found += [alarm for alarm in result.alarms if alarm.component == "format"]
    return found


# -- R1: a pooled recovery says it was pooled -----------------------------------------------------------------


def test_a_recovery_judged_over_pooled_steps_says_so():
    raised, recovered = _alarms([(0, True), (1, True), (2, False), (3, False)])
    assert raised.kind == "dead_component" and raised.figures["pooled_steps"] == [0, 1]
    assert recovered.kind == "recovered" and recovered.step == 3
    assert recovered.figures["pooled_steps"] == [2, 3]
    assert "pooled over steps 2\u20133" in recovered.message


@pytest.mark.parametrize("kind", ["dying_component", "recovered", "dead_component"])
def test_every_alarm_of_a_pooled_verdict_says_so_once(kind):
    from rewardpipe.monitoring.alarms import Alarm
    from rewardpipe.monitoring.pooling import Pooling, pooled_note
    from rewardpipe.monitoring.statistics import StepAcc

    pooling = Pooling(StepAcc(), 4)
    pooling.pooled["format"] = [2, 3]
    note = pooled_note([2, 3], 4)
    message = "format is dying" + (f" {note}" if kind == "dead_component" else "")
    alarm = Alarm(kind=kind, component="format", step=3, cause="x", message=message)
    pooling.annotate(alarm)
    assert alarm.figures["pooled_steps"] == [2, 3] and alarm.message.count(note) == 1


def test_a_recovery_judged_on_its_own_step_says_nothing_of_pools():
    big = TH.model_copy(update={"min_groups": 2})
    _raised, recovered = _alarms([(0, True), (1, False)], big)
    assert recovered.kind == "recovered" and "pooled_steps" not in recovered.figures
    assert "pooled" not in recovered.message


# -- R2: a streak of pooled verdicts is not a streak of steps ------------------------------------------------


def test_a_streak_of_pooled_verdicts_names_the_steps_it_spans():
    (raised,) = _alarms([(step, True) for step in range(4)], TH.model_copy(update={"raise_after": 2}))
    assert raised.step == 3 and raised.figures["pooled_steps"] == [2, 3]
    assert "2 consecutive steps" not in raised.message
    assert "dead in 2 consecutive verdicts over steps 0\u20133" in raised.message
    assert raised.figures["consecutive_dead_verdicts"] == 2 and raised.figures["dead_since_step"] == 0


def test_a_streak_of_steps_judged_alone_is_said_as_before():
    th = TH.model_copy(update={"raise_after": 2, "min_groups": 2})
    (raised,) = _alarms([(step, True) for step in range(3)], th)
    assert raised.step == 1 and "(dead for 2 consecutive steps)" in raised.message
    assert raised.figures["consecutive_dead_steps"] == 2 and "consecutive_dead_verdicts" not in raised.figures


@pytest.mark.parametrize("errors", [False, True])
def test_groups_of_one_scored_rollout_are_not_called_small_steps(errors):
    history, state = StepHistory(), None
    for step in range(3):
        out = records(step, groups=16, size=2 if errors else 1)
        if errors:
            for record in out[1::2]:
                record.update(status="error", error={"kind": "sandbox_error", "message": "x"})
        result = monitor_records(out, TH, state, history)
        state = result.state
        stats = result.steps[0].components["format"]
        assert stats.verdict == "insufficient_data"
        assert "pooling small steps" not in stats.message
        assert "each of its 16 groups holds at most one scored rollout" in stats.message
        assert ("16 of its 32 records are errors" in stats.message) == errors
        assert ("a group id of its own" in stats.message) != errors


def test_a_small_step_of_full_groups_still_says_it_pools():
    result = monitor_records(records(0, groups=2, size=4), TH)
    assert "pooling small steps: 2 of 4 groups so far" in result.steps[0].components["format"].message


# -- R3: asking leave to go on asks nothing ------------------------------------------------------------------

LEAVE_TO_GO_ON = [
    "Can I start?",
    "Can I run it?",
    "Which one?",
    "Shall we go ahead and begin?",
    "I\u2019ll start, ok?",
    "Let me write it now?",
    "Should I just start coding?",
    "OK, which one then?",
    "Is that the whole thing?",
    "Whole?",
    "Is that the full task?",
    "Is the task complete?",
    "Is that the entire request?",
]


def _bundled():
    from rewardpipe.envs.ask_before_coding.tasks import BUNDLED_TASKS
    from rewardpipe.models import load_tasks

    return load_tasks(BUNDLED_TASKS)


def test_asking_leave_to_go_on_draws_no_detail_on_any_bundled_task():
    from rewardpipe.envs.ask_before_coding.questions import best_spec_match, question_subject

    drawn = []
    for task in _bundled():
        for question in LEAVE_TO_GO_ON:
            subject = question_subject(question, task.prompt, task.entry_point)
            if not subject.asks_nothing and best_spec_match(subject.words, task.spec)[0] is not None:
                drawn.append((task.task_id, question))
    assert not drawn, f"{len(drawn)} details drawn, e.g. {drawn[:5]}"


@pytest.mark.parametrize(
    ("question", "task_id"), [("Can I start?", "abc-006-add-business-days"), ("Which one?", "abc-001-format-duration")]
)
def test_leave_to_go_on_then_the_code_scores_as_a_guess(question, task_id):
    from rewardpipe.envs.ask_before_coding.environment import ENVIRONMENT
    from rewardpipe.envs.ask_before_coding.reward import asked_before_coding, guessed_immediately
    from rewardpipe.episode import apply_env_turn, apply_policy_turn, start_episode
    from rewardpipe.rewards.base import Transcript

    (task,) = [task for task in _bundled() if task.task_id == task_id]
    state = start_episode(task, env=ENVIRONMENT, run_id="r", step=0, group_id="g", rollout_id="x")
    state = apply_env_turn(apply_policy_turn(state, question, ENVIRONMENT, task), task, ENVIRONMENT)
    assert state.revealed == [], state.messages[-1].content
    state = apply_policy_turn(state, f"```python\n{task.reference_solution}\n```", ENVIRONMENT, task)
    transcript = Transcript.from_messages(state.messages)
    assert asked_before_coding.fn(transcript, state) == 0.0
    assert guessed_immediately.fn(transcript, state) == -1.0


@pytest.mark.parametrize(
    ("question", "task_id"),
    [
        ("Should I start counting from the next business day?", "abc-006-add-business-days"),
        ("Can the local part start with a dot?", "abc-019-validate-email"),
        ("What about runs of spaces?", "abc-002-slugify-title"),
        ("Is one hour written as 1:00:00?", "abc-001-format-duration"),
        ("Should I test for negative durations?", "abc-001-format-duration"),
        ("Is the total rounded to the nearest whole second?", "abc-017-parse-duration"),
        ("Are full stops part of a word?", "abc-005-top-words"),
    ],
)
def test_what_the_move_is_said_of_is_still_asked(question, task_id):
    from rewardpipe.envs.ask_before_coding.questions import best_spec_match, question_subject

    (task,) = [task for task in _bundled() if task.task_id == task_id]
    subject = question_subject(question, task.prompt, task.entry_point)
    assert best_spec_match(subject.words, task.spec)[0] is not None, subject


@pytest.mark.slow
@pytest.mark.parametrize("unit", ["i ", "we   ", "i just ", "which ", "the   other ", "i\u2019ll go ahead and "])
def test_reading_leave_to_go_on_stays_linear(unit):
    import rewardpipe.envs.ask_before_coding.questions as questions
    from tests.security.test_round_four_scorer_text import _build, assert_linear
    from tests.security.text_cost import operations

    def at(n: int) -> int:
        text = _build("Can ", unit, " start?", n)
        return operations(lambda: questions._subject_words(text), [questions])

    assert_linear(f"_subject_words({unit!r} * n)", at)


# -- R4: an alarm's examples are rollouts the verdict was judged on -----------------------------------------


def _half_none(value, none_total):
    """Four groups of four: ``format`` is ``value`` in odd rollouts, None in even ones (their total ``none_total``)."""
    out = records(0, groups=4, dead=("format",))
    for record in out:
        if int(record["rollout_id"][-1]) % 2 == 0:
            record["components"]["format"], record["aggregate"] = None, none_total
        else:
            record["components"]["format"] = value
    return out


def test_a_constant_components_examples_show_its_value_not_its_gaps():
    (alarm,) = [a for a in monitor_records(_half_none(0.5, 2.0), TH).alarms if a.component == "format"]
    assert alarm.kind == "dead_component" and len(alarm.examples) == 3
    assert all("format = 0.5" in example["reason"] for example in alarm.examples), alarm.examples
    assert all(int(example["rollout_id"][-1]) % 2 == 1 for example in alarm.examples)


@pytest.mark.parametrize("none_total", [5.0, None, float("nan")])
def test_a_never_earned_bonus_shows_misses_where_it_was_judged(none_total):
    (alarm,) = [a for a in monitor_records(_half_none(0.0, none_total), TH).alarms if a.component == "format"]
    assert alarm.cause == "constant_at_minimum" and alarm.examples
    assert all(int(example["rollout_id"][-1]) % 2 == 1 for example in alarm.examples), alarm.examples


# -- R5: a number with grouped thousands is the number ---------------------------------------------------------


@pytest.mark.parametrize(
    ("task_id", "calls", "answer"),
    [
        ("tc-001-balance", [("get_balance", {"account": "checking"})], "<answer>12,000</answer>"),
        ("tc-001-balance", [("get_balance", {"account": "checking"})], "<answer>**12,000**.</answer>"),
        (
            "tc-010-total",
            [("get_balance", {"account": "checking"}), ("get_balance", {"account": "savings"})],
            "<answer>54,321</answer>",
        ),
    ],
)
def test_a_right_number_with_grouped_thousands_reaches_the_goal(task_id, calls, answer):
    from tests.security.test_round_twentythree_reward import _call, _tool_play, _tool_task

    task = _tool_task(task_id)
    components = _tool_play(task, [*(_call(name, **arguments) for name, arguments in calls), answer])
    assert components["goal_reached"] == 1.0


@pytest.mark.parametrize(
    "answer", ["1,200", "12,00", "1,2000", "12,000 cents", "12,000,", "12,000 or 13,000", "1,20,00"]
)
def test_commas_that_group_no_number_stay_in_the_answer(answer):
    from rewardpipe.envs.tool_call.tasks import normalise_answer

    assert normalise_answer(answer) != normalise_answer("12000")


def test_a_grouped_expected_answer_reads_as_the_plain_one():
    from rewardpipe.envs.tool_call.tasks import normalise_answer

    assert normalise_answer("1,234,567") == normalise_answer("1234567") == "1234567"
    assert normalise_answer("1,2") == "1,2" and normalise_answer("41,42") == "41,42"


@pytest.mark.slow
@pytest.mark.parametrize("unit", [",000", ",00", "1,", ",0"])
def test_reading_grouped_thousands_stays_linear(unit):
    import rewardpipe.envs.tool_call.tasks as tasks
    from tests.security.test_round_four_scorer_text import _build, assert_linear
    from tests.security.text_cost import operations

    def at(n: int) -> int:
        text = _build("1", unit, "x", n)
        return operations(lambda: tasks.normalise_answer(text), [tasks])

    assert_linear(f"normalise_answer(1 + {unit!r} * n)", at)
