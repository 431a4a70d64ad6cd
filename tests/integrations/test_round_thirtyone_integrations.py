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
        from rewardpipe.single_turn import prompt_digest_id

        asked = [Message(role="user", content="what is 1?"), Message(role="assistant", content="#### 1")]
        assert tasks[(0, "g0")] == prompt_digest_id(asked)

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


def _routed(data: dict, step: str = "s-000_0_0", **extra) -> tuple[dict, object]:
    """Route one generate response for ``step`` (a waiting turn) through the bridge: (the router's result, the fake
    Step Functions client that saw what it sent)."""
    import json

    from tests.integrations.nova.test_nova_contract import _bridge

    bridge, _ = _bridge()
    sample = step.rsplit("_", 1)[0]
    entry = {"task_token": "tok", "sample_id": sample, "step_id": step, "used": False, **extra}
    bridge.store.put_json(bridge._step_path(step), entry)
    response = {"version": "v0", "sample_id": sample, "step_id": step, "data": data}
    return bridge.route_response(json.dumps(response)), bridge.sfn


def _local_turn(reply: dict, tools=None):
    """What the local OpenAIPolicy makes of the same reply: its turn, or the exception it raises."""
    from rewardpipe.episode import start_episode
    from tests.security.test_round_thirtyone_environments import TASKS, Count, _endpoint_policy

    state = start_episode(TASKS[0], env=Count(), run_id="r", step=0, group_id="g", rollout_id="x")
    try:
        return _endpoint_policy(reply, tools=tools).next_turn(state, TASKS[0])
    except Exception as exc:  # noqa: BLE001 - the outcome compared
        return exc


class TestNovaReplyWithoutAMessage:
    """A generate response whose choice had no ``message`` (or ``message: null``), or that did not parse at all, was
    logged as malformed and dropped: its rollout waited out its whole budget. It ends the waiting turn at once now,
    as a policy_error naming what was malformed (the local policy's EndpointError for the same reply)."""

    @pytest.mark.parametrize(
        "data",
        [
            {"choices": [{"message": None, "finish_reason": "stop"}]},
            {"choices": [{"finish_reason": "stop"}]},
            {"choices": []},
            {"choices": [{"message": "hello"}]},
            None,
        ],
    )
    def test_the_turn_fails_at_once_as_a_policy_error(self, data):
        from rewardpipe.openai_client import ContentFiltered, EndpointError

        result, sfn = _routed(data)
        assert result["status"] in ("failed", "malformed") and not sfn.successes
        (failure,) = sfn.failures
        assert failure["taskToken"] == "tok" and failure["error"] == "PolicyError"
        assert "s-000_0_0" in failure["cause"]
        if data is not None:
            local = _local_turn(data)
            assert isinstance(local, EndpointError) and not isinstance(local, ContentFiltered)

    def test_a_repeated_or_unknown_malformed_response_is_still_dropped(self):
        import json

        from tests.integrations.nova.test_nova_contract import _bridge

        bridge, _ = _bridge()
        body = {"version": "v0", "sample_id": "s-000_0", "step_id": "s-000_0_0", "data": {"choices": []}}
        assert bridge.route_response(json.dumps(body))["status"] == "malformed"  # no such waiting turn
        bridge.store.put_json(
            bridge._step_path("s-000_0_0"),
            {"task_token": "tok", "sample_id": "other-000_0", "step_id": "s-000_0_0", "used": False},
        )
        assert bridge.route_response(json.dumps(body))["status"] == "malformed"  # not that sample's turn
        assert bridge.route_response("not json")["status"] == "malformed"
        assert not bridge.sfn.failures and not bridge.sfn.successes


class TestNovaNullContentAsTheLocalPolicy:
    """Any ``content: null`` reply was an empty, scored turn on the Nova path whatever its finish_reason. Locally
    ``null`` with ``stop`` is a policy_error, and ``null`` with ``content_filter`` (or a refusal) ends the episode as a
    content_filter stop, scored as it stands. The Nova path does the same now."""

    def test_null_with_stop_is_a_policy_error_on_both_paths(self):
        from rewardpipe.openai_client import EndpointError

        data = {"choices": [{"message": {"role": "assistant", "content": None}, "finish_reason": "stop"}]}
        result, sfn = _routed(data)
        assert result["status"] == "failed" and not sfn.successes
        assert sfn.failures[0]["error"] == "PolicyError"
        assert isinstance(_local_turn(data), EndpointError)

    @pytest.mark.parametrize(
        "choice",
        [
            {"message": {"role": "assistant", "content": None}, "finish_reason": "content_filter"},
            {"message": {"role": "assistant", "content": None, "refusal": "I can't help with that."}},
        ],
    )
    def test_a_filtered_or_refused_reply_ends_the_episode_as_a_content_filter_stop(self, choice):
        import json

        from rewardpipe.aws.rollout import trainer_turn
        from rewardpipe.episode import CONTENT_FILTER, converse, start_episode
        from rewardpipe.openai_client import ContentFiltered
        from tests.security.test_round_thirtyone_environments import TASKS, Count

        result, sfn = _routed({"choices": [choice]})
        assert result["status"] == "delivered"
        output = json.loads(sfn.successes[0]["output"])
        assert output["filtered"] is True and "text" not in output
        assert trainer_turn(output, "reply-0.json", None) is None

        local = _local_turn({"choices": [choice]})
        assert isinstance(local, ContentFiltered) and not local.on_prompt
        from tests.security.test_round_thirtyone_environments import _endpoint_policy

        state = start_episode(TASKS[0], env=Count(), run_id="r", step=0, group_id="g", rollout_id="x")
        ended = converse(state, TASKS[0], _endpoint_policy({"choices": [choice]}), Count())
        assert ended.end_reason == CONTENT_FILTER and ended.next_action == "score"


