"""Round twenty, the reward and scoring side: payloads a policy's outputs can carry.

F1. A refusal for another reason that quotes the conversation *escaped* was read as a context overflow. Round
nineteen told a server's own "maximum context length" from the model's words quoted back by comparing the 24
characters either side of the phrase with what the request carried; but servers quote through an escape: a
Python repr (a pydantic ``input_value=...``, a tool-argument parser's ``{arguments!r}``), JSON inside the message,
HTML entities, ``\\uXXXX`` for non-ASCII. A model whose words put the phrase beside a newline, a quote, a tab, an
``&`` or an accented letter ("Done.\\nprompt is too long") had its own words read as the server's, and the
endpoint's failure (a ``policy_error`` record, left out) became the episode's ``context_limit`` end, scored as
the model's own. What was sent is compared in those escaped forms too.

F2. The other way round, the model's words hid a real overflow. A phrase was taken for a quote when the 24
characters on *either* side of it were a piece of what was sent, and at the start of the body the window was cut
short to the phrase alone: a conversation that once asked "What is this model's maximum context length?" made
vLLM's "This model's maximum context length is 4096 tokens. However, you requested ..." a quote, and one that said
"The prompt is too long" made Anthropic's "prompt is too long: 210000 tokens > 200000 maximum" one: the rollout
that outgrew its window became an excluded ``policy_error`` instead of the ``context_limit`` end scored as it
stands (a model losing a group could talk its way out of it). A quote now has to match what was sent on *both*
sides, each for the full 48 characters (where the server's sentence has its token counts, which the model cannot
know: with 24, "This model's maximum context length is 4096 tokens. However, you" in the conversation still hid
vLLM's) or up to where a sent text starts or ends between quotation marks (a short turn quoted whole), and a text
that is nothing but the phrase quotes nothing.

F3. Round nineteen's one-word questions (``words.QUALIFIERS``: "Always?", "Between?" name no subject) left out
prepositions and degree words that still drew a hidden detail alone on some bundled task: "Above?" was told "A for
90 and above", "Below?" "a temperature below absolute zero raises", "Least?" "at least one digit"; asking one, then
committing, scored 1.6 as asking first.

F4. A judge whose window the material overflowed was unavailable: the sample an excluded ``component_unavailable``
record. The material is cut to 20,000 characters a field, but a judge with a small window (4k tokens) overflows
on less, so a bad answer padded with junk ("the answer is 5" + 40,000 characters) was left out of its group's
baseline instead of graded low. The judge is asked again with the material cut shorter (head and tail kept).

F5. Scored without the simulator's bookkeeping (``Reward.score(messages)``, ``score_samples``: the reward Lambda,
TRL), a question counts when the recorded reply informs, and "a yes or a no answers a question that asked for one".
A request phrased as a yes/no question ("Could you restate what you need?") answered "Sure: <the request, again>"
was therefore a real question: asking the user to repeat the request, then committing, scored asked_before_coding
1.0 and escaped the guess penalty, although the reply said nothing the request had not. A yes or a no followed by
the request's own words restated is no answer. And where the conversation opened with a system message (the reward
Lambda's and TRL's samples often do), the bare path read no request at all (only a first message that was the
user's): "Sure: <the request>" was new information there even after that fix, and the request echoed back as a
question, so answered, a real question. The request is the user messages before the first assistant turn.

F6. "Not a question back with no statement in it" held only for a reply with words the question had not: the
question echoed back by the user ("Should negative durations raise an error?" to itself, "Hours or minutes?")
was an answer on the bare path (its words answer a yes/no question), revealed the detail the question spelt out
when a recording was replayed (``rewardpipe score``), and stood as that detail's reveal from an LLM-played user (a
policy can ask it to repeat the question first). A reply that only asks back, with no exact token of its own,
states nothing on all three.
"""

from __future__ import annotations

import html
import json

import httpx
import pytest

from rewardpipe.openai_client import _context_overflow

# --- F1: a quote of the conversation, escaped, is still a quote ------------------------------------------------

