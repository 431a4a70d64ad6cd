"""Round thirty-three, part 3: the verifiers adapter against the real package (``make test-verifiers``).

Each test failed before its fix (see docs/changelog.md, round thirty-three); skipped where verifiers is absent."""

from __future__ import annotations

import asyncio
import math

import pytest

vf = pytest.importorskip("verifiers")
pytestmark = pytest.mark.verifiers

from rewardpipe.integrations.verifiers import REWARD_ERROR, rubric  # noqa: E402


def _state(completion: str, answer: str):  # type: ignore[no-untyped-def]
    return vf.State(
        prompt=[{"role": "user", "content": "5 + 7?"}],
        completion=[{"role": "assistant", "content": completion}],
        answer=answer,
        info={},
        trajectory=[],
    )


class TestARolloutScoredAloneThatFailsIsAnErroredRollout:
    """``score_rollout`` (verifiers' independent scoring: no group to settle from) left an unscorable sample's reward
    NaN with nothing but a ``reward_error`` metric: verifiers took it as a finished rollout, so vf-eval's average
    reward of the whole run was NaN and a trainer's group advantages NaN, with no error reported. The rollout now
    carries verifiers' own failure mark, ``state["error"]`` (a ``vf.Error``), which vf-eval counts and prints and
    a trainer that drops errored rollouts drops; its reward stays NaN (never a 0 that would be learned from)."""

    def test_its_state_says_it_failed(self):
        rub = rubric("gsm8k")
        state = _state("#### 12", "twelve")  # an unreadable reference: no component can be computed
        asyncio.run(rub.score_rollout(state))
        assert state["metrics"][REWARD_ERROR] == 1.0 and math.isnan(state["reward"])
        error = state.get("error")
        assert isinstance(error, vf.Error) and "gsm8k" in str(error)

    def test_a_scored_rollout_has_no_error(self):
        rub = rubric("gsm8k")
        state = _state("5 + 7 = 12\n#### 12", "12")
        asyncio.run(rub.score_rollout(state))
        assert state.get("error") is None and state["reward"] == pytest.approx(1.5)

    def test_an_earlier_error_is_kept(self):
        rub = rubric("gsm8k")
        state = _state("#### 12", "twelve")
        state["error"] = first = vf.InfraError("the model endpoint went away")
        asyncio.run(rub.score_rollout(state))
        assert state["error"] is first


class TestAWrappedEnvironmentsToolsReachTheModel:
    """``from_verifiers`` wrapped a verifiers environment with tools (``tool_defs``) as an environment offering none:
    rewardpipe's OpenAI policy sent no ``tools=``, a callback trainer got no ``request["tools"]`` and TRL's chat
    template none, so the model could not know the tools its environment answers. It offers them now
    (``tool_schemas``, OpenAI-style), from the task's ``info["tool_defs"]`` first, as verifiers reads them."""

    def _env(self):  # type: ignore[no-untyped-def]
        from datasets import Dataset

        from rewardpipe.integrations.verifiers import from_verifiers

        class Lookup(vf.MultiTurnEnv):
            async def env_response(self, messages, state, **kwargs):  # type: ignore[no-untyped-def]
                return [{"role": "user", "content": "ok"}]

        def said(completion) -> float:  # type: ignore[no-untyped-def]
            return 1.0

        tool = vf.Tool(name="lookup", description="Look a word up.", parameters={"type": "object", "properties": {}})
        data = Dataset.from_list([{"question": "Define 'cat'.", "answer": "animal"}])
        return from_verifiers(Lookup(dataset=data, rubric=vf.Rubric(funcs=[said]), tool_defs=[tool]))

    def test_its_tools_are_offered_openai_style(self):
        env = self._env()
        (task,) = env.task_rows()
        assert env.tool_schemas(task) == [
            {
                "type": "function",
                "function": {
                    "name": "lookup",
                    "description": "Look a word up.",
                    "parameters": {"type": "object", "properties": {}},
                },
            }
        ]

    def test_the_openai_policy_sends_them(self):
        from rewardpipe.episode import converse, env_tool_schemas, start_episode
        from rewardpipe.policies import OpenAIPolicy

        class Client:
            def __init__(self) -> None:
                self.tools: list[object] = []

            def complete(self, messages, **params):  # type: ignore[no-untyped-def]
                self.tools.append(None)
                return "done"

            def complete_message(self, messages, tools=None, **params):  # type: ignore[no-untyped-def]
                self.tools.append(tools)
                return {"content": "done", "tool_calls": None}

        env = self._env()
        (task,) = env.task_rows()
        client = Client()
        # as `rewardpipe run --policy openai` makes it
        policy = OpenAIPolicy("http://unused", "m", client=client, tools=env_tool_schemas(env))
        state = start_episode(task, env=env, run_id="vf", step=0, group_id="g", rollout_id="r", max_turns=1)
        converse(state, task, policy, env)
        assert client.tools and client.tools[0] == env.tool_schemas(task)
