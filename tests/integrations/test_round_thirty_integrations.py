"""Round thirty: the trainer adapters and the Nova bridge.

Each test failed before its fix (see docs/changelog.md, round thirty)."""

from __future__ import annotations

import math

import pytest

from rewardpipe.integrations.nova.protocol import BridgeConfig, generate_request, rollout_result
from rewardpipe.rewards import get_reward

REWARD = get_reward("gsm8k")


class TestNovaGenerateRequestKeepsToolTurns:
    """The generate request sent Nova each message's role and content only: an assistant's ``tool_calls``, a tool
    message's ``tool_call_id`` and ``name`` were dropped, so the policy saw tool answers to calls it never made."""

    def test_tool_fields_travel_and_nothing_else_does(self):
        call = {"id": "c1", "type": "function", "function": {"name": "run", "arguments": "{}"}}
        messages = [
            {"role": "user", "content": "q", "secret": "x"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": "4", "tool_call_id": "c1", "name": "run"},
            {"role": "assistant", "content": "a", "tool_calls": None, "name": None},
        ]
        request = generate_request("s_0", messages)
        assert request.messages == [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": "4", "tool_call_id": "c1", "name": "run"},
            {"role": "assistant", "content": "a"},
        ]
        assert request.step_id == "s_0_2"


class TestNovaRolloutResultReadsAnyOutput:
    """``rollout_result`` raised TypeError on an aggregate that is no number (``math.isfinite("0.5")``) and
    OverflowError on an integer past a float; the rollout went unanswered until the sweeper gave it a timeout. It
    is an error answer (``non_finite_score``) now; a component or metric that is no finite number is left out."""

    @pytest.mark.parametrize("aggregate", ["0.5", [1], {"a": 1}, True, 10**400])
    def test_a_non_number_aggregate_is_an_error_answer(self, aggregate):
        response, envelope = rollout_result(
            "s_0", (0.0, 1.0), REWARD, BridgeConfig(), aggregate=aggregate, components={"format": 1.0}
        )
        assert response is not None and response.stop_reason == "error"
        assert response.rewards == {"aggregate_score": 0.5}
        flags = {m["name"]: m["value"] for m in envelope["metrics_list"]}
        assert flags["reward_error"] == 1 and flags["error_non_finite_score"] == 1

    def test_non_number_components_and_metrics_are_left_out(self):
        response, envelope = rollout_result(
            "s_0",
            (0.0, 1.0),
            REWARD,
            BridgeConfig(),
            aggregate=1.5,
            components={"format": "1", "answer_correct": 1},
            metrics={"turns": 10**400, "tokens": 12, "note": "x"},
        )
        assert response is not None and response.stop_reason == "end_of_conversation"
        names = {m["name"]: m["value"] for m in envelope["metrics_list"]}
        assert "format" not in names and names["answer_correct"] == 1.0
        assert "turns" not in names and names["tokens"] == 12 and "note" not in names
        assert math.isclose(response.rewards["aggregate_score"], 1.0)


class TestOverlappingSweepsAnswerOnce:
    """The sweeper runs every minute and may run up to its function's timeout, so two sweeps can overlap. Both
    read a rollout past its budget as unanswered, and both wrote its timeout record and sent its answer (a FIFO
    queue drops a copy for 5 minutes only; a standard one not at all). An answer now first claims the rollout with
    a conditional create on S3 (``nova/answers/``): one sweep answers, the other finds it claimed."""

    def test_two_concurrent_sweeps_against_moto(self):
        import threading

        import boto3
        from moto import mock_aws

        from rewardpipe.integrations.nova.bridge import Bridge, Queues
        from rewardpipe.store import S3Store
        from tests.integrations.nova.test_nova_contract import REWARD as NOVA_REWARD
        from tests.integrations.nova.test_nova_contract import FakeSfn

        both_read = threading.Barrier(2, timeout=30)

        class Overlapping(FakeSfn):
            def describe_execution(self, **kwargs):
                both_read.wait()  # each sweep has read the rollout unanswered and stopped its execution
                return super().describe_execution(**kwargs)

        class Counted:
            def __init__(self, client):
                self.client, self.sends = client, []

            def send_message(self, **kwargs):
                self.sends.append(kwargs)
                return self.client.send_message(**kwargs)

        with mock_aws():
            s3 = boto3.client("s3", region_name="us-east-1")
            s3.create_bucket(Bucket="nova-sweeps")
            s3.put_bucket_versioning(Bucket="nova-sweeps", VersioningConfiguration={"Status": "Enabled"})
            raw_sqs = boto3.client("sqs", region_name="us-east-1")
            url = raw_sqs.create_queue(QueueName="resp.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
            sqs, sfn, clock = Counted(raw_sqs), Overlapping(), {"now": 1_000_000.0}
            store = S3Store("nova-sweeps", client=s3)

            def bridge():
                return Bridge(
                    BridgeConfig(rollout_budget_s=480.0),
                    NOVA_REWARD,
                    store,
                    sqs,
                    sfn,
                    Queues(url, "gen.fifo", rollout_request="req.fifo"),
                    state_machine_arn="arn:aws:states:us-east-1:1:stateMachine:m",
                    clock=lambda: clock["now"],
                )

            first, second = bridge(), bridge()
            first.intake({"version": "v0", "timestamp": clock["now"], "sample_id": "s-000_0", "data": {"task_id": "t"}})
            clock["now"] += 600
            results: list = []
            threads = [threading.Thread(target=lambda b=b: results.append(b.sweep())) for b in (first, second)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
            statuses = sorted(answer["status"] for out in results for answer in out["answered"])
            assert statuses == ["already_answered", "answered"]
            assert len(sqs.sends) == 1  # answered once
            records = [k for k in store.list_keys("runs/") if "/state/" not in k]
            (record,) = records
            versions = s3.list_object_versions(Bucket="nova-sweeps", Prefix=store._full(record))["Versions"]
            assert len(versions) == 1  # timed out once: one timeout record, written once
            assert store.get_json(record)["error"]["kind"] == "timeout"
            # the next sweep finds nothing in flight, and the responder's own answer of the ABORTED end is a no-op
            assert first.sweep() == {"answered": [], "in_flight": 0, "oldest_unanswered_s": 0.0}
            (request,) = store.list_keys("nova/requests/")
            execution = store.get_json(request)["execution"]
            assert second.respond(execution, "ABORTED", None)["status"] == "already_answered"
            assert len(sqs.sends) == 1


class _Rubric:
    """verifiers 0.2.1's ``vf.Rubric`` as far as scoring goes (the default venv has no verifiers; the real one runs
    in ``make test-verifiers``): each function over the group, its exceptions 0.0, reward = Σ weight × value,
    advantage = reward − the group's plain mean, set on the trajectory's steps that have none."""

    def __init__(self, funcs=None, weights=None, parser=None):
        self.funcs, self.weights = list(funcs or []), list(weights or [1.0] * len(funcs or []))

    def _call(self, func, state):
        try:
            return float(
                func(prompt=state["prompt"], completion=state["completion"], answer=state["answer"], state=state)
            )
        except Exception:  # noqa: BLE001 - verifiers' own substitution
            return 0.0

    async def score_rollout(self, state):
        values = {f.__name__: self._call(f, state) for f in self.funcs}
        state["reward"] = sum(w * v for w, v in zip(self.weights, values.values(), strict=True))
        state["metrics"] = values

    async def score_group(self, states):
        for state in states:
            await self.score_rollout(state)
        mean = sum(s["reward"] for s in states) / len(states)
        for state in states:
            state["advantage"] = state["reward"] - mean
            for step in state["trajectory"]:
                if step["advantage"] is None:
                    step["advantage"] = state["advantage"]
                if step["reward"] is None:
                    step["reward"] = state["reward"]


@pytest.fixture
def fake_verifiers(monkeypatch):
    import sys
    import types

    import rewardpipe.integrations.verifiers as adapter

    module = types.ModuleType("verifiers")
    module.Rubric = _Rubric  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "verifiers", module)
    monkeypatch.setattr(adapter, "_RUBRIC_CLASS", None, raising=False)
    return module


def _group(completions, answer="12"):
    return [
        {
            "prompt": [{"role": "user", "content": "5 + 7?"}],
            "completion": [{"role": "assistant", "content": text}],
            "answer": ans if isinstance(ans, str) else answer,
            "trajectory": [{"advantage": None, "reward": None}],
        }
        for text, ans in completions
    ]


class TestVerifiersGroupNotPoisoned:
    """An unscorable sample (a component raised, or the reference cannot be read) was NaN in every rubric function,
    so verifiers' ``score_group`` made every advantage of its group NaN (a plain mean over the group), and the
    loss with it. :func:`rubric` settles it from its group: the scored samples' mean reward (advantage 0), flagged
    ``reward_error`` 1, never a 0."""

    def _score(self, states):
        import asyncio

        from rewardpipe.integrations.verifiers import rubric

        rub = rubric("gsm8k")
        asyncio.run(rub.score_group(states))
        return rub

    def test_one_failure_leaves_the_others_advantages_as_without_it(self, fake_verifiers):
        states = _group([("#### 12", None), ("It is 13", None), ("5 + 7 = 12\n#### 12", None), ("#### 12", "twelve")])
        rub = self._score(states)
        assert isinstance(rub, fake_verifiers.Rubric)
        rewards = [s["reward"] for s in states]
        assert rewards[:3] == [1.5, 0.0, 1.5] and rewards[3] == pytest.approx(1.0)  # the scored samples' mean
        assert [s["advantage"] for s in states] == pytest.approx([0.5, -1.0, 0.5, 0.0])
        assert [s["trajectory"][0]["advantage"] for s in states] == pytest.approx([0.5, -1.0, 0.5, 0.0])
        assert [s["metrics"]["reward_error"] for s in states] == [0.0, 0.0, 0.0, 1.0]
        assert states[3]["metrics"]["format"] == pytest.approx(2 / 3)
        assert all(math.isfinite(v) for s in states for v in s["metrics"].values())

    def test_a_group_with_no_scored_sample_gets_mid_range_and_no_advantage(self, fake_verifiers):
        states = _group([("#### 12", "twelve"), ("It is 13", "twelve")])
        self._score(states)
        assert [s["reward"] for s in states] == [0.75, 0.75]  # 0.5 × 0.5 + 1.0 × 0.5
        assert [s["advantage"] for s in states] == [0.0, 0.0]
        assert [s["metrics"]["reward_error"] for s in states] == [1.0, 1.0]

    def test_a_group_without_failures_is_left_as_verifiers_scored_it(self, fake_verifiers):
        states = _group([("#### 12", None), ("It is 13", None)])
        self._score(states)
        assert [(s["reward"], s["advantage"]) for s in states] == [(1.5, 0.75), (0.0, -0.75)]
        assert [s["metrics"]["reward_error"] for s in states] == [0.0, 0.0]

    def test_a_rollout_scored_alone_stays_nan_and_is_flagged(self, fake_verifiers):
        import asyncio

        from rewardpipe.integrations.verifiers import rubric

        (state,) = _group([("#### 12", "twelve")])
        asyncio.run(rubric("gsm8k").score_rollout(state))
        assert math.isnan(state["reward"]) and state["metrics"]["reward_error"] == 1.0


class TestNovaOutputThatIsNoObject:
    """An execution that succeeded with an output that is no JSON object (text that does not parse, a list)
    made ``respond`` raise (ValueError, AttributeError): the responder failed, and so did every sweep after the
    budget, at that rollout, leaving every rollout listed after it unanswered. It is an ``orchestration_error``
    answer now; and a rollout whose answer fails no longer stops the sweep from answering the others."""

    @pytest.mark.parametrize("output", ["not json", "[1, 2]", "3", '"scored"'])
    def test_the_responder_and_the_sweeper_answer_it_as_an_error(self, output):
        from tests.integrations.nova.test_nova_contract import FakeSfn, _bridge, _in_flight

        bridge, clock = _bridge(sfn=FakeSfn(status="SUCCEEDED", output=output))
        entry = _in_flight(bridge, clock)
        out = bridge.respond(entry["execution"], "SUCCEEDED", output)
        assert out["status"] == "answered" and out["response"]["stop_reason"] == "error"
        flags = {m["name"]: m["value"] for m in out["envelope"]["metrics_list"]}
        assert flags["error_orchestration_error"] == 1
        other = _in_flight(bridge, clock, "b-000_0")
        clock["now"] += 600
        (answer,) = bridge.sweep()["answered"]
        assert answer["status"] == "answered" and answer["response"]["sample_id"] == other["sample_id"]

    def test_one_rollout_that_cannot_be_answered_does_not_hold_up_the_others(self):
        from tests.integrations.nova.test_nova_contract import FakeSfn, _bridge, _client_error, _in_flight

        class OneBroken(FakeSfn):
            def describe_execution(self, **kwargs):
                if kwargs["executionArn"].endswith(broken["execution"]):
                    raise _client_error("InternalServerError")
                return super().describe_execution(**kwargs)

        bridge, clock = _bridge(sfn=OneBroken())
        broken = _in_flight(bridge, clock, "a-000_0")  # listed first: its marker sorts first
        healthy = _in_flight(bridge, clock, "b-000_0")
        clock["now"] += 600
        with pytest.raises(Exception, match="InternalServerError"):
            bridge.sweep()  # the sweep still fails (its errors alarm) ...
        assert bridge.store.get_json(f"nova/requests/{healthy['execution']}.json")["answered"] is True  # ... but
        assert bridge.store.get_json(f"nova/requests/{broken['execution']}.json")["answered"] is False
        (sent,) = bridge.sqs.sent
        assert healthy["sample_id"] in sent["MessageBody"]
