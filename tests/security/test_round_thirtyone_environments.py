"""Round thirty-one on the environment protocol and the episode engine, with an environment and a reward of a
user's own, broken the way user code breaks.

E1. A scripted player calling ``sys.exit()`` ended the whole run: ``run --policy scripted`` stopped with the
player's exit status and no message, every rollout of the step lost, and so did ``doctor`` and
``rewardpipe.testing.check_environment`` (a scenario function, or ``scenarios()`` itself, is the environment's
code as much as a hook is, and a hook's ``sys.exit()`` is one rollout's error). A policy's ``sys.exit()`` is now
that rollout's ``policy_error`` naming the status; ``scenarios()`` or ``check_task()`` calling it is a
``scenario_failed`` finding of its task in doctor. A scripted player that raises, or a ``scenarios()`` that
raises while a rollout is played, now says which scenario of which task (it said only "RuntimeError: boom").

E2. A tool call whose ``id`` is not text (an endpoint, or a model whose parser takes the id from its output, gives
``"id": ["a"]`` or an object) made the rollout's next request unbuildable: "TypeError: unhashable type: 'list'",
an excluded ``policy_error`` of the model's making. Such a call is answered by no tool message (their
``tool_call_id`` is text), so it is left out of the request like any unanswered call.

E3. A component declaring a positional-only parameter beside a keyword-only one (``def f(completion, /, *,
reference)``) was accepted, then every sample it scored was ``component_raised`` ("got some positional-only
arguments passed as keyword arguments"): each input is now passed the way its parameter takes it.

E4. A hook, a scripted player, ``scenarios()``, ``check_task()`` or ``replay()`` raising what is not an Exception
(``asyncio.CancelledError``, ``GeneratorExit``, a library's own ``BaseException``) ended the run: only ``sys.exit()``
was caught. It is that rollout's error now; only ``KeyboardInterrupt`` stops the run.

E5. A record kept an environment's ``metrics()`` text, a diagnostics text and an end reason whole (20 MB a record):
a metric text is cut at ``MAX_METRIC_TEXT_CHARS``, an end reason at ``MAX_END_REASON_CHARS``, with a note.

E6. Doctor's ``not_deterministic`` named only ``ctx.seed``: an environment keeping an episode's data on ``self`` (which
every rollout shares, eight threads at once under ``--policy openai``) is now told so.

E7. A policy reply with no text because ``max_tokens`` ran out first (``finish_reason: length``) was an excluded
``policy_error``: it is the model's empty turn now, scored.

E8. A few-shot prompt's assistant messages counted as the model's turns: a prompt too long for the window before the
model's first turn was a scored ``context_limit`` (aggregate 0), the examples took the turn limit and a scripted
player started mid-script. ``opening_turns`` counts them apart.
"""

from __future__ import annotations

import asyncio
import sys

import pytest
from pydantic import Field

from rewardpipe import Environment, EpisodeState, Reward, ScriptedPolicy, TaskRow, component
from rewardpipe.models import Message
from rewardpipe.runner import NoSandbox, plan_step, run_slots


class CountTask(TaskRow):
    target: int


class CountState(EpisodeState):
    guesses: list[int] = Field(default_factory=list)
    found: bool = False


@component(range=(0, 1), role="outcome")
def found(state):
    """1 when the model said the number."""
    return 1.0 if state.found else 0.0


@component(range=(-1, 0), role="penalty", weight=0.2)
def many_guesses(state):
    """Minus the share of five guesses used."""
    return -min(len(state.guesses), 5) / 5


COUNT = Reward("count", [found, many_guesses])


def _number(text):
    try:
        return int(text.strip().split()[-1])
    except (ValueError, IndexError):
        return -1


class Count(Environment):
    """Guess a number: the user says higher or lower. Written as docs/guides/write-an-environment.md says."""

    name = "count"
    version = "1"
    task_model = CountTask
    state_model = CountState
    max_turns = 4
    reward = COUNT

    def on_policy_turn(self, state, task, text):
        guess = _number(text)
        if guess == task.target:
            return state.evolve(found=True, guesses=[*state.guesses, guess], next_action="score", end_reason="found")
        return state.evolve(guesses=[*state.guesses, guess], next_action="env")

    def respond(self, state, task, ctx):
        word = "higher" if state.guesses[-1] < task.target else "lower"
        return state.append({"role": "user", "content": word}, next_action="policy")

    def scenarios(self, task):
        return {
            "reference": ScriptedPolicy(lambda state, task: str(task.target)),
            "wrong": ScriptedPolicy(["0", "1", "2"]),
        }


