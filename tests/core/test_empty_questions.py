"""The reward is not gamed by empty questions: only a question the user answers with a hidden detail earns
asked_before_coding, and a content-free turn in front of the code does not dodge the guess penalty.

Every case runs through the real pieces: the rule-based (or stubbed LLM) simulator answers, the episode
keeps the bookkeeping, the reward reads it; plus the paths without bookkeeping (recorded transcripts, a bare
``Reward.score``).
"""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rewardpipe.envs.ask_before_coding.environment import AskBeforeCoding, AskBeforeCodingState
from rewardpipe.episode import apply_env_turn, apply_policy_turn, run_episode, start_episode
from rewardpipe.models import Message, Rollout, load_tasks
from rewardpipe.policies import ReplayPolicy, fenced
from rewardpipe.questions import STOPWORDS, answered_turns_in, question_subject
from rewardpipe.rewards import get_reward
from rewardpipe.runner import score_rollouts
from rewardpipe.simulator import (
    ASK_SOMETHING_SPECIFIC,
    SIMULATOR_SYSTEM_PROMPT,
    OpenAISimulator,
    RuleBasedSimulator,
)
from tests.core.conftest import FakeExecutor, make_task, result

TASKS = load_tasks(Path(__file__).resolve().parents[2] / "rewardpipe" / "data" / "tasks.jsonl")
REWARD = get_reward("ask_before_coding")
SIM = RuleBasedSimulator()
ENV = AskBeforeCoding(SIM)


def answered(turns) -> AskBeforeCodingState:
    """A state holding only the simulator's bookkeeping: which assistant turns were answered."""
    return AskBeforeCodingState(answered_turns=sorted(turns))


# Turns that are questions by the parser (they end in "?") but ask for nothing.
CONTENT_FREE = [
    "?",
    "??",
    "？",
    "ok?",
    "OK?",
    "Okay?",
    "can you explain again?",
    "Could you explain that again, please?",
    "Can you clarify?",
    "What do you mean?",
    "Is that right?",
    "Anything else?",
    "Any thoughts?",
    "Hmm?",
    "Sure?",
    "...?",
    "Could you repeat that?",
    "**?**",
    "Can you say more?",
    "`names case duplicates sorted order`?",  # words inside inline code ask nothing
    "```python\n# names case duplicates sorted order empty seconds hours negative\n```\nok?",  # nor inside a fence
]


def _episode_turns(task, first_turns, code):
    """Run an episode: ``first_turns`` then a commit of ``code``, answered by the rule-based simulator."""
    turns = [*first_turns, "Here it is:\n" + fenced(code)]
    messages = [{"role": "user", "content": task.prompt}]
    for turn in turns:
        messages += [{"role": "assistant", "content": turn}, {"role": "user", "content": "unused"}]
    policy = ReplayPolicy([Rollout(rollout_id="r", group_id="g", task_id=task.task_id, messages=messages)])
    executor = FakeExecutor(result("passed", 3, 3))
    return run_episode(
        task,
        policy,
        ENV,
        executor,
        REWARD,
        run_id="run",
        step=0,
        group_id="g",
        rollout_id="r",
        max_turns=len(turns) + 1,
    )


def _reply(task, question):
    state = start_episode(task, env=ENV, run_id="run", step=0, group_id="g", rollout_id="r", max_turns=10)
    return SIM.respond(apply_policy_turn(state, question, ENV, task), task)


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.task_id)
def test_rule_based_simulator_reveals_nothing_to_a_content_free_question(task):
    echoes = [f"{task.entry_point}?", f"`{task.entry_point}`?", task.prompt.rstrip(".") + "?"]
    for question in CONTENT_FREE + echoes:
        reply = _reply(task, question)
        assert reply.revealed is None, f"{question!r} revealed {reply.text!r}"
        assert reply.text in ASK_SOMETHING_SPECIFIC
        assert all(item not in reply.text for item in task.spec)


@pytest.mark.parametrize("question", CONTENT_FREE)
def test_a_content_free_first_turn_scores_like_an_honest_guess(question):
    task = TASKS[0]
    gamed = _episode_turns(task, [question], task.reference_solution)
    honest = _episode_turns(task, [], task.reference_solution)
    assert gamed.components["asked_before_coding"] == 0.0
    assert gamed.components["guessed_immediately"] == -1.0
    assert gamed.aggregate == pytest.approx(honest.aggregate)
    assert gamed.metrics["real_questions"] == 0


def test_many_content_free_turns_and_statements_still_do_not_dodge_the_guess_penalty():
    task = TASKS[1]
    record = _episode_turns(task, ["?", "Let me think.", "ok?", "Can you explain again?"], task.reference_solution)
    assert record.components["asked_before_coding"] == 0.0
    assert record.components["guessed_immediately"] == -1.0


