"""Round twenty-five: an independent review of the trainer integrations (TRL, verl, verifiers, Nova Forge).
Each class's docstring names the bug it pins."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rewardpipe.integrations.verl import compute_score


class TestVerlBatchRewardManager:
    """verl's ``reward_model.reward_manager=batch`` (``BatchRewardManager``) calls the custom reward function once
    per batch, with keywords only: ``compute_score(data_sources=..., solution_strs=..., ground_truths=...,
    extra_infos=..., **reward_kwargs)`` (numpy object arrays for the non-tensor columns), and reads back one score
    or dict per sample. ``compute_score`` required ``data_source``, ``solution_str`` and ``ground_truth`` as
    positionals, so that call raised ``TypeError`` out of the reward manager and stopped training (verl 0.3's
    manager caught it and scored the whole batch 0.0). It now answers such a call with one dict per sample, each
    the one the per-sample call gives, one bad sample flagged without the others."""

    def _batch(self):
        return {
            "data_sources": np.array(["openai/gsm8k"] * 4, dtype=object),
            "solution_strs": ["6 * 7 = 42\n#### 42", "It is 41.", None, "#### 42"],
            "ground_truths": ["42", "42", "42", "forty-two"],
            "extra_infos": np.array([{"index": i, "question": "What is 6 * 7?"} for i in range(4)], dtype=object),
        }

    def test_a_batch_call_answers_one_dict_per_sample_as_the_per_sample_call_does(self):
        batch = self._batch()
        scores = compute_score(**batch)
        assert isinstance(scores, list) and len(scores) == 4
        for index, score in enumerate(scores):
            alone = compute_score(
                batch["data_sources"][index],
                batch["solution_strs"][index],
                batch["ground_truths"][index],
                batch["extra_infos"][index],
            )
            assert score.keys() == alone.keys()
            for key, value in alone.items():
                assert (math.isnan(value) and math.isnan(score[key])) or score[key] == value, (index, key)
        assert scores[0]["score"] > 0 and scores[0]["reward_error"] == 0.0
        assert scores[2]["reward_error"] == 1.0  # no answer: flagged, the batch still scored

    def test_reward_kwargs_and_missing_extra_infos_are_taken(self):
        batch = self._batch()
        batch["extra_infos"] = [None] * 4  # what verl passes when the dataset has no extra_info column
        scores = compute_score(**batch, sandbox_fusion_url=None)  # reward_model.reward_kwargs arrive as keywords
        assert [s["reward_error"] for s in scores] == [0.0, 0.0, 1.0, 1.0]

    def test_columns_of_different_lengths_are_refused_naming_them(self):
        batch = self._batch()
        batch["ground_truths"] = ["42"]
        with pytest.raises(ValueError, match="ground_truths"):
            compute_score(**batch)

    def test_the_per_sample_call_is_unchanged(self):
        out = compute_score("openai/gsm8k", "#### 42", "42", extra_info={"question": "q"})
        assert isinstance(out, dict) and out["reward_error"] == 0.0 and out["score"] > 0


class TestNovaAnswerSurvivesAFailedSend:
    """The Nova bridge marked a rollout ``answered`` (in S3) before it sent the rollout response. When that
    SendMessage failed (SQS throttling or a 5xx past botocore's retries, a KMS throttle on the encrypted queue),
    the invocation failed and was retried (EventBridge's target, the sweeper's next minute, intake's
    redelivery), and every retry found the rollout answered and sent nothing: Nova never heard of the rollout
    and its ``rollout.timeout`` failed the training job. The answer is now marked only once it is sent; a send
    repeated after that (the mark itself failed) carries the same FIFO deduplication id, so SQS queues it
    once."""

    class FlakySqs:
        def __init__(self, failures: int) -> None:
            self.failures, self.sent = failures, []

        def send_message(self, **kwargs):
            if self.failures:
                from botocore.exceptions import ClientError

                self.failures -= 1
                raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "SendMessage")
            self.sent.append(kwargs)

    def _setup(self, failures: int = 1):
        from tests.integrations.nova.test_nova_contract import FakeSfn, _bridge, _in_flight

        sfn = FakeSfn()
        bridge, clock = _bridge(sfn=sfn)
        bridge.sqs = self.FlakySqs(failures)
        entry = _in_flight(bridge, clock)
        return bridge, clock, sfn, entry

    def test_the_status_change_retried_after_a_failed_send_answers(self):
        from tests.integrations.nova.test_nova_contract import _scored_output

        bridge, _clock, _sfn, entry = self._setup()
        output = _scored_output("runs/nova/step=0/group=s-000/s-000_0.json")
        with pytest.raises(Exception, match="ThrottlingException"):
            bridge.respond(entry["execution"], "SUCCEEDED", output)
        again = bridge.respond(entry["execution"], "SUCCEEDED", output)  # the event, delivered again
        assert again["status"] == "answered"
        (sent,) = bridge.sqs.sent
        assert json.loads(sent["MessageBody"])["stop_reason"] == "end_of_conversation"
        assert bridge.respond(entry["execution"], "SUCCEEDED", output)["status"] == "already_answered"

    def test_the_sweeper_answers_a_rollout_whose_answer_could_not_be_sent(self):
        bridge, clock, _sfn, _entry = self._setup()
        clock["now"] += 481 + 60
        with pytest.raises(Exception, match="ThrottlingException"):
            bridge.sweep()
        clock["now"] += 60  # the next minute's sweep
        (answer,) = bridge.sweep()["answered"]
        assert answer["status"] == "answered" and answer["response"]["stop_reason"] == "error"
        assert len(bridge.sqs.sent) == 1 and not bridge.store.list_keys("nova/due/")

    def test_a_rejected_request_redelivered_after_a_failed_send_is_answered(self):
        from tests.integrations.nova.test_nova_contract import FakeSfn, _bridge

        bridge, _clock = _bridge(sfn=FakeSfn())
        bridge.sqs = self.FlakySqs(1)
        bad = {"version": "v0", "sample_id": "s-000_0", "data": {}}  # names no task: answered at once
        with pytest.raises(Exception, match="ThrottlingException"):
            bridge.intake(json.dumps(bad))
        out = bridge.intake(json.dumps(bad))  # SQS delivers the request again
        assert out["status"] == "rejected_answered"
        (sent,) = bridge.sqs.sent
        assert json.loads(sent["MessageBody"])["stop_reason"] == "error"


class TestVerlRewardErrorIsNoDapoFilterMetric:
    """The verl guide and ``compute_score``'s docstring advised ``filter_groups.metric: reward_error`` for
    unscorable samples. DAPO's dynamic sampling keeps a prompt's group only when the metric's standard deviation
    over the group is above 0: with ``reward_error`` that keeps only the groups in which some samples failed and
    drops every healthy group, so following the advice trained on the failures alone. The docs now say what
    ``reward_error`` is for and that it is not a filter metric (``score``, or a component, is)."""

    @staticmethod
    def _dapo_keeps(values: list[float]) -> bool:  # verl's filter_groups rule, per prompt uid
        return bool(np.std(values) > 0 or len(values) == 1)

    def test_the_rule_would_drop_a_healthy_group_that_has_signal(self):
        group = [compute_score("openai/gsm8k", answer, "42") for answer in ("#### 42", "#### 41", "#### 42")]
        assert self._dapo_keeps([s["score"] for s in group])  # the score varies: a group worth training on
        assert not self._dapo_keeps([s["reward_error"] for s in group])  # ... which reward_error would drop

    def test_the_docs_do_not_advise_it(self):
        from pathlib import Path

        import rewardpipe.integrations.verl as verl

        guide = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "verl.md").read_text(encoding="utf-8")
        for text in (guide, verl.__doc__ or ""):
            flat = " ".join(text.replace("`", "").split())
            assert "set filter_groups.metric: reward_error" not in flat
            assert "not a filter_groups.metric" in flat