TASKS = [CountTask(task_id=f"t{n}", prompt="Guess my number from 0 to 10.", target=n) for n in (3, 6, 9)]


def _run(env, policy=None, threads=1):
    slots = plan_step(TASKS, 0, len(TASKS), 2)
    policy = policy if policy is not None else env.scripted_policy(seed=0)
    return run_slots(slots, policy=policy, env=env, executor=NoSandbox(), run_id="r31", conversation_threads=threads)


def test_the_environment_as_written_runs_and_scores():
    records = _run(Count())
    assert len(records) == 6
    assert all(record.status == "scored" for record in records)


class ExitingPlayer(Count):
    """The reference player of task t6 quits (a game engine's own "quit", a script's sys.exit)."""

    def scenarios(self, task):
        def reference(state, task):
            if task.target == 6:
                sys.exit(3)
            return str(task.target)

        return {"reference": ScriptedPolicy(reference), "wrong": ScriptedPolicy(["0", "1", "2"], weight=0)}


class ExitingScenarios(Count):
    def scenarios(self, task):
        if task.target == 6:
            sys.exit(4)
        return super().scenarios(task)


@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize("env", [ExitingPlayer(), ExitingScenarios()], ids=["player", "scenarios"])
def test_a_scripted_player_calling_sys_exit_costs_its_own_rollouts(env, threads):
    records = _run(env, threads=threads)
    assert len(records) == 6
    by_task = {}
    for record in records:
        by_task.setdefault(record.task_id, []).append(record)
    assert all(record.status == "scored" for task in ("t3", "t9") for record in by_task[task])
    for record in by_task["t6"]:
        assert record.status == "error" and record.aggregate is None
        assert record.error.kind == "policy_error"
        assert "sys.exit(" in record.error.message and "t6" in record.error.message


def test_a_policy_of_ones_own_calling_sys_exit_is_a_policy_error():
    class Quitter:
        def next_turn(self, state, task):
            raise SystemExit("bye")

    records = _run(Count(), policy=Quitter())
    assert [record.error.kind for record in records] == ["policy_error"] * 6
    assert "sys.exit('bye')" in records[0].error.message


class RaisingPlayer(Count):
    def scenarios(self, task):
        def reference(state, task):
            raise RuntimeError("boom")

        return {"reference": ScriptedPolicy(reference)}


class RaisingScenarios(Count):
    def scenarios(self, task):
        raise RuntimeError("no scenarios today")


@pytest.mark.parametrize(
    ("env", "named"),
    [(RaisingPlayer(), "scenario 'reference' of task 't3'"), (RaisingScenarios(), "scenarios() of task 't3'")],
    ids=["player", "scenarios"],
)
def test_a_raising_scripted_player_names_its_scenario_and_task(env, named):
    records = _run(env)
    first = records[0]
    assert first.task_id == "t3" and first.error.kind == "policy_error"
    assert named in first.error.message and "RuntimeError" in first.error.message


def test_a_player_ending_its_script_still_ends_the_episode_not_an_error():
    records = _run(Count(), policy=ScriptedPolicy(["0"]))
    assert all(record.status == "scored" for record in records)
    assert {record.metrics["end_reason"].split(":")[0] for record in records} == {"policy_exhausted"}


@pytest.mark.parametrize("env", [ExitingPlayer(), ExitingScenarios()], ids=["player", "scenarios"])
def test_doctor_reports_a_scenario_calling_sys_exit_and_goes_on(env):
    from rewardpipe.doctor import diagnose

    diagnoses = diagnose(TASKS, env, NoSandbox())
    by_task = {diagnosis.task_id: diagnosis for diagnosis in diagnoses}
    assert set(by_task) == {"t3", "t6", "t9"}
    assert by_task["t3"].ok and by_task["t9"].ok
    findings = by_task["t6"].findings
    assert any(finding.check == "scenario_failed" and "sys.exit(" in finding.message for finding in findings)


