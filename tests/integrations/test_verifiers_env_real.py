"""``from_verifiers`` against the real verifiers package (0.2.1, the pinned ``[verifiers]`` extra; ``make
test-verifiers`` runs it in .venv-verifiers): a small classic multi-turn verifiers environment defined here
(guess a number; ``env_response`` says higher or lower, a ``@vf.stop`` condition ends a solved game, a
``vf.Rubric`` scores it) runs inside rewardpipe's loop: the episode driver, doctor's checks, the CLI's ``run``
and TRL's ``rollout_func``. Skipped when verifiers is absent."""

from __future__ import annotations

import json
import re
import threading

import pytest

pytest.importorskip("verifiers")
try:  # verifiers 0.3.1 keeps the classic API under verifiers.legacy; 0.2 has it at the top
    import verifiers.legacy as vf
except ImportError:
    import verifiers as vf
pytestmark = pytest.mark.verifiers

from datasets import Dataset  # noqa: E402

from rewardpipe import ScriptedPolicy  # noqa: E402
from rewardpipe.episode import converse, finish_episode, start_episode  # noqa: E402
from rewardpipe.integrations.trl_episodes import EpisodeRollout  # noqa: E402
from rewardpipe.integrations.verifiers import VerifiersEnvironment, from_verifiers  # noqa: E402
from rewardpipe.integrations.verifiers_env import VerifiersError  # noqa: E402
from tests.api.conftest import CharCodec  # noqa: E402 - TRL's token side for tests: a token is a character

SECRETS = [5, 2, 7]
NUMBER = re.compile(r"\d+")


class GuessEnv(vf.MultiTurnEnv):
    """Guess the secret (1..8): the environment answers higher/lower and counts the attempts in its state."""

    async def setup_state(self, state, **kwargs):
        state["attempts"] = 0
        state["hints"] = []
        return state

    async def env_response(self, messages, state, **kwargs):
        text = messages[-1].content if hasattr(messages[-1], "content") else messages[-1]["content"]
        found = NUMBER.search(text or "")
        state["attempts"] += 1
        if found is None:
            reply = "Answer with a number."
        else:
            guess, secret = int(found.group()), int(state["answer"])
            reply = "correct" if guess == secret else ("higher" if guess < secret else "lower")
            state["solved"] = guess == secret
        state["hints"].append(reply)
        return [{"role": "user", "content": reply}]

    @vf.stop
    async def solved(self, state, **kwargs) -> bool:
        return bool(state.get("solved"))


def said_the_answer(completion, answer, **kwargs) -> float:
    numbers = [
        NUMBER.findall(m.content if hasattr(m, "content") else m["content"])
        for m in completion
        if (m.role if hasattr(m, "role") else m["role"]) == "assistant"
    ]
    return 1.0 if numbers and numbers[-1] and numbers[-1][-1] == answer else 0.0


async def efficiency(state) -> float:
    return max(0.0, 1.0 - state["attempts"] / 8)


def fragile(completion) -> float:
    if any("BOOM" in (m.content if hasattr(m, "content") else m["content"]) for m in completion):
        raise RuntimeError("cannot read BOOM")
    return 1.0


def dataset():
    return Dataset.from_list([{"question": "Guess my number from 1 to 8.", "answer": str(s)} for s in SECRETS])


def load_guess(max_turns: int = 6, with_fragile: bool = False):
    funcs, weights = [said_the_answer, efficiency], [1.0, 0.5]
    if with_fragile:
        funcs, weights = [*funcs, fragile], [*weights, 0.1]
    return GuessEnv(dataset=dataset(), rubric=vf.Rubric(funcs=funcs, weights=weights), max_turns=max_turns)


class LiveStateEnv(GuessEnv):
    async def setup_state(self, state, **kwargs):
        state["attempts"] = 0
        state["lock"] = threading.Lock()  # a live object: cannot be paused between steps
        return state


RANGES = {"said_the_answer": (0, 1), "efficiency": (0, 1)}


def binary_search(state, task):
    lo, hi = 1, 8
    hints = state.vf_state.get("hints", [])
    guesses = [int(NUMBER.search(m.content).group()) for m in state.messages if m.role == "assistant"]
    for guess, hint in zip(guesses, hints, strict=False):
        lo, hi = (guess + 1, hi) if hint == "higher" else (lo, guess - 1) if hint == "lower" else (lo, hi)
    return f"My guess: {(lo + hi) // 2}"


