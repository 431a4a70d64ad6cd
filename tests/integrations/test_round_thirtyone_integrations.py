"""Round thirty-one: the trainer adapters.

Each test failed before its fix (see docs/changelog.md, round thirty-one)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from rewardpipe.store import LocalStore


def _train(callback, batches: int, completions: list[str]) -> None:
    """``batches`` training batches of one group of four through the callback's reward functions, as TRL calls
    them (the trainer is ``log_metric``'s owner): small batches, each short of ``min_groups`` (4)."""

    class Trainer:
        reward_funcs, reward_weights, num_generations = callback.reward_funcs, [0.5, 1.0], 4
        model = SimpleNamespace(training=True)

        def log(self, name, value):
            pass

    trainer = Trainer()
    for _ in range(batches):
        for fn in callback.reward_funcs:
            fn(prompts=["q"] * 4, completions=completions, answer=["1"] * 4, log_metric=trainer.log, trainer_state=None)


class TestResumedCallbackKeepsItsPool:
    """A TRL callback resumed from a checkpoint under its ``run_id`` carried on the saved monitor state (its open
    pools of small batches included) but held none of the batches of that pool: the pool started over at the
    first resumed batch, so a component constant in every group since before the checkpoint waited another
    ``min_groups`` batches for its verdict (and never got one with checkpoints that often). The pool's earlier
    batches are read back from the store now, as ``monitor_step`` reads them."""

    def test_the_pool_goes_on_over_the_stored_batches(self, tmp_path):
        from rewardpipe.integrations.trl import RewardPipeMonitor

        store = LocalStore(tmp_path)
        dead = ["#### 1", "#### 2", "#### 3", "#### 4"]  # format always 1.0, correctness varies
        first = RewardPipeMonitor(reward="gsm8k", run_id="run", store=store)
        _train(first, 2, dead)
        assert [r.components["format"].verdict for r in first.reports] == ["insufficient_data"] * 2

        resumed = RewardPipeMonitor(reward="gsm8k", run_id="run", store=store)
        _train(resumed, 2, dead)
        assert [r.step for r in resumed.reports] == [2, 3] and not resumed.failures
        last = resumed.reports[-1].components["format"]
        assert last.verdict == "dead" and last.pooled_steps == [0, 1, 2, 3]
        assert [(a.component, a.step) for a in resumed.alarms] == [("format", 3)]
        # the same four batches in one process: the same verdict at the same step
        whole = RewardPipeMonitor(reward="gsm8k", run_id="whole", store=LocalStore(tmp_path / "w"))
        _train(whole, 4, dead)
        assert whole.reports[-1].components["format"].pooled_steps == [0, 1, 2, 3]


def _call(callback, prompts: list[str], **columns) -> None:
    """One batch of groups of four (one prompt each) through every reward function of the callback."""

    class Trainer:
        reward_funcs, reward_weights, num_generations = callback.reward_funcs, [0.5, 1.0], 4
        model = SimpleNamespace(training=True)

        def log(self, name, value):
            pass

    batch = [p for p in prompts for _ in range(4)]
    completions = [f"#### {i % 3}" for i in range(len(batch))]
    for fn in callback.reward_funcs:
        fn(prompts=batch, completions=completions, answer=["1"] * len(batch), log_metric=Trainer().log, **columns)


class TestStoredTrlRecordsNameTheirPrompt:
    """The TRL callback stored a single-turn batch's records under the task id of the group's position in the
    batch (``p0``, ``p1``...): group 0 of every batch was "task p0", whatever its prompt, so ``report``'s task
    triage and task counts mixed unrelated prompts (and split one prompt seen at two positions). A record's
    task is now the dataset's ``task_id`` column when it holds a valid id, else the prompt's id as `score` gives it."""

    def test_task_ids_follow_the_prompt_not_its_position(self, tmp_path):
        from rewardpipe.integrations.trl import RewardPipeMonitor

        store = LocalStore(tmp_path)
        callback = RewardPipeMonitor(reward="gsm8k", run_id="run", store=store)
        _call(callback, ["what is 1?", "what is 2?"])
        _call(callback, ["what is 3?", "what is 1?"])
        assert not callback.failures
        tasks = {(r.step, r.group_id): r.task_id for r in store.iter_records("run")}
        assert tasks[(0, "g0")] == tasks[(1, "g1")]  # one prompt, one task, at any position
        assert tasks[(0, "g0")] != tasks[(1, "g0")] and tasks[(0, "g0")] != tasks[(0, "g1")]
        assert all(task.startswith("p-") for task in tasks.values())
        # the id `rewardpipe score` gives a sample of the same prompt without a task_id
        from rewardpipe.models import Message
        from rewardpipe.single_turn import _prompt_group

        asked = [Message(role="user", content="what is 1?"), Message(role="assistant", content="#### 1")]
        assert tasks[(0, "g0")] == _prompt_group(asked)

    def test_a_task_id_column_names_the_task_when_it_is_a_valid_id(self, tmp_path):
        from rewardpipe.integrations.trl import RewardPipeMonitor

        store = LocalStore(tmp_path)
        callback = RewardPipeMonitor(reward="gsm8k", run_id="run", store=store)
        _call(callback, ["what is 1?", "what is 2?"], task_id=["t-one"] * 4 + ["bad\x1b[2J"] * 4)
        assert not callback.failures
        tasks = {r.group_id: r.task_id for r in store.iter_records("run")}
        assert tasks["g0"] == "t-one" and tasks["g1"].startswith("p-")  # a hostile id is not stored
        assert len(list(store.iter_records("run"))) == 8

    def test_a_prompt_no_message_holds_still_gets_an_id(self):
        from rewardpipe.integrations.trl import prompt_task_id

        looped: list = []
        looped.append(looped)  # neither a message list nor JSON
        assert prompt_task_id(looped, {}, 0).startswith("p-")
        assert prompt_task_id(b"\xff", {}, 0) == prompt_task_id(b"\xff", {}, 3)  # bytes: its text, at any position


def _shaky_reward(bad: float, weight: float = 1.0):
    """Two components; ``shaky`` returns ``bad`` for the completion "#### 1" (else 0.5) under ``weight``."""
    from rewardpipe.rewards.base import Component, Reward

    return Reward(
        "shaky_reward",
        (
            Component("main", 1.0, lambda completion: 1.0),
            Component(
                "shaky", weight, lambda completion: bad if completion == "#### 1" else 0.5, value_range=(0, 1e300)
            ),
        ),
    )


# (value of the shaky component, its weight, the record's error kind, the kind TRL's rows and Nova's answer give)
_NOT_SCORES = [
    pytest.param(math.nan, 1.0, "component_out_of_range", "non_finite_score", id="nan"),
    pytest.param(math.nan, 0.0, "component_out_of_range", "non_finite_score", id="nan-weight-0"),
    pytest.param(-math.inf, 1.0, "component_out_of_range", "non_finite_score", id="minus-inf"),
    pytest.param(1e200, 0.0, "component_out_of_range", "component_out_of_range", id="huge-weight-0"),
    pytest.param(1e300, 1e10, "component_out_of_range", "component_out_of_range", id="huge-overflowing"),
]


class TestTheLibraryNeverScoresNaN:
    """``Reward.score()``, ``score_many``, ``score_columns`` and ``rewardpipe.testing.score()`` returned a NaN, an
    infinite or a 1e200 aggregate (a component returning NaN, infinity or an absurd number, weights whose sum
    overflows) with ``error=None``: records, the TRL adapter and ``check_reward`` caught it later, but a user
    scoring in their own training loop got a NaN reward, and with it a NaN advantage for every rollout of its
    group. The library's score is now the error the record says (``rewardpipe.models.checked_score``); the
    adapters' answers keep their kinds."""

    @staticmethod
    def _record_error(score):
        from rewardpipe.models import checked_score

        return checked_score(score.components, score.weights, score.aggregate, score.error)[2]

    @pytest.mark.parametrize(("bad", "weight", "kind", "_answer"), _NOT_SCORES)
    def test_every_way_of_scoring_returns_the_records_error(self, bad, weight, kind, _answer):
        import warnings

        from rewardpipe import testing
        from rewardpipe.rewards.base import ScoringInput

        reward = _shaky_reward(bad, weight)
        messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "#### 1"}]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scores = [
                reward.score(messages),
                testing.score(reward, messages=messages),
                reward.score_many(
                    [ScoringInput(messages=testing._input(None, messages, None, None, None, None).messages)]
                )[0],
            ]
            columns = reward.score_columns([ScoringInput(completion="#### 1"), ScoringInput(completion="#### 2")])
        for score in scores:
            assert score.aggregate is None and score.components["shaky"] is None
            assert score.error is not None and score.error.kind == kind
            assert "shaky" in score.error.message
        assert columns.aggregates[0] is None and columns.errors[0].kind == kind
        assert columns.values == [[None, 1.0], [None, 0.5]]
        assert columns.aggregates[1] == 1.0 + weight * 0.5 and columns.errors[1] is None

    def test_an_overflowing_sum_of_finite_components_is_a_non_finite_aggregate(self):
        from rewardpipe.rewards.base import Component, Reward, ScoringInput

        reward = Reward(
            "big", (Component("a", 1e308, lambda: 10.0, value_range=(0, 10)), Component("b", 1.0, lambda: 1.0))
        )
        score = reward.score([{"role": "assistant", "content": "x"}])
        assert score.aggregate is None and score.error.kind == "non_finite_aggregate"
        assert score.components == {"a": 10.0, "b": 1.0}
        assert reward.score_columns([ScoringInput(completion="x")]).errors[0].kind == "non_finite_aggregate"

    def test_an_async_component_returning_nan_is_an_error_too(self):
        from rewardpipe.rewards.base import Component, Reward

        async def judge(completion):
            return math.nan

        reward = Reward("judged", (Component("judge", 1.0, judge),))
        score = reward.score([{"role": "assistant", "content": "x"}])
        assert score.aggregate is None and score.error.kind == "component_out_of_range"

    def test_check_reward_still_names_it(self):
        from rewardpipe.testing import check_reward

        with pytest.raises(AssertionError, match=r"\[out_of_range\] component 'shaky': nan is not a finite number"):
            check_reward(_shaky_reward(math.nan), [{"completion": "#### 1"}, {"completion": "#### 2"}])

    @pytest.mark.parametrize(("bad", "weight", "_kind", "answer"), _NOT_SCORES)
    def test_trl_rows_and_nova_answers_keep_their_kinds(self, bad, weight, _kind, answer, tmp_path):
        from rewardpipe.integrations.trl import RewardPipeMonitor
        from rewardpipe.single_turn import score_samples

        store = LocalStore(tmp_path)
        callback = RewardPipeMonitor(reward=_shaky_reward(bad, weight), run_id="run", store=store)
        _call(callback, ["what is 1?", "what is 2?"])
        assert not callback.failures
        records = list(store.iter_records("run"))
        assert len(records) == 8
        failed = [r for r in records if r.status == "error"]
        assert failed and {r.error.kind for r in failed} == {answer}
        assert all(v is None for r in failed for v in r.components.values())
        assert all(r.aggregate is not None and math.isfinite(r.aggregate) for r in records if r.status == "scored")
        sample = {
            "id": "s",
            "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "#### 1"}],
        }
        out = score_samples([sample], _shaky_reward(bad, weight))[0]
        flags = {m["name"]: m["value"] for m in out["metrics_list"] if m["type"] == "Metric"}
        assert flags["reward_error"] == 1 and flags[f"error_{answer}"] == 1 and out["aggregate_reward_score"] == 0.0