def test_doctor_reports_check_task_calling_sys_exit():
    from rewardpipe.doctor import diagnose

    class Quits(Count):
        def check_task(self, task, runs):
            sys.exit(5)

    (diagnosis,) = diagnose(TASKS[:1], Quits(), NoSandbox())
    assert any("check_task() called sys.exit(5)" in problem for problem in diagnosis.problems)


def test_check_environment_reports_a_scripted_player_calling_sys_exit():
    from rewardpipe.testing import check_environment

    with pytest.raises(AssertionError, match=r"sys\.exit\(3\)"):
        check_environment(ExitingPlayer(), TASKS)


# -- E2: tool calls of a hostile shape -------------------------------------------------------------------


@pytest.mark.parametrize("call_id", [["a"], {"a": 1}, 5, None, 1.5])
def test_a_tool_call_whose_id_is_not_text_leaves_the_next_request_buildable(call_id):
    from rewardpipe.policies import chat_messages

    call = {"id": call_id, "type": "function", "function": {"name": "guess", "arguments": "{}"}}
    answered = {"id": "c1", "type": "function", "function": {"name": "guess", "arguments": "{}"}}
    messages = [
        Message(role="user", content="go"),
        Message(role="assistant", content="", tool_calls=[call, answered]),
        Message(role="tool", content="ok", tool_call_id=str(call_id)),
        Message(role="tool", content="ok", tool_call_id="c1"),
    ]
    sent = chat_messages(messages)
    assert sent[1]["tool_calls"] == [answered]
    assert [message["role"] for message in sent] == ["user", "assistant", "user", "tool"]


def test_a_tool_call_with_a_list_id_from_the_endpoint_is_no_policy_error():
    import json

    import httpx

    from rewardpipe.openai_client import ChatClient
    from rewardpipe.policies import OpenAIPolicy

    reply = {
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": "0",
                    "tool_calls": [{"id": ["x"], "type": "function", "function": {"name": "g", "arguments": "{}"}}],
                }
            }
        ]
    }

    def handler(request):
        return httpx.Response(200, json=reply)

    client = ChatClient("http://policy.invalid/v1", "m", transport=httpx.MockTransport(handler), max_retries=0)
    tools = [{"type": "function", "function": {"name": "g", "parameters": {"type": "object"}}}]
    policy = OpenAIPolicy("http://policy.invalid/v1", "m", client=client, tools=tools)
    records = _run(Count(), policy=policy)
    assert [record.status for record in records] == ["scored"] * 6, [record.error for record in records]
    assert {record.metrics["end_reason"] for record in records} == {"turn_limit"}
    assert json.dumps(reply)  # the reply itself is plain JSON: only its call's id is of the wrong type


# -- E3: parameters the engine must satisfy ----------------------------------------------------------------


def test_a_component_with_positional_only_and_keyword_only_inputs_is_called_as_declared():
    from rewardpipe.testing import score

    @component(range=(0, 1), role="outcome")
    def matches(completion, /, *, reference):
        return 1.0 if completion == reference else 0.0

    reward = Reward("posonly", [matches])
    assert score(reward, completion="7", reference="7").components == {"matches": 1.0}
    assert score(reward, completion="7", reference="8").components == {"matches": 0.0}
    assert matches("7", reference="7") == 1.0  # still callable as the function it is


def test_diagnostics_with_positional_only_and_keyword_only_inputs_are_called_as_declared():
    from rewardpipe.testing import score

    def diagnostics(completion, /, *, reference):
        return {"same": completion == reference}

    reward = Reward("posonly_diag", [found], diagnostics=diagnostics)
    result = score(reward, completion="7", reference="7", state=CountState(found=True))
    assert result.metrics == {"same": True}


# -- E4: a hook or a player raising what is not an Exception ------------------------------------------------


class Stopped(BaseException):
    """What a library's own control flow raises past ``except Exception`` (trio's Cancelled, gevent's Timeout)."""


def _raising_on_t6(hook, exc):
    """A Count whose ``hook`` raises ``exc`` on task t6 (the hooks that take the task)."""

    def broken(self, *args):
        task = args[0] if hook == "start" else args[1]
        if task.task_id == "t6":
            raise exc
        return getattr(Count, hook)(self, *args)

    return type(f"Broken_{hook}", (Count,), {hook: broken})()