@pytest.mark.parametrize(
    "question",
    [
        "Are there any other requirements?",
        "Any edge cases I should know about?",
        "What output format do you want for the duration?",
        "Should negative durations raise an error?",
    ],
)
def test_a_real_question_answered_with_a_detail_still_earns_the_bonus(question):
    task = TASKS[0]  # format_duration
    record = _episode_turns(task, [question], task.reference_solution)
    assert record.components["asked_before_coding"] == 1.0
    assert record.components["guessed_immediately"] == 0.0
    assert record.metrics["spec_revealed"] == 1 and record.metrics["real_questions"] == 1


def test_an_empty_question_then_a_real_one_is_asking_later():
    task = TASKS[0]
    record = _episode_turns(task, ["?", "Should negative durations raise an error?"], task.reference_solution)
    assert record.components["asked_before_coding"] == 0.6
    assert record.components["guessed_immediately"] == 0.0


def test_a_specific_question_the_spec_does_not_cover_earns_nothing():
    task = TASKS[0]
    record = _episode_turns(task, ["Should I use tabs or spaces for indentation?"], task.reference_solution)
    assert record.metrics["spec_revealed"] == 0
    assert record.components["asked_before_coding"] == 0.0
    assert record.components["guessed_immediately"] == -1.0


def test_the_state_records_which_turn_each_reveal_answered():
    task = TASKS[0]
    state = start_episode(task, env=ENV, run_id="run", step=0, group_id="g", rollout_id="r", max_turns=10)
    for question in ("?", "Should negative durations raise an error?", "ok?", "Any other requirements?"):
        state = apply_env_turn(apply_policy_turn(state, question, ENV, task), task, ENV)
    assert state.answered_turns == [1, 3]
    assert len(state.revealed) == 2


# --- without the simulator's bookkeeping ---------------------------------------------------------------------


def _recorded(task, *pairs, code):
    messages = [Message(role="user", content=task.prompt)]
    for question, reply in pairs:
        messages += [Message(role="assistant", content=question), Message(role="user", content=reply)]
    messages.append(Message(role="assistant", content=fenced(code)))
    return messages


def test_recorded_transcripts_are_judged_by_the_recorded_replies():
    task = TASKS[0]
    real = _recorded(task, ("Any requirements?", task.spec[3]), code=task.reference_solution)
    empty = _recorded(task, ("?", "What would you like to know?"), code=task.reference_solution)
    # A recorded LLM user that answered "?" with a detail anyway: the question still asked nothing.
    leaky = _recorded(task, ("?", task.spec[0]), code=task.reference_solution)
    restated = _recorded(
        task,
        ("Any requirements?", task.spec[3]),
        ("And negatives?", "As I said: " + task.spec[3]),
        code=task.reference_solution,
    )
    assert answered_turns_in(real, task.spec) == {0}
    assert answered_turns_in(empty, task.spec) == frozenset()
    assert answered_turns_in(leaky, task.spec) == frozenset()
    assert answered_turns_in(restated, task.spec) == {0}  # a restatement is not a new reveal

    rollouts = [
        Rollout(rollout_id=name, group_id="g", task_id=task.task_id, messages=messages)
        for name, messages in (("real", real), ("empty", empty), ("leaky", leaky))
    ]
    records = score_rollouts(
        rollouts,
        {task.task_id: task},
        executor=FakeExecutor(result("passed", 3, 3)),
        env=ENV,
        reward=REWARD,
        run_id="run",
    )
    asked = {r.rollout_id: r.components["asked_before_coding"] for r in records}
    guessed = {r.rollout_id: r.components["guessed_immediately"] for r in records}
    assert asked == {"real": 1.0, "empty": 0.0, "leaky": 0.0}
    assert guessed == {"real": 0.0, "empty": -1.0, "leaky": -1.0}


@pytest.mark.parametrize("question", CONTENT_FREE)
def test_bare_reward_score_falls_back_to_the_questions_own_words(question):
    task = TASKS[0]
    messages = _recorded(task, (question, "Sure."), code=task.reference_solution)
    score = REWARD.score(messages, result("passed", 3, 3))
    assert score.components["asked_before_coding"] == 0.0
    assert score.components["guessed_immediately"] == -1.0
    real = _recorded(task, ("Should negative durations raise?", "Sure."), code=task.reference_solution)
    assert REWARD.score(real, result("passed", 3, 3)).components["asked_before_coding"] == 1.0


def test_supplied_bookkeeping_wins_over_the_words():
    task = TASKS[0]
    messages = _recorded(task, ("Should negative durations raise?", "That is up to you."), code="x = 1")
    score = REWARD.score(messages, result("passed", 1, 1), state=answered(()))
    assert score.components["asked_before_coding"] == 0.0  # specific, but the simulator revealed nothing


# --- the LLM-backed simulator follows the same rule -------------------------------------------------------------