def _tool_call(call_id: str, name: str, arguments) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# A reply to a tool-using environment: a good call, hostile ones (arguments that are no JSON, of the wrong type, a
# call that is no object, a name that is no tool), beside a null text.
TOOL_REPLY = {
    "choices": [
        {
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    _tool_call("c1", "get_balance", '{"account": "checking"}'),
                    _tool_call("c2", "transfer", "{not json"),
                    _tool_call("c3", "transfer", '{"source": "savings", "target": "checking", "amount_cents": "all"}'),
                    "rm -rf /",
                    _tool_call("c4", "__import__", '{"name": "os"}'),
                ],
            },
            "finish_reason": "tool_calls",
        }
    ]
}


class TestNovaCarriesToolCalls:
    """Nova's generate response handling read only the text: the ``tool_calls`` of the response's message
    (``data.choices[0].message``, where an OpenAI-style reply carries them) were dropped, so a tool-using environment
    never saw the model's calls through Nova. They reach the rollout now, read as the local policy reads them (at most
    64, each an object), and the environment answers the same calls the same way on both paths."""

    def test_the_same_reply_makes_the_same_turn_and_the_same_tool_answers(self):
        import json

        from rewardpipe.aws.rollout import trainer_turn
        from rewardpipe.envs.tool_call import BUNDLED_TASKS, ENVIRONMENT, ToolCallTask
        from rewardpipe.episode import apply_env_turn, apply_policy_turn, start_episode
        from rewardpipe.models import load_task_rows
        from tests.security.test_round_thirtyone_environments import _endpoint_policy

        result, sfn = _routed(TOOL_REPLY)
        assert result["status"] == "delivered"
        output = json.loads(sfn.successes[0]["output"])
        nova = trainer_turn(output, "reply-0.json", None)

        task = load_task_rows(BUNDLED_TASKS, ToolCallTask)[0]
        state = start_episode(task, env=ENVIRONMENT, run_id="r", step=0, group_id="g", rollout_id="x")
        local = _endpoint_policy(TOOL_REPLY, tools=ENVIRONMENT.tool_schemas).next_turn(state, task)
        assert nova == local and len(nova.tool_calls) == 4  # the call that is no object is dropped on both
        ends = []
        for turn in (nova, local):
            after = apply_env_turn(apply_policy_turn(state, turn, ENVIRONMENT, task), task, ENVIRONMENT)
            ends.append(after)
        assert ends[0].messages == ends[1].messages
        answers = [m for m in ends[0].messages if m.role == "tool"]
        assert [m.tool_call_id for m in answers] == ["c1", "c2", "c3", "c4"]
        assert "12000" in answers[0].content and all("12000" not in m.content for m in answers[1:])

    def test_more_calls_than_the_local_policy_keeps_are_cut_the_same_way(self):
        import json

        from rewardpipe.aws.rollout import trainer_turn
        from rewardpipe.openai_client import MAX_TOOL_CALLS

        calls = [_tool_call(f"c{n}", "get_balance", '{"account": "checking"}') for n in range(MAX_TOOL_CALLS + 10)]
        data = {"choices": [{"message": {"content": "Checking.", "tool_calls": calls}, "finish_reason": "tool_calls"}]}
        _, sfn = _routed(data)
        nova = trainer_turn(json.loads(sfn.successes[0]["output"]), "reply-0.json", None)
        assert nova.content == "Checking." and nova.tool_calls == calls[:MAX_TOOL_CALLS]
        # A trainer's own output with calls that are no list is the trainer's policy_error, as locally.
        from rewardpipe.aws.rollout import PolicyError

        with pytest.raises(PolicyError, match="tool_calls that are not a list"):
            trainer_turn({"text": "", "tool_calls": "rm -rf /"}, "reply-0.json", None)

    def test_a_turn_too_large_for_step_functions_keeps_its_calls_in_the_reply_object(self):
        import json

        from rewardpipe.aws.rollout import trainer_turn

        big = "x" * 300_000
        data = {"choices": [{"message": {"content": big, "tool_calls": [_tool_call("c1", "get_balance", "{}")]}}]}
        result, sfn = _routed(data, reply_key="runs/r/state/reply-0.json")
        assert result["status"] == "delivered"
        output = json.loads(sfn.successes[0]["output"])
        assert output == {"text_key": "runs/r/state/reply-0.json"}

        class States:
            def get(self, key):
                return stored[key]

        from tests.integrations.nova.test_nova_contract import _bridge  # noqa: F401 - the store the router wrote

        stored = {"runs/r/state/reply-0.json": {"text": big, "tool_calls": [_tool_call("c1", "get_balance", "{}")]}}
        turn = trainer_turn(output, "runs/r/state/reply-0.json", States())
        assert turn.content == big and turn.tool_calls[0]["id"] == "c1"


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