#: (the model's words, the refusal quoting them). Each phrase has escaped characters close by on both sides.
_LINE = "the first line of my answer is here"
_ESCAPED_QUOTES = {
    "a Python repr (newlines)": (
        f"{_LINE}.\nprompt is too long\n{_LINE}.",
        lambda words: f"Bad Request: could not parse tool arguments {words!r}".encode(),
    ),
    "a Python repr (both quotes)": (
        f"{_LINE}, it's \"the context window\" it's {_LINE}",
        lambda words: f"Bad Request: could not parse tool arguments {words!r}".encode(),
    ),
    "pydantic's input_value": (
        f"{_LINE}\ncontext window\n{_LINE}",
        lambda words: {
            "object": "error",
            "message": "1 validation error for ChatCompletionRequest\nmessages.1.tool_calls\n  Input should be a "
            f"valid list [type=list_type, input_value={words!r}, input_type=str]",
            "code": 400,
        },
    ),
    "JSON inside the message": (
        f'{_LINE}, "say "context length" now" {_LINE}',
        lambda words: {"error": {"message": "invalid message: " + json.dumps({"content": words}), "code": 400}},
    ),
    "JSON with non-ASCII escaped": (
        f"{_LINE} h\u00e9llo \u2013 context length \u2013 \u00e9 {_LINE}",
        lambda words: {"error": {"message": "invalid: " + json.dumps(words)}},
    ),
    "HTML entities": (
        f"{_LINE} <b>context length</b> & {_LINE}",
        lambda words: {"error": {"message": "invalid: " + html.escape(words, quote=False)}},
    ),
    "a tab, repr": (f"{_LINE}\tcontext length\t{_LINE}", lambda words: {"error": {"message": f"unexpected {words!r}"}}),
}


@pytest.mark.parametrize("quote", sorted(_ESCAPED_QUOTES))
def test_a_refusal_quoting_the_conversation_escaped_is_not_a_context_overflow(quote):
    words, body = _ESCAPED_QUOTES[quote]
    talk = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": words}]
    made = body(words)
    response = httpx.Response(400, content=made) if isinstance(made, bytes) else httpx.Response(400, json=made)
    assert not _context_overflow(response, talk)


def test_the_servers_own_sentence_still_counts_beside_escaped_words():
    """The escaped forms are of what was sent: a server's sentence is none of them."""
    talk = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Done.\nWhat is your context length?"}]
    real = {
        "object": "error",
        "message": "This model's maximum context length is 4096 tokens. However, you "
        "requested 5120 tokens (4096 in the messages, 1024 in the completion).",
        "code": 400,
    }
    assert _context_overflow(httpx.Response(400, json=real), talk)
    assert _context_overflow(httpx.Response(400, content=b"prompt is too long: 9000 tokens > 8192 maximum"), talk)


# --- F2: the model's words do not make the server's own sentence a quote ----------------------------------------

_OVERFLOWS = {
    "vllm": {
        "object": "error",
        "message": "This model's maximum context length is 4096 tokens. However, you requested 5120 tokens "
        "(4096 in the messages, 1024 in the completion).",
        "type": "BadRequestError",
        "code": 400,
    },
    "anthropic-style": {
        "error": {"type": "invalid_request_error", "message": "prompt is too long: 210000 tokens > 200000 maximum"}
    },
    "sglang": {
        "object": "error",
        "message": "The input (5000 tokens) is longer than the model's context length (4096 tokens).",
    },
}
_ECHOES = [
    "What is this model's maximum context length?",
    "Note: this model's maximum context length is limited.",
    "The prompt is too long",
    "prompt is too long",
    "The input is longer than the model's context length (4",
    "is longer than the model's context length",
    "context length",
]


@pytest.mark.parametrize("words", _ECHOES)
@pytest.mark.parametrize("server", sorted(_OVERFLOWS))
def test_a_real_overflow_stays_one_whatever_the_conversation_said_before(server, words):
    talk = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": words}]
    assert _context_overflow(httpx.Response(400, json=_OVERFLOWS[server]), talk)


@pytest.mark.parametrize(
    "quoted",
    [
        lambda words: f"Bad Request: could not parse tool arguments {words!r}".encode(),
        lambda words: {"error": {"message": f"unexpected '{words}' in message 2", "code": 400}},
        lambda words: {"error": {"message": f"invalid: {words}"}},
        lambda words: {"error": {"message": f"the message \u201c{words}\u201d could not be rendered"}},
    ],
)
@pytest.mark.parametrize("words", ["Done.\nprompt is too long\nBye", "ok, the context window", "x (context length) y"])
def test_a_short_turn_quoted_whole_is_still_a_quote(words, quoted):
    talk = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": words}]
    made = quoted(words)
    response = httpx.Response(400, content=made) if isinstance(made, bytes) else httpx.Response(400, json=made)
    assert not _context_overflow(response, talk)


# --- F3: the prepositions and degree words round nineteen's list left out ----------------------------------------

#: Each drew a hidden detail alone on some bundled task (round nineteen's ``words.QUALIFIERS`` named "between",
#: "within", "inside", "across"... as no subject, but not these): "Above?" then the code scored 1.6.
LEFT_OUT_QUALIFIERS = ["Above?", "Below?", "Outside?", "Past?", "Earlier?", "Less?", "Fewer?", "Least?", "Beyond?"]


