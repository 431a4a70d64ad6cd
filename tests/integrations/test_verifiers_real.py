"""The verifiers adapter against the real verifiers package (0.2.1, the pinned ``[verifiers]`` extra).

``make test-verifiers`` installs it into its own venv and runs these; skipped when verifiers is absent.
A real ``vf.MultiTurnEnv`` plays the ask-before-coding episode against a local OpenAI-compatible endpoint
(the "model": a scripted chat server on 127.0.0.1), with rewardpipe's simulator as its ``env_response``, and
a real ``vf.Rubric`` of rewardpipe's components scores rollouts the way verifiers scores them.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest

vf = pytest.importorskip("verifiers")
pytestmark = pytest.mark.verifiers

from rewardpipe.integrations.verifiers import rubric, rubric_functions, simulator_env_response  # noqa: E402
from tests.aws.harness import chat_server as _chat_server  # noqa: E402


def chat_server(turns):
    """The harness's local /chat/completions endpoint, answering ``turns(request messages)``; returns
    (server, url, what it was sent: ``{"path", "auth", "body"}`` per request)."""
    return _chat_server(lambda body: turns(body["messages"]))


TASK = json.loads(Path("rewardpipe/data/tasks.jsonl").read_text().splitlines()[0])
QUESTION = "Are there any other requirements or edge cases I should know about?"


class AskBeforeCoding(vf.MultiTurnEnv):
    """The docs' recipe: the simulator, holding the task's hidden spec, answers every assistant turn."""

    async def env_response(self, messages, state, **kwargs):
        return simulator_env_response(messages, state["info"]["rewardpipe_task"])


def test_a_real_multi_turn_env_gets_the_simulators_answers_from_the_hidden_spec():
    def model(messages):  # asks until the user has nothing left to tell, then commits
        answered = sum(1 for m in messages if m["role"] == "user" and m["content"] in TASK["spec"])
        if answered < len(TASK["spec"]):
            return QUESTION
        return "Here it is:\n```python\n" + TASK["reference_solution"] + "\n```"

    server, url, seen = chat_server(model)
    try:
        from openai import AsyncOpenAI
        from verifiers.clients.openai_chat_completions_client import OpenAIChatCompletionsClient

        env = AskBeforeCoding(
            dataset=_dataset(), max_turns=len(TASK["spec"]) + 1, rubric=vf.Rubric(funcs=[lambda **_: 0.0])
        )
        client = OpenAIChatCompletionsClient(AsyncOpenAI(base_url=url, api_key="local"))
        state = asyncio.run(
            env.rollout(
                {
                    "prompt": [{"role": "user", "content": TASK["prompt"]}],
                    "example_id": 0,
                    "info": {"rewardpipe_task": TASK},
                },
                client,
                "scripted",
            )
        )
    finally:
        server.shutdown()
    assert state.get("error") is None, state.get("error")
    replies = [m["content"] for m in seen[-1]["body"]["messages"] if m["role"] == "user"][1:]
    assert replies == TASK["spec"]  # one hidden detail per question, in spec order, nothing else
    assert len(seen) == len(TASK["spec"]) + 1  # the model's last turn commits
    assert TASK["tests"] not in json.dumps(seen) and TASK["reference_solution"] not in "".join(replies)


def scored_by(rub, completion, answer):
    """(reward, metrics) of a real vf.SingleTurnEnv rollout whose model answers ``completion``, scored by ``rub``."""
    server, url, _ = chat_server(lambda messages: completion)
    try:
        from openai import AsyncOpenAI
        from verifiers.clients.openai_chat_completions_client import OpenAIChatCompletionsClient

        env = vf.SingleTurnEnv(dataset=_dataset(), rubric=rub)
        client = OpenAIChatCompletionsClient(AsyncOpenAI(base_url=url, api_key="local"))

        async def run():
            state = await env.rollout(
                {"prompt": [{"role": "user", "content": "5 + 7?"}], "example_id": 0, "answer": answer},
                client,
                "scripted",
            )
            await rub.score_rollout(state)
            return state

        state = asyncio.run(run())
    finally:
        server.shutdown()
    return state["reward"], state["metrics"]


def test_a_real_rubric_scores_each_component_and_weights_them_like_rewardpipe():
    rub = rubric("gsm8k")
    assert isinstance(rub, vf.Rubric) and rub.weights == [0.5, 1.0]
    reward, metrics = scored_by(rub, "5 + 7 = 12\n#### 12", "12")
    assert metrics == {"format": 1.0, "answer_correct": 1.0, "reward_error": 0.0} and reward == pytest.approx(1.5)
    reward, metrics = scored_by(rub, "It is 13", "12")
    assert metrics == {"format": 0.0, "answer_correct": 0.0, "reward_error": 0.0} and reward == 0.0
    # An unreadable reference, scored alone: every component NaN (an error, visible), never verifiers' substituted
    # 0.0, and flagged.
    reward, metrics = scored_by(rub, "#### 12", "twelve")
    assert metrics.pop("reward_error") == 1.0
    assert all(math.isnan(v) for v in metrics.values()) and math.isnan(reward)


def test_a_users_reward_by_reference_in_a_real_rubric_and_a_raising_component_is_nan_not_zero(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "fixtures" / "user_pkg"))
    rub = rubric("acme_rl.json_answer:FLAKY")
    assert rub.weights == [0.5, 1.0, 1.0]
    reward, metrics = scored_by(rub, '{"answer": 12}', "12")
    assert metrics == {"valid_json": 1.0, "answer_matches": 1.0, "explodes_on_boom": 1.0, "reward_error": 0.0}
    assert reward == pytest.approx(2.5)
    # The component raises on BOOM: verifiers would log it and substitute 0.0; here every function is NaN.
    reward, metrics = scored_by(rub, '{"answer": "BOOM"}', "12")
    assert set(metrics) == {"valid_json", "answer_matches", "explodes_on_boom", "reward_error"}
    assert metrics.pop("reward_error") == 1.0
    assert all(math.isnan(v) for v in metrics.values()) and math.isnan(reward)


def _dataset():
    from datasets import Dataset

    return Dataset.from_list(
        [{"question": TASK["prompt"], "answer": "", "info": json.dumps({"rewardpipe_task": TASK})}]
    )


def test_rubric_functions_declare_what_verifiers_passes():
    import inspect

    funcs, _ = rubric_functions("gsm8k")
    for fn in funcs:
        params = inspect.signature(fn).parameters
        assert {"completion", "answer", "prompt"} <= set(params)
        assert any(p.kind is p.VAR_KEYWORD for p in params.values())


def test_a_real_group_with_identical_rollouts_runs_each_components_code_once_per_rollout():
    """verifiers scores a group function by function (each function over every rollout, then the next): GRPO
    groups often hold identical rollouts, and each must still be scored exactly once, not once per function."""
    from rewardpipe import Reward, component

    calls = []

    @component(range=(0.0, 1.0), role="outcome")
    def counted(completion: str) -> float:
        calls.append(completion)
        return 1.0 if "12" in completion else 0.0

    @component(range=(0.0, 1.0), role="shaping", weight=0.5)
    def short(completion: str) -> float:
        return 1.0 if len(completion) < 40 else 0.0

    @component(range=(0.0, 1.0), role="shaping")
    def boom(completion: str) -> float:
        if "BOOM" in completion:
            raise ValueError("BOOM")
        return 1.0

    rub = rubric(Reward("counted", [counted, short, boom]))
    answers = ['{"answer": 12}', '{"answer": 12}', '{"answer": 12}', '{"answer": 13}', "BOOM"]
    served = iter(answers)  # the server answers each request in turn: the group's rollouts get these, in some order
    server, url, _ = chat_server(lambda messages: next(served))
    try:
        from openai import AsyncOpenAI
        from verifiers.clients.openai_chat_completions_client import OpenAIChatCompletionsClient

        env = vf.SingleTurnEnv(dataset=_dataset(), rubric=rub)
        client = OpenAIChatCompletionsClient(AsyncOpenAI(base_url=url, api_key="local"))
        group = [{"prompt": [{"role": "user", "content": "5 + 7?"}], "example_id": 0, "answer": "12"}] * len(answers)
        outputs = asyncio.run(env.run_group(group, client, "scripted", {}))
    finally:
        server.shutdown()
    assert sorted(calls) == sorted(answers)  # once per rollout, whatever the number of functions
    by_text = {}
    for out in outputs:
        mine = {k: v for k, v in out["metrics"].items() if k != "num_turns"}  # verifiers' own metric
        by_text.setdefault(out["completion"][-1]["content"], []).append((out["reward"], mine))
    assert by_text['{"answer": 12}'] == [(2.5, {"counted": 1.0, "short": 1.0, "boom": 1.0, "reward_error": 0.0})] * 3
    assert by_text['{"answer": 13}'] == [(1.5, {"counted": 0.0, "short": 1.0, "boom": 1.0, "reward_error": 0.0})]
    # The rollout whose component raised is settled from its group (round thirty): the scored rollouts' mean
    # reward, so its advantage is 0 and no advantage of the group is NaN; flagged, never a 0.
    ((reward, metrics),) = by_text["BOOM"]
    assert reward == pytest.approx(2.25) and metrics["reward_error"] == 1.0
    assert metrics["counted"] == pytest.approx(0.75) and metrics["short"] == 1.0
    assert all(math.isfinite(out["reward"]) for out in outputs)  # what a trainer takes the group's advantages from