BASE_EXCEPTIONS = [asyncio.CancelledError("cancelled"), Stopped("stop"), GeneratorExit()]


@pytest.mark.parametrize("exc", BASE_EXCEPTIONS, ids=lambda exc: type(exc).__name__)
@pytest.mark.parametrize("hook", ["start", "on_policy_turn", "respond", "metrics"])
def test_a_hook_raising_a_base_exception_costs_its_own_rollouts(hook, exc):
    records = _run(_raising_on_t6(hook, exc), policy=ScriptedPolicy(["0", "1"]))
    assert len(records) == 6
    for record in records:
        if record.task_id != "t6":
            assert record.status == "scored"
        elif hook == "metrics":  # evidence only: the score stands, the failure is said
            assert record.status == "scored"
            assert f"{type(exc).__name__}" in record.metrics["env_metrics_error"]
        else:
            assert record.status == "error" and record.error.kind == "simulator_error"
            assert f"{hook}() raised {type(exc).__name__}" in record.error.message


@pytest.mark.parametrize("exc", BASE_EXCEPTIONS, ids=lambda exc: type(exc).__name__)
def test_a_player_raising_a_base_exception_costs_its_own_rollouts(exc):
    class Player(Count):
        def scenarios(self, task):
            def reference(state, task):
                if task.task_id == "t6":
                    raise exc
                return str(task.target)

            return {"reference": ScriptedPolicy(reference)}

    records = _run(Player(), threads=4)
    assert [record.status for record in records] == ["scored", "scored", "error", "error", "scored", "scored"]
    assert f"scenario 'reference' of task 't6' raised {type(exc).__name__}" in records[2].error.message


def test_doctor_reports_scenarios_raising_a_base_exception():
    from rewardpipe.doctor import diagnose

    class Cancelled(Count):
        def scenarios(self, task):
            raise asyncio.CancelledError("no scenarios")

    (diagnosis,) = diagnose(TASKS[:1], Cancelled(), NoSandbox())
    assert any("scenarios()" in problem and "CancelledError" in problem for problem in diagnosis.problems)


def recordings():
    """Each task's episode as a recording: the prompt, then the right guess."""
    from rewardpipe.models import Rollout

    return [
        Rollout(
            rollout_id=f"{task.task_id}-k0",
            group_id=task.task_id,
            task_id=task.task_id,
            messages=[
                Message(role="user", content="Guess my number from 0 to 10."),
                Message(role="assistant", content=str(task.target)),
            ],
        )
        for task in TASKS
    ]


def test_score_reports_a_replay_raising_a_base_exception_on_its_own_line():
    from rewardpipe.runner import score_rollouts

    class Replays(Count):
        def replay(self, task, messages):
            if task.task_id == "t6":
                raise asyncio.CancelledError("gone")
            return super().replay(task, messages)

    records = score_rollouts(
        recordings(), {t.task_id: t for t in TASKS}, executor=NoSandbox(), env=Replays(), run_id="r"
    )
    assert [record.status for record in records] == ["scored", "error", "scored"]
    assert "replay() raised CancelledError" in records[1].error.message


# -- E5: texts a record carries are bounded, as observations are -----------------------------------------------


def test_a_huge_metric_text_of_the_environment_is_cut_in_the_record():
    from rewardpipe.models import MAX_METRIC_TEXT_CHARS

    class Dumps(Count):
        def metrics(self, state, task):
            return {"dump": "x" * 5_000_000, "short": "kept", "n" * 100_000: 1}

    records = _run(Dumps())
    for record in records:
        assert record.status == "scored"
        dump = record.metrics["dump"]
        assert len(dump) <= MAX_METRIC_TEXT_CHARS
        assert dump.startswith("x" * 100) and "5,000,000 characters" in dump
        assert record.metrics["short"] == "kept"
        assert "n" * 201 not in record.metrics and "100,000 characters" in record.metrics["env_metrics_error"]