def scenarios(task):
    return {
        "reference": ScriptedPolicy(binary_search),
        "always_one": ScriptedPolicy(lambda s, t: "1"),
        "mumbles": ScriptedPolicy(lambda s, t: "hmm"),
    }


def wrapped(**kwargs):
    kwargs.setdefault("ranges", RANGES)
    kwargs.setdefault("scenarios", scenarios)
    return from_verifiers(f"{__name__}:load_guess", **kwargs)


def play(env, task, policy, rollout="r0"):
    """(record, final state) of one episode through the platform's own episode driver."""
    state = start_episode(task, env=env, run_id="vf", step=0, group_id="g", rollout_id=rollout)
    state = converse(state, task, policy, env)
    return finish_episode(state, task, None, env.reward, env), state


def rollout_play(env, answer: str, turns: int = 4):
    """TRL's rollout_func on every task, twice each, the model always answering ``answer``."""
    rollout = EpisodeRollout(env.task_rows(), env=env, max_turns=turns)
    prompts = [row["prompt"] for row in rollout.dataset_rows() for _ in range(2)]
    generate = lambda contexts, max_new_tokens: [[ord(c) for c in answer] + [0] for _ in contexts]  # noqa: E731
    return rollout.play(prompts, CharCodec(), generate, max_completion_tokens=200, group_size=2)


def test_a_classic_multi_turn_env_plays_inside_rewardpipes_loop_and_its_rubric_scores_it():
    env = wrapped(env_args={"max_turns": 6})
    assert isinstance(env, VerifiersEnvironment) and env.max_turns == 6
    assert [(c.name, c.weight, c.value_range, c.role) for c in env.reward.components] == [
        ("said_the_answer", 1.0, (0.0, 1.0), "outcome"),
        ("efficiency", 0.5, (0.0, 1.0), "shaping"),
    ]
    tasks = env.task_rows()
    assert [t.answer for t in tasks] == ["5", "2", "7"] and tasks[0].prompt_messages()[-1].content.startswith("Guess")

    record, state = play(env, tasks[0], ScriptedPolicy(binary_search))
    assert record.status == "scored", record.error
    assert state.end_reason == "solved"  # the env's own @vf.stop condition ended it, not the turn limit
    assert state.vf_state["hints"] == ["higher", "lower", "correct"] and state.vf_state["attempts"] == 3  # 4, 6, 5
    assert [m.content for m in state.messages if m.role == "user"][1:] == ["higher", "lower", "correct"]
    efficiency = pytest.approx(1 - state.vf_state["attempts"] / 8)
    assert record.components == {"said_the_answer": 1.0, "efficiency": efficiency}
    json.loads(state.model_dump_json())  # the whole state, verifiers' part included, is JSON

    record, state = play(env, tasks[0], ScriptedPolicy(lambda s, t: "1"))
    assert record.status == "scored" and record.components["said_the_answer"] == 0.0
    assert state.end_reason == "turn_limit" and state.vf_state["hints"] == ["higher"] * 5


def test_a_single_turn_env_is_one_model_turn_then_scored():
    env = from_verifiers(
        vf.SingleTurnEnv(dataset=dataset(), rubric=vf.Rubric(funcs=[said_the_answer])),
        ranges={"said_the_answer": (0, 1)},
    )
    assert env.max_turns == 1
    task = env.task_rows()[2]
    record, state = play(env, task, ScriptedPolicy(lambda s, t: "It is 7."))
    assert state.assistant_turns == 1 and state.end_reason == "turn_limit"
    assert record.status == "scored" and record.components == {"said_the_answer": 1.0}


def test_the_rubric_is_called_with_verifiers_keyword_names_and_scores_what_verifiers_scores():
    env = wrapped()
    task = env.task_rows()[1]
    record, state = play(env, task, ScriptedPolicy(binary_search))
    # The same episode scored by verifiers' own Rubric: the same per-function values.
    rubric = env.vf_env.rubric
    vf_state = env.vf_state(state, task)
    import asyncio

    asyncio.run(rubric.score_rollout(vf_state))
    assert {k: v for k, v in vf_state["metrics"].items() if k in record.components} == record.components


def test_an_exception_in_a_rubric_function_is_an_error_record_not_verifiers_zero():
    env = wrapped(env_args={"with_fragile": True}, ranges={**RANGES, "fragile": (0, 1)})
    task = env.task_rows()[0]
    record = play(env, task, ScriptedPolicy(lambda s, t: "BOOM 3"))[0]
    assert record.status == "error" and record.error.kind == "component_raised"
    assert "fragile" in record.error.message and "cannot read BOOM" in record.error.message
    assert record.components["fragile"] is None and record.aggregate is None
    fine = play(env, task, ScriptedPolicy(binary_search), "r1")[0]
    assert fine.status == "scored" and fine.components["fragile"] == 1.0