class TestNovaReplyCutByMaxTokens:
    """The local policy takes a reply with ``content: null`` and ``finish_reason: "length"`` (a reasoning model still
    thinking when max_tokens ran out) as the model's empty turn, played and scored (round thirty-one). The same
    reply from Nova's generate queue resumes its rollout with the same empty turn: never an error, never dropped.
    (Checked, and it held before: pinned here so the two paths keep agreeing.)"""

    def test_the_router_resumes_the_turn_with_the_same_empty_text_as_the_local_policy(self):
        import json

        from rewardpipe.aws.rollout import trainer_text
        from rewardpipe.episode import apply_policy_turn, start_episode
        from tests.integrations.nova.test_nova_contract import _bridge
        from tests.security.test_round_thirtyone_environments import TASKS, THOUGHT_TOO_LONG, Count, _endpoint_policy

        bridge, _ = _bridge()
        step = bridge._step_path("s-000_0_0")
        bridge.store.put_json(
            step, {"task_token": "tok", "sample_id": "s-000_0", "step_id": "s-000_0_0", "used": False}
        )
        response = {"version": "v0", "sample_id": "s-000_0", "step_id": "s-000_0_0", "data": THOUGHT_TOO_LONG}
        assert bridge.route_response(json.dumps(response))["status"] == "delivered"
        (sent,) = bridge.sfn.successes
        output = json.loads(sent["output"])
        assert output == {"text": "", "finish_reason": "length"}

        env, task = Count(), TASKS[0]
        state = start_episode(task, env=env, run_id="r", step=0, group_id="g", rollout_id="x")
        local = _endpoint_policy(THOUGHT_TOO_LONG).next_turn(state, task)
        nova = trainer_text(output, "reply-0.json", None)
        assert nova == local == ""
        after = apply_policy_turn(state, nova, env, task)  # the model's turn, empty: the episode goes on
        assert after.messages[-1].role == "assistant" and after.messages[-1].content == ""
        assert after.assistant_turns == 1 and after.next_action == "env"


