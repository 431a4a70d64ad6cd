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


def test_a_real_rubric_scores_each_component_and_weights_them_like_rewardpipe():
    rub = rubric("gsm8k")
    assert isinstance(rub, vf.Rubric) and rub.weights == [0.5, 1.0]

    def scored(completion, answer):
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

    reward, metrics = scored("5 + 7 = 12\n#### 12", "12")
    assert metrics == {"format": 1.0, "answer_correct": 1.0} and reward == pytest.approx(1.5)
    reward, metrics = scored("It is 13", "12")
    assert metrics == {"format": 0.0, "answer_correct": 0.0} and reward == 0.0
    # An unreadable reference: every component NaN (an error, visible), never verifiers' substituted 0.0.
    reward, metrics = scored("#### 12", "twelve")
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
