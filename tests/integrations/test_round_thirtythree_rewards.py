"""Round thirty-three, part 3: a Reward subclass's own ``score_input`` on every batch path.

Each test failed before its fix (see docs/changelog.md, round thirty-three)."""

from __future__ import annotations

import math

from rewardpipe import component
from rewardpipe.models import Message
from rewardpipe.rewards import Reward, Score, ScoringInput


@component(range=(0.0, 1.0), role="outcome")
def main(completion: str) -> float:
    return 1.0 if "1" in completion else 0.0


@component(range=(0.0, 1.0), role="outcome")
async def judged(completion: str) -> float:
    return 1.0 if "1" in completion else 0.0


class _Halved(Reward):
    """A subclass scoring by its own ``score_input``: every component value halved."""

    def score_input(self, data):  # type: ignore[no-untyped-def]
        score = super().score_input(data)
        if score.error is not None:
            return score
        halved = {name: None if v is None else v / 2 for name, v in score.components.items()}
        aggregate = sum(score.weights[n] * v for n, v in halved.items() if v is not None)
        return Score(halved, score.weights, aggregate, {"halved": True}, None)


class _NaN(Reward):
    """A subclass whose own ``score_input`` hands back a NaN (no score: its error, as score() says)."""

    def score_input(self, data):  # type: ignore[no-untyped-def]
        return Score({"main": math.nan}, dict(self.weights), math.nan, {}, None)


def _input(completion: str) -> ScoringInput:
    return ScoringInput(messages=[Message(role="user", content="q"), Message(role="assistant", content=completion)])


class TestBatchesHonourAnOverriddenScoreInput:
    """``score_many`` and ``score_columns`` walked the base class's components directly (``_score_sync``, the async
    gather, the column loop), so a subclass's own ``score_input`` was used by ``score()`` and never by a batch: the
    CLI, the runner, TRL's and verl's batches scored another reward than the one the user wrote. A batch now scores
    each sample through the subclass's ``score_input`` (the batch-wide await of async components is the base
    class's own path; a subclass that overrides ``score_input`` is called per sample, as ``score()`` calls it)."""

    def test_score_many_uses_it(self):
        reward = _Halved("halved", [main])
        scores = reward.score_many([_input("1"), _input("no")])
        assert [s.components["main"] for s in scores] == [0.5, 0.0]
        assert scores[0].metrics == {"halved": True}

    def test_score_many_uses_it_with_async_components(self):
        reward = _Halved("halved", [judged])
        assert [s.aggregate for s in reward.score_many([_input("1")])] == [0.5]

    def test_score_columns_uses_it(self):
        reward = _Halved("halved", [main, judged])
        columns = reward.score_columns([_input("1"), _input("no")])
        assert columns.values == [[0.5, 0.0], [0.5, 0.0]]
        assert columns.aggregates == [1.0, 0.0] and columns.errors == [None, None]

    def test_what_it_returns_is_checked_on_a_batch_too(self):
        reward = _NaN("nan", [main])
        (score,) = reward.score_many([_input("1")])
        assert score.aggregate is None and score.error is not None and score.error.non_finite is True
        columns = reward.score_columns([_input("1")])
        assert columns.aggregates == [None] and columns.values == [[None]]
        assert columns.errors[0] is not None and columns.errors[0].non_finite is True

    def test_a_reweighted_copy_keeps_it(self):
        """``with_weights`` (what ``--weights``, the AWS settings and the adapters' ``weights=`` call) made a plain
        ``Reward``: the override was gone from the copy."""
        reward = _Halved("halved", [main]).with_weights({"main": 2.0})
        assert isinstance(reward, _Halved)
        assert reward.score([Message(role="assistant", content="1")]).aggregate == 1.0
        assert reward.score_many([_input("1")])[0].aggregate == 1.0

    def test_the_trl_functions_serve_it(self):
        from rewardpipe.integrations.trl import reward_functions

        funcs, _ = reward_functions(_Halved("halved", [main]))
        assert funcs[0](prompts=["q", "q"], completions=["1", "no"]) == [0.5, 0.0]


class TestARaisingScoreInputCostsItsSampleOnly:
    """Scoring a batch through a subclass's own ``score_input`` must not let one sample's failure end the batch (the
    TRL step, the runner's step): a ``score_input`` that raises, or returns something that is no Score, is that
    sample's error, as a raising component is."""

    class _Picky(Reward):
        def score_input(self, data):  # type: ignore[no-untyped-def]
            if "boom" in data.completion:
                raise RuntimeError("cannot read boom")
            if "none" in data.completion:
                return None
            return super().score_input(data)

    def test_score_many(self):
        reward = self._Picky("picky", [main])
        scores = reward.score_many([_input("1"), _input("boom"), _input("none")])
        assert scores[0].aggregate == 1.0 and scores[0].error is None
        assert scores[1].aggregate is None and scores[1].error is not None
        assert scores[1].error.kind == "component_raised" and "cannot read boom" in scores[1].error.message
        assert scores[1].components == {"main": None}
        assert scores[2].error is not None and "not a Score" in scores[2].error.message

    def test_score_columns(self):
        columns = self._Picky("picky", [main]).score_columns([_input("1"), _input("boom")])
        assert columns.values == [[1.0, None]] and columns.aggregates == [1.0, None]
        assert columns.errors[0] is None and columns.errors[1] is not None