def test_a_live_object_in_the_verifiers_state_is_a_clear_error():
    env = from_verifiers(
        LiveStateEnv(dataset=dataset(), rubric=vf.Rubric(funcs=[said_the_answer])), ranges={"said_the_answer": (0, 1)}
    )
    task = env.task_rows()[0]
    with pytest.raises(VerifiersError, match=r"after setup_state, its state\['lock'\] holds a lock"):
        env.start(task)
    # In the loop every rollout is an error record (the environment's failure), never a score.
    episodes = rollout_play(env, "1")
    assert {(e.record.status, e.record.error.kind) for e in episodes} == {("error", "simulator_error")}
    assert all("lock" in e.record.error.message for e in episodes)


def test_doctor_checks_the_wrapped_env_and_warns_about_an_undeclared_range():
    from rewardpipe.testing import check_environment

    env = wrapped(ranges={"said_the_answer": (0, 1)})
    report = check_environment(env, env.task_rows())
    warnings = report.warnings
    assert any("efficiency" in w and "no declared range" in w and "observed" in w for w in warnings), warnings
    assert not any("said_the_answer" in w and "declared range" in w for w in warnings)


def test_the_cli_runs_the_wrapped_env(tmp_path, monkeypatch):
    import sys
    import types

    from typer.testing import CliRunner

    from rewardpipe.cli import app

    module = types.ModuleType("vf_wrapped_for_cli")
    module.ENVIRONMENT = wrapped()
    monkeypatch.setitem(sys.modules, "vf_wrapped_for_cli", module)
    tasks = module.ENVIRONMENT.write_tasks(tmp_path / "tasks.jsonl")
    out = CliRunner().invoke(
        app,
        [
            "run",
            "--env",
            "vf_wrapped_for_cli:ENVIRONMENT",
            "--tasks",
            str(tasks),
            "--policy",
            "scripted",
            "--group-size",
            "4",
            "--steps",
            "1",
            "--out",
            str(tmp_path / "store"),
            "--run-id",
            "vf",
        ],
        catch_exceptions=False,
    )
    assert out.exit_code == 0, out.output
    records = [
        json.loads(p.read_text())
        for p in (tmp_path / "store" / "runs" / "vf").rglob("*.json")
        if json.loads(p.read_text()).get("schema") == "rewardpipe.record/v1"
    ]
    assert len(records) >= 12 and all(r["status"] == "scored" for r in records)
    assert {r["task_id"] for r in records} == {"vf-0", "vf-1", "vf-2"}
    assert {r["components"]["said_the_answer"] for r in records} == {0.0, 1.0}  # the scenarios differ


def test_trl_rollout_func_plays_the_wrapped_env():
    episodes = rollout_play(wrapped(), "4")
    assert len(episodes) == 6 and all(e.record.status == "scored" for e in episodes)
    hints = {e.task.answer: e.state.vf_state["hints"] for e in episodes}
    assert hints == {"5": ["higher"] * 3, "2": ["lower"] * 3, "7": ["higher"] * 3}
    assert all(e.state.end_reason == "turn_limit" for e in episodes)
    solved = rollout_play(wrapped(), "5")
    assert {e.task.answer: e.record.components["said_the_answer"] for e in solved} == {"5": 1.0, "2": 0.0, "7": 0.0}


def test_environments_that_run_model_code_are_refused():
    def python(code: str) -> str:
        """Run Python."""
        return str(eval(code))

    tool_env = vf.ToolEnv(dataset=dataset(), tools=[python], rubric=vf.Rubric(funcs=[said_the_answer]))
    with pytest.raises(VerifiersError, match="run model-written code"):
        from_verifiers(tool_env)


def test_a_group_reward_function_and_unknown_range_names_are_refused():
    def diversity(completions, **kwargs) -> list[float]:
        return [1.0] * len(completions)

    env = GuessEnv(dataset=dataset(), rubric=vf.Rubric(funcs=[said_the_answer, diversity]))
    with pytest.raises(VerifiersError, match=r"diversity.*whole group"):
        from_verifiers(env)
    with pytest.raises(VerifiersError, match="unknown rubric function"):
        from_verifiers(load_guess(), ranges={"said_the_answr": (0, 1)})
    with pytest.raises(VerifiersError, match="not a reference"):
        from_verifiers("no_colon_here")