class TestNovaLinearMappingNeverOverflows:
    """When the reward's weights × ranges overflowed a float in the ``linear`` mapping (``reward_bounds`` infinite,
    or finite bounds whose width is not), every aggregate mapped to the bottom of Nova's range. Such a reward is
    refused when the bridge is built and at synth, naming the problem; finite bounds map without overflow."""

    def test_a_reward_whose_bounds_overflow_is_refused_when_the_bridge_is_built(self):
        from rewardpipe.integrations.nova.bridge import Bridge, Queues
        from rewardpipe.integrations.nova.protocol import BridgeConfig

        reward = _shaky_reward(0.5, 1e10)  # weight 1e10 × range (0, 1e300)
        queues = Queues("resp.fifo", "gen.fifo")
        with pytest.raises(ValueError, match=r"reward 'shaky_reward'.*overflow a float.*'clip'"):
            Bridge(BridgeConfig(), reward, LocalStore("/nonexistent"), None, None, queues)
        Bridge(BridgeConfig(range_mapping="clip"), reward, None, None, None, queues)  # clip needs no bounds

    def test_and_at_synth(self):
        from stacks.config import SettingsError
        from stacks.constructs.nova_bridge import _check_range_mapping

        components = ({"name": "a", "range": [0.0, 1e300], "role": "outcome", "weight": 1e10},)
        settings = SimpleNamespace(user_code=SimpleNamespace(reward_components=components))
        with pytest.raises(SettingsError, match=r"rewardpipe_nova.range_mapping: .*overflow a float"):
            _check_range_mapping(settings, SimpleNamespace(range_mapping="linear"))
        _check_range_mapping(settings, SimpleNamespace(range_mapping="clip"))
        fine = ({"name": "a", "range": [0.0, 1.0], "role": "outcome", "weight": 2.0},)
        linear = SimpleNamespace(range_mapping="linear")
        _check_range_mapping(SimpleNamespace(user_code=SimpleNamespace(reward_components=fine)), linear)

    @pytest.mark.parametrize(
        ("aggregate", "bounds", "target", "expected"),
        [
            (0.0, (-1e308, 1e308), (0.0, 1.0), 0.5),
            (1e308, (-1e308, 1e308), (0.0, 1.0), 1.0),
            (-5e307, (-1e308, 1e308), (0.0, 1.0), 0.25),
            (0.5, (0.0, 1.0), (-1e308, 1e308), 0.0),
            (0.75, (0.0, 1.0), (-1e308, 1e308), 5e307),
            (-0.5, (-0.5, 1.6), (0.0, 1.0), 0.0),
        ],
    )
    def test_finite_bounds_map_without_overflow(self, aggregate, bounds, target, expected):
        from rewardpipe.integrations.nova.protocol import map_into_range

        assert map_into_range(aggregate, bounds, target, "linear") == pytest.approx(expected)