def test_no_left_out_qualifier_alone_draws_a_detail_on_any_bundled_task():
    from rewardpipe.envs.ask_before_coding.questions import best_spec_match, question_subject
    from rewardpipe.envs.ask_before_coding.tasks import BUNDLED_TASKS
    from rewardpipe.models import load_tasks

    drawn = []
    for task in load_tasks(BUNDLED_TASKS):
        for question in LEFT_OUT_QUALIFIERS:
            subject = question_subject(question, task.prompt, task.entry_point)
            if not subject.asks_nothing and best_spec_match(subject.words, task.spec)[0] is not None:
                drawn.append((task.task_id, question))
    assert not drawn, f"{len(drawn)} details drawn, e.g. {drawn[:5]}"


def test_a_left_out_qualifier_then_the_code_scores_as_a_guess_in_a_live_episode():
    from rewardpipe.envs.ask_before_coding.environment import ENVIRONMENT
    from rewardpipe.envs.ask_before_coding.tasks import BUNDLED_TASKS
    from rewardpipe.episode import apply_env_turn, apply_policy_turn, start_episode
    from rewardpipe.models import load_tasks

    (grades,) = [task for task in load_tasks(BUNDLED_TASKS) if task.task_id == "abc-022-letter-grade"]
    state = start_episode(grades, env=ENVIRONMENT, run_id="r", step=0, group_id="g", rollout_id="x")
    state = apply_env_turn(apply_policy_turn(state, "Above?", ENVIRONMENT, grades), grades, ENVIRONMENT)
    assert state.revealed == [], state.messages[-1].content


@pytest.mark.parametrize(
    "question",
    ["Are scores above 100 invalid?", "Is a temperature below absolute zero an error?", "At least one digit?"],
)
def test_what_those_words_qualify_is_still_asked(question):
    from rewardpipe.envs.ask_before_coding.questions import question_subject

    assert not question_subject(question).asks_nothing


# --- F4: padding an answer past the judge's window does not make its grade an error ------------------------------


class _SmallWindowJudge:
    """A judge with a window of about 4k tokens: a longer prompt is refused as too long. It grades 1 out of 10."""

    model = "small"

    def __init__(self, window: int = 16_000) -> None:
        self.window, self.prompts = window, []

    def complete(self, messages, **params):
        import re

        from rewardpipe.openai_client import ContextLengthExceeded

        self.prompts.append(sum(len(m["content"]) for m in messages))
        if self.prompts[-1] > self.window:
            raise ContextLengthExceeded("HTTP 400: This model's maximum context length is 4096 tokens")
        tag = re.search(r"VERDICT (\w+): <a number", messages[0]["content"]).group(1)
        return f"The answer is wrong.\nVERDICT {tag}: 1"