def test_a_huge_diagnostics_text_is_cut_in_the_score():
    from rewardpipe.models import MAX_METRIC_TEXT_CHARS
    from rewardpipe.testing import score

    reward = Reward("diag", [found], diagnostics=lambda completion: {"answer": completion})
    result = score(reward, completion="9" * 1_000_000, state=CountState(found=True))
    assert len(result.metrics["answer"]) <= MAX_METRIC_TEXT_CHARS
    assert result.metrics["answer"].endswith("[cut: 1,000,000 characters]")


@pytest.mark.parametrize("where", ["on_policy_turn", "start_error"])
def test_a_huge_end_reason_is_cut_in_the_record_and_the_transcript(where):
    from rewardpipe.episode import MAX_END_REASON_CHARS

    class Rambles(Count):
        def on_policy_turn(self, state, task, text):
            new = super().on_policy_turn(state, task, text)
            if where == "start_error" and new.next_action == "env":
                return new.evolve(end_reason="z" * 2_000_000)  # then respond() fails: an error record keeps it
            return new.evolve(end_reason="z" * 2_000_000) if new.next_action == "score" else new

        def respond(self, state, task, ctx):
            raise RuntimeError("down")

    transcripts = []
    slots = plan_step(TASKS, 0, len(TASKS), 1)
    records = run_slots(
        slots,
        policy=Rambles().scripted_policy(),
        env=Rambles(),
        executor=NoSandbox(),
        run_id="r31",
        on_transcript=transcripts.append,
    )
    reasons = [record.metrics["end_reason"] for record in records if record.metrics["end_reason"] is not None]
    reasons += [transcript.end_reason for transcript in transcripts if transcript.end_reason is not None]
    assert reasons and any("2,000,000 characters" in reason for reason in reasons)
    assert all(len(reason) <= MAX_END_REASON_CHARS for reason in reasons)


# -- E6: an environment keeping an episode's data on itself -------------------------------------------------------


def test_doctor_names_state_kept_on_the_environment_as_a_cause_of_two_plays_differing():
    from rewardpipe.doctor import diagnose

    class Remembers(Count):
        """Counts its answers on self: shared by every rollout (and every thread of run --policy openai)."""

        answers = 0

        def respond(self, state, task, ctx):
            type(self).answers += 1
            return state.append({"role": "user", "content": f"answer {self.answers}"}, next_action="policy")

        def scenarios(self, task):
            def reference(state, task):
                return "0" if not state.guesses else str(task.target)

            return {"reference": ScriptedPolicy(reference), "wrong": ScriptedPolicy(["0", "1", "2"])}

    (diagnosis,) = diagnose(TASKS[:1], Remembers(), NoSandbox())
    (finding,) = [finding for finding in diagnosis.findings if finding.check == "not_deterministic"]
    assert "ctx.seed" in finding.message and "not on the environment" in finding.message


# -- E7: a model that writes nothing visible before max_tokens ------------------------------------------------------


def _endpoint_policy(reply, tools=None):
    import httpx

    from rewardpipe.openai_client import ChatClient
    from rewardpipe.policies import OpenAIPolicy

    def handler(request):
        return httpx.Response(200, json=reply)

    client = ChatClient("http://policy.invalid/v1", "m", transport=httpx.MockTransport(handler), max_retries=0)
    return OpenAIPolicy("http://policy.invalid/v1", "m", client=client, tools=tools)


THOUGHT_TOO_LONG = {
    "choices": [
        {
            "message": {"role": "assistant", "content": None, "reasoning_content": "Let me think. " * 50},
            "finish_reason": "length",
        }
    ]
}


@pytest.mark.parametrize("tools", [None, [{"type": "function", "function": {"name": "g", "parameters": {}}}]])
def test_a_model_cut_by_max_tokens_before_any_text_is_scored_not_excluded(tools):
    records = _run(Count(), policy=_endpoint_policy(THOUGHT_TOO_LONG, tools))
    assert [record.status for record in records] == ["scored"] * 6, [record.error for record in records]
    assert {record.components["found"] for record in records} == {0.0}


def test_an_endpoint_giving_no_text_for_another_reason_is_still_a_policy_error():
    reply = {"choices": [{"message": {"role": "assistant", "content": None}, "finish_reason": "stop"}]}
    records = _run(Count(), policy=_endpoint_policy(reply))
    assert {record.error.kind for record in records} == {"policy_error"}


