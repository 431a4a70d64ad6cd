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