@pytest.mark.parametrize("padding", [40_000, 200_000])
def test_an_answer_padded_past_the_judges_window_is_still_graded(padding):
    from rewardpipe import Reward, llm_judge
    from rewardpipe.models import Message

    judge = _SmallWindowJudge()
    reward = Reward("judged", [llm_judge("quality", "Grade {completion} for {prompt}", client=judge)])
    text = "the answer is 5 " + "padding " * (padding // 8) + " so the answer is 5"
    score = reward.score([Message(role="user", content="2+2?"), Message(role="assistant", content=text)])
    assert score.error is None and score.components == {"quality": 0.1}
    assert judge.prompts[-1] <= judge.window < judge.prompts[0]


def test_a_rubric_too_long_for_the_judge_is_still_unavailable_not_a_zero():
    from rewardpipe import Reward, llm_judge
    from rewardpipe.models import Message

    judge = _SmallWindowJudge(window=500)
    reward = Reward("judged", [llm_judge("quality", "Grade this. " * 100 + "{completion}", client=judge)])
    score = reward.score([Message(role="user", content="2+2?"), Message(role="assistant", content="5 " * 5_000)])
    assert score.error is not None and score.error.kind == "component_unavailable"
    assert len(judge.prompts) <= 6  # a few shorter cuts, then given up: never a loop


def test_the_servers_fixed_words_echoed_do_not_hide_a_real_overflow():
    """vLLM's sentence is fixed for 24 characters after "context length" ("is 4096 tokens. However"): a
    conversation that said so made it a quote. The count of tokens requested, which changes with every request,
    is within the compared text."""
    words = "This model's maximum context length is 4096 tokens. However, you"
    talk = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": words}]
    assert _context_overflow(httpx.Response(400, json=_OVERFLOWS["vllm"]), talk)


# --- F5: "Sure: <the request again>" answers no question -----------------------------------------------------------


def _restated(task, question: str, reply: str) -> list:
    from rewardpipe.models import Message

    commit = f"```python\n{task.reference_solution}\n```"
    return [
        Message(role="user", content=task.prompt),
        Message(role="assistant", content=question),
        Message(role="user", content=reply),
        Message(role="assistant", content=commit),
    ]


@pytest.mark.parametrize(
    ("question", "reply"),
    [
        ("Could you restate exactly what the function should do?", "Sure: {prompt}"),
        ("Can you repeat the request?", "Yes. {prompt}"),
        ("Would you say again what you need?", "Of course. As I wrote: {prompt}"),
        ("Could you restate the task, please?", "Yes, of course: {prompt} That is all."),
    ],
)
def test_a_yes_that_restates_the_request_answers_no_question(question, reply):
    from rewardpipe.envs.ask_before_coding.reward import asked_before_coding, guessed_immediately, real_questions
    from rewardpipe.envs.ask_before_coding.tasks import BUNDLED_TASKS
    from rewardpipe.models import load_tasks
    from rewardpipe.rewards.base import Transcript

    for task in load_tasks(BUNDLED_TASKS)[:8]:
        transcript = Transcript(_restated(task, question, reply.format(prompt=task.prompt)))
        assert real_questions(transcript) == [False, False], task.task_id
        assert (asked_before_coding(transcript, None), guessed_immediately(transcript, None)) == (0.0, -1.0)


@pytest.mark.parametrize(
    ("question", "reply"),
    [
        ("Should negative durations raise an error?", "Yes."),
        ("Should negative durations raise an error?", "Yes, negative durations raise ValueError."),
        ("Is 0 seconds written as 0:00?", "No."),
    ],
)
def test_a_yes_or_no_still_answers_a_question_that_asked_for_one(question, reply):
    from rewardpipe.envs.ask_before_coding.reward import real_questions
    from rewardpipe.rewards.base import Transcript
    from tests.security.test_round_four_reward_gaming import DURATION

    assert real_questions(Transcript(_restated(DURATION, question, reply)))[0]


@pytest.mark.parametrize(
    ("question", "reply"),
    [
        ("Could you restate exactly what the function should do?", "Sure: {prompt}"),
        ("{echo}?", "Sure, {prompt}"),
    ],
)
def test_a_system_message_first_does_not_hide_the_request(question, reply):
    from rewardpipe.envs.ask_before_coding.replies import reveals_in
    from rewardpipe.envs.ask_before_coding.reward import asked_before_coding, real_questions
    from rewardpipe.envs.ask_before_coding.tasks import BUNDLED_TASKS
    from rewardpipe.models import Message, load_tasks
    from rewardpipe.rewards.base import Transcript

    for task in load_tasks(BUNDLED_TASKS)[:8]:
        asked = question.format(echo=task.prompt.rstrip("."))
        messages = [
            Message(role="system", content="You are a careful programmer."),
            *_restated(task, asked, reply.format(prompt=task.prompt)),
        ]
        transcript = Transcript(messages)
        assert real_questions(transcript) == [False, False], task.task_id
        assert asked_before_coding(transcript, None) == 0.0
        assert reveals_in(messages, task.spec, task.entry_point) == []


# --- F6: the question echoed back is no answer ------------------------------------------------------------------

_ECHOES_BACK = [
    ("Should negative durations raise an error?", "Should negative durations raise an error?"),
    ("Should negative durations raise an error?", "Hmm, negative durations raise an error?"),
    ("Should the seconds always have two digits?", "The seconds always have two digits?"),
]


@pytest.mark.parametrize(("question", "echo"), _ECHOES_BACK)
def test_the_question_echoed_back_answers_nothing_on_any_path(question, echo):
    from rewardpipe.envs.ask_before_coding.replies import reveals_in, vet_llm_reply
    from rewardpipe.envs.ask_before_coding.reward import real_questions
    from rewardpipe.rewards.base import Transcript
    from tests.security.test_round_four_reward_gaming import DURATION

    messages = _restated(DURATION, question, echo)
    assert real_questions(Transcript(messages)) == [False, False]
    assert reveals_in(messages, DURATION.spec, DURATION.entry_point) == []
    vetted = vet_llm_reply(echo, question, DURATION.spec, prompt=DURATION.prompt, entry_point=DURATION.entry_point)
    assert vetted[1] is None


@pytest.mark.parametrize(
    ("question", "reply"),
    [
        ("What should a negative duration do?", "Raise ValueError?"),  # an exact token of its own: an answer
        ("Should negative durations raise an error?", "Negative durations raise an error."),
    ],
)
def test_a_terse_answer_is_still_one(question, reply):
    from rewardpipe.envs.ask_before_coding.replies import reveals_in
    from rewardpipe.envs.ask_before_coding.reward import real_questions
    from rewardpipe.rewards.base import Transcript
    from tests.security.test_round_four_reward_gaming import DURATION

    messages = _restated(DURATION, question, reply)
    assert real_questions(Transcript(messages))[0]
    assert reveals_in(messages, DURATION.spec, DURATION.entry_point) == [(0, 3)]