def test_a_simulator_cut_by_max_tokens_is_still_the_environments_error():
    import httpx

    from rewardpipe.episode import EnvServices
    from rewardpipe.openai_client import ChatClient

    class AsksAnLLM(Count):
        calls_llm = True

        def respond(self, state, task, ctx):
            hint = ctx.chat([{"role": "user", "content": "hint?"}])
            return state.append({"role": "user", "content": hint}, next_action="policy")

    client = ChatClient(
        "http://sim.invalid/v1",
        "m",
        transport=httpx.MockTransport(lambda request: httpx.Response(200, json=THOUGHT_TOO_LONG)),
        max_retries=0,
    )
    slots = plan_step(TASKS, 0, 1, 1)
    (record,) = run_slots(
        slots,
        policy=ScriptedPolicy(["0"]),
        env=AsksAnLLM(),
        executor=NoSandbox(),
        run_id="r31",
        services=EnvServices(chat=client.complete),
    )
    assert record.error.kind == "simulator_error"


# -- E8: a task's prompt holding assistant messages (a few-shot prompt) ---------------------------------------------

FEW_SHOT = [
    {"role": "user", "content": "Guess my number from 0 to 10 (an example)."},
    {"role": "assistant", "content": "5"},
    {"role": "user", "content": "lower"},
    {"role": "assistant", "content": "2"},
    {"role": "user", "content": "Now a new number from 0 to 10: guess it."},
]
FEW_SHOT_TASK = CountTask(task_id="fewshot", prompt=FEW_SHOT, target=7)


def _run_few_shot(policy, env=None):
    return run_slots(
        plan_step([FEW_SHOT_TASK], 0, 1, 1), policy=policy, env=env or Count(), executor=NoSandbox(), run_id="r31"
    )


def test_a_few_shot_prompt_that_does_not_fit_is_a_policy_error_not_a_score():
    from rewardpipe.environment import ContextLimitReached

    class TooLong:
        def next_turn(self, state, task):
            raise ContextLimitReached("the prompt does not fit")

    (record,) = _run_few_shot(TooLong())
    assert record.status == "error" and record.error.kind == "policy_error" and record.aggregate is None


def test_a_few_shot_prompt_refused_by_a_content_filter_is_a_policy_error_not_a_score():
    from rewardpipe.openai_client import ContentFiltered

    class Filtered:
        def next_turn(self, state, task):
            raise ContentFiltered("HTTP 400: content_filter", on_prompt=True)

    (record,) = _run_few_shot(Filtered())
    assert record.status == "error" and record.error.kind == "policy_error"


def test_the_examples_of_a_few_shot_prompt_are_not_the_models_turns():
    (record,) = _run_few_shot(ScriptedPolicy(["1", "3", "7"]))
    # the script is played from its first turn, and the turn limit (4) counts the model's turns only
    assert record.status == "scored" and record.metrics["end_reason"] == "found"
    assert record.components["many_guesses"] == pytest.approx(-3 / 5)
    (limited,) = _run_few_shot(ScriptedPolicy(["1", "3", "4", "5", "6"]))
    assert limited.metrics["end_reason"] == "turn_limit"
    assert limited.components["many_guesses"] == pytest.approx(-4 / 5)


def test_a_recording_of_a_few_shot_episode_replays_the_models_turns():
    from rewardpipe.models import Rollout
    from rewardpipe.policies import ReplayPolicy

    recorded = Rollout(
        rollout_id="s0-g000-fewshot-k0",
        group_id="s0-g000-fewshot",
        task_id="fewshot",
        messages=[
            *FEW_SHOT,
            {"role": "assistant", "content": "3"},
            {"role": "user", "content": "higher"},
            {"role": "assistant", "content": "7"},
        ],
    )
    (record,) = _run_few_shot(ReplayPolicy([recorded]))
    assert record.metrics["end_reason"] == "found"
    assert record.components["many_guesses"] == pytest.approx(-2 / 5)


def test_opening_turns_is_the_platforms():
    class Forgets(Count):
        def respond(self, state, task, ctx):
            return super().respond(state, task, ctx).evolve(opening_turns=0)

    (record,) = _run_few_shot(ScriptedPolicy(["1", "7"]), env=Forgets())
    assert record.error.kind == "simulator_error" and "opening_turns" in record.error.message
    # a state stored before the field existed reads as an opening without assistant messages
    assert CountState.model_validate_json('{"messages": []}').opening_turns == 0