def test_llm_simulator_never_asks_the_endpoint_about_a_content_free_question(chat_server):
    from rewardpipe.openai_client import ChatClient

    task = TASKS[0]
    simulator = OpenAISimulator("unused", "unused", client=ChatClient(chat_server.url, "m", max_retries=0))
    for question in CONTENT_FREE[:8] + [f"{task.entry_point}?"]:
        state = apply_policy_turn(
            start_episode(task, env=ENV, run_id="r", step=0, group_id="g", rollout_id="r"), question, ENV, task
        )
        reply = simulator.respond(state, task)
        assert reply.revealed is None and reply.text in ASK_SOMETHING_SPECIFIC
    assert chat_server.requests == []


def test_llm_simulator_prompt_states_the_rule():
    assert '"?"' in SIMULATOR_SYSTEM_PROMPT and "asks nothing specific" in SIMULATOR_SYSTEM_PROMPT
    assert "reveal no detail" in SIMULATOR_SYSTEM_PROMPT


# --- the general class ----------------------------------------------------------------------------------------

_EMPTY_VOCABULARY = sorted((STOPWORDS | {"explain", "again", "clarify", "anything", "else", "mean", "right"}) - {""})


@settings(max_examples=200, deadline=None)
@given(
    task=st.sampled_from(TASKS),
    words=st.lists(st.sampled_from(_EMPTY_VOCABULARY), max_size=8),
    punctuation=st.sampled_from(["?", "??", " ?", "?!?", "…?", "？"]),
)
def test_any_question_made_of_stopwords_and_filler_reveals_nothing(task, words, punctuation):
    question = " ".join(words) + punctuation
    assert question_subject(question, task.prompt, task.entry_point).asks_nothing
    assert _reply(task, question).revealed is None


def test_filler_is_stemmed_like_question_words():
    assert question_subject("Could you explain it again and clarify?").asks_nothing
    assert not question_subject("Should duplicates be removed?").asks_nothing


def test_a_question_sharing_a_few_words_with_the_request_is_not_an_echo():
    task = make_task(
        prompt="Write a function `format_duration(seconds)` that formats a duration given in seconds "
        "as a human-readable string.",
        spec=["The output uses a clock-style format."],
    )
    subject = question_subject("What format do you want for the duration?", task.prompt, "format_duration")
    assert not subject.asks_nothing
    echo = question_subject("formats a duration given in seconds as a human-readable string?", task.prompt)
    assert echo.asks_nothing


def test_a_terse_recorded_reply_to_a_specific_question_still_counts():
    task = TASKS[0]
    messages = _recorded(task, ("Should negative durations raise an error?", "Yes."), code=task.reference_solution)
    assert answered_turns_in(messages, task.spec) == {0}
    empty = _recorded(task, ("Can you explain again?", "Yes."), code=task.reference_solution)
    assert answered_turns_in(empty, task.spec) == frozenset()


# --- near-variants of an empty question (independent check, issue 11 item 4) ----------------------------------

# Questions by the parser that ask nothing a simulator can answer: punctuation, zero-width characters,
# interjections, made-up or non-English words the stemmer cannot read.
NEAR_EMPTY = [
    "? ?",
    "\u200b?",
    "¿?",
    "…?",
    "hmmm?",
    "Well?",
    "uh, what??",
    "xyz?",
    "qwerty?",
    "aa?",
    "¿Qué?",
    "Что?",
    "什么？",
]
# Questions that do ask: the three ways of scoring must agree on them too.
ASKING = [
    "Any requirements?",
    "Should negative durations raise?",
    "What about empty input?",
    "What about input output types errors order format empty negative rounding case duplicates?",
]


def _asked_three_ways(task, question):
    """asked_before_coding of one question answered by the rule-based simulator, then correct code: with the
    simulator's bookkeeping (`run`), from the recorded reply and the spec (`score`), and from the transcript
    alone (bare Reward.score, no spec)."""
    reply = _reply(task, question)
    messages = _recorded(task, (question, reply.text), code=task.reference_solution)
    live = frozenset({0}) if reply.revealed is not None else frozenset()
    passed = result("passed", 3, 3)
    return (
        REWARD.score(messages, passed, state=answered(live)).components["asked_before_coding"],
        REWARD.score(messages, passed, state=answered(answered_turns_in(messages, task.spec))).components[
            "asked_before_coding"
        ],
        REWARD.score(messages, passed).components["asked_before_coding"],
    )


@pytest.mark.parametrize("question", NEAR_EMPTY)
def test_near_empty_questions_earn_nothing_on_any_path(question):
    for task in TASKS:
        assert _asked_three_ways(task, question) == (0.0, 0.0, 0.0), task.task_id


@pytest.mark.parametrize("question", ASKING)
def test_the_three_scoring_paths_agree_on_real_questions(question):
    for task in TASKS:
        live, recorded, bare = _asked_three_ways(task, question)
        assert live == recorded == bare, task.task_id


def test_the_prompt_echoed_back_in_any_wrapping_reveals_nothing():
    for task in TASKS:
        for wrapping in ("{p}?", "{p} Right?", "So: {p}?", "{p} {p}?", "Could you explain: {p}?"):
            assert _reply(task, wrapping.format(p=task.prompt)).revealed is None, (task.task_id, wrapping)