def test_a_component_returning_an_integer_no_float_holds_is_named_as_such():
    from rewardpipe.testing import score

    @component(range=(0, 1), role="outcome")
    def counts(completion):
        return 10**400

    result = score(Reward("huge", [counts]), completion="x")
    assert result.error.kind == "component_raised" and result.aggregate is None
    assert "too large for a float" in result.error.message and "not a number" not in result.error.message


# -- E9: the messages one hook call adds are bounded, as each message's characters are ---------------------------


class Floods(Count):
    """Each respond() appends ``copies`` user messages of 1,000 characters (each within max_observation_chars)."""

    copies = 20_000

    def respond(self, state, task, ctx):
        state = super().respond(state, task, ctx)
        return state.append(*[{"role": "user", "content": "y" * 1_000}] * self.copies)


def _watching_policy(seen):
    """The wrong guesses of Count's ``wrong`` scenario, noting how many messages each turn was shown."""

    def play(state, task):
        seen.append(len(state.messages))
        return ["0", "1", "2", "4"][state.assistant_turns]

    return ScriptedPolicy(play)


def test_a_hook_appending_thousands_of_messages_keeps_max_observation_messages_of_them():
    from rewardpipe.environment import MAX_OBSERVATION_MESSAGES
    from rewardpipe.episode import OBSERVATIONS_DROPPED

    env = Floods()
    assert env.max_observation_messages == MAX_OBSERVATION_MESSAGES == 100
    seen: list[int] = []
    records = _run(env, _watching_policy(seen), threads=1)
    assert records and all(record.status == "scored" for record in records)
    # the prompt, then each turn: the guess and the 100 messages respond() may add (its own word among them)
    assert max(seen) <= 1 + 3 * (1 + MAX_OBSERVATION_MESSAGES)
    for record in records:  # four wrong guesses, three replies of 20,001 messages each
        assert record.metrics["env_observations_dropped"] == 3 * (20_001 - MAX_OBSERVATION_MESSAGES)
        assert "env_observations_cut" not in record.metrics
    assert OBSERVATIONS_DROPPED == "[rewardpipe dropped the "


def test_the_note_says_how_many_were_dropped_and_the_cut_count_still_holds():
    from rewardpipe.episode import apply_env_turn, observations_cut, start_episode

    class Small(Floods):
        copies = 5
        max_observation_messages = 3
        max_observation_chars = 500

    env = Small()
    task = TASKS[0]
    state = start_episode(task, env=env, run_id="r", step=0, group_id="g", rollout_id="x")
    state = state.append({"role": "assistant", "content": "0"}).evolve(guesses=[0], next_action="env")
    after = apply_env_turn(state, task, env)
    added = after.messages[len(state.messages) :]
    assert [m.content[:6] for m in added] == ["higher", "y" * 6, "y" * 6]
    assert added[-1].content.endswith(
        "\n[rewardpipe dropped the 3 messages respond() added past this one; max_observation_messages is 3]"
    )
    assert after.observations_dropped == 3
    assert observations_cut(after, 500) == 2  # the two kept 1,000-character messages, the last with both notes


def test_observations_dropped_is_the_platforms():
    class Forges(Count):
        def respond(self, state, task, ctx):
            return super().respond(state, task, ctx).evolve(observations_dropped=5)

    class Resets(Floods):
        copies = 200

        def on_policy_turn(self, state, task, text):
            return super().on_policy_turn(state, task, text).evolve(observations_dropped=0)

    for env in (Forges(), Resets()):
        records = _run(env, _watching_policy([]))
        failed = [r for r in records if r.status == "error"]
        assert failed and all(r.error.kind == "simulator_error" for r in failed)
        assert all("observations_dropped" in r.error.message for r in failed)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "100"])
def test_a_bad_max_observation_messages_is_named(bad):
    from rewardpipe.environment import check_environment

    class Bad(Count):
        max_observation_messages = bad

    with pytest.raises(ValueError, match="max_observation_messages must be an integer of 1 or more"):
        check_environment(Bad())
