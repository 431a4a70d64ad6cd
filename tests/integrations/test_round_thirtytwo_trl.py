"""Round thirty-two: single-turn scoring and the TRL adapter.

Each test failed before its fix (see docs/changelog.md, round thirty-two)."""

from __future__ import annotations

import ast
import inspect
import math
from types import SimpleNamespace

import pytest

from rewardpipe.models import ErrorInfo, Message, checked_score, non_finite_error
from rewardpipe.store import LocalStore
from tests.integrations.test_round_thirtyone_integrations import _call

#: Text the model wrote, ending as a non-finite value's message does (``rewardpipe.models.NOT_FINITE``).
_SPOOF = "the model says: 7 is not a finite number"


class TestOnePromptDigest:
    """The TRL adapter imported ``single_turn._prompt_group`` (a private name of another module) and wrote the same
    ``"p-" + sha256[:16]`` digest a second time for a prompt no message holds. One public helper,
    ``single_turn.prompt_digest_id``, names a prompt for both, with the ids they always gave."""

    def test_the_adapter_uses_the_public_helper_and_no_private_name(self):
        import rewardpipe.integrations.trl as trl

        tree = ast.parse(inspect.getsource(trl))
        private = [
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == "rewardpipe.single_turn"
            for alias in node.names
            if alias.name.startswith("_")
        ]
        assert private == []
        assert "hashlib" not in {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}

    def test_the_ids_are_the_ones_given_before(self):
        import hashlib
        import json

        from rewardpipe.integrations.trl import prompt_task_id
        from rewardpipe.single_turn import prompt_digest_id

        asked = [Message(role="user", content="what is 1?")]
        text = json.dumps([m.model_dump(mode="json") for m in asked], sort_keys=True, ensure_ascii=False)
        before = "p-" + hashlib.sha256(text.encode()).hexdigest()[:16]
        assert prompt_digest_id([*asked, Message(role="assistant", content="#### 1")]) == before
        assert prompt_task_id("what is 1?", {}, 0) == before
        looped: list = []
        looped.append(looped)  # no message holds it: the digest of its description
        assert prompt_task_id(looped, {}, 5) == prompt_digest_id("<unreadable list>")
        assert prompt_digest_id("x") == "p-" + hashlib.sha256(b"x").hexdigest()[:16]


def _explained_reward(value, message: str = _SPOOF):
    """A reward whose ``main`` component returns ``value`` for ``#### 1`` and ``side`` None (explained by
    ``explain_error`` as ``component_out_of_range``, with the model's text for message); 0.5 otherwise."""
    from rewardpipe.rewards.base import Component, Reward

    def main(completion):
        return value if completion == "#### 1" else 0.5

    def side(completion):
        return None if completion == "#### 1" else 0.5

    return Reward(
        "explained",
        (Component("main", 1.0, main, value_range=(0, 1e300)), Component("side", 1.0, side)),
        explain_error=lambda completion: ErrorInfo(kind="component_out_of_range", message=message),
    )


class TestNonFiniteIsAFactNotAMessage:
    """``non_finite_error`` told a NaN or infinite component from a merely huge one by its message's ending: an
    ``explain_error`` of kind ``component_out_of_range`` quoting the model (``... is not a finite number``) made
    the TRL row and the Nova answer say ``non_finite_score`` for a value that never was one. ``checked_score``
    now records which case it is (``ErrorInfo.non_finite``); the message is read only for records written
    before that field."""

    def test_checked_score_records_the_case(self):
        nan = checked_score({"a": math.nan}, {"a": 1.0}, None, None)[2]
        huge = checked_score({"a": 1e200}, {"a": 1.0}, None, None)[2]
        assert (nan.kind, nan.non_finite, non_finite_error(nan)) == ("component_out_of_range", True, True)
        assert (huge.kind, huge.non_finite, non_finite_error(huge)) == ("component_out_of_range", False, False)
        assert '"non_finite":true' in nan.model_dump_json()

    def test_a_message_cannot_make_a_value_read_as_another_case(self):
        # a huge value's error whose message ends as a non-finite one's, and a NaN's that does not
        huge = ErrorInfo(kind="component_out_of_range", message=_SPOOF, non_finite=False)
        nan = ErrorInfo(kind="component_out_of_range", message="component 'a': 1e+200 is beyond", non_finite=True)
        assert not non_finite_error(huge) and non_finite_error(nan)
        # an error checked_score did not make (a reward's explain_error): no value of it was found not finite
        given = ErrorInfo(kind="component_out_of_range", message=_SPOOF)
        for components in ({"a": None}, {"a": 1e200, "b": None}):
            error = checked_score(components, {"a": 1.0, "b": 1.0}, None, given)[2]
            assert error.message == _SPOOF and error.non_finite is False and not non_finite_error(error)

    @pytest.mark.parametrize("value", [0.5, 1e200], ids=["in-range", "huge"])
    def test_trl_rows_and_nova_answers_do_not_read_the_message(self, value, tmp_path):
        import warnings

        from rewardpipe.integrations.trl import RewardPipeMonitor
        from rewardpipe.single_turn import score_samples

        reward = _explained_reward(value)
        store = LocalStore(tmp_path)
        callback = RewardPipeMonitor(reward=reward, run_id="run", store=store)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _call(callback, ["what is 1?", "what is 2?"])
            sample = {
                "id": "s",
                "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "#### 1"}],
            }
            out = score_samples([sample], reward)[0]
        assert not callback.failures
        failed = [r for r in store.iter_records("run") if r.status == "error"]
        assert failed and {r.error.kind for r in failed} == {"component_out_of_range"}
        flags = {m["name"]: m["value"] for m in out["metrics_list"] if m["type"] == "Metric"}
        assert flags["reward_error"] == 1 and flags.get("error_component_out_of_range") == 1
        assert "error_non_finite_score" not in flags

    def test_a_nan_is_still_non_finite_score(self):
        from rewardpipe.rewards.base import Component, Reward
        from rewardpipe.single_turn import score_samples

        reward = Reward("nan", (Component("main", 1.0, lambda completion: math.nan),))
        sample = {"id": "s", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "x"}]}
        out = score_samples([sample], reward)[0]
        flags = {m["name"]: m["value"] for m in out["metrics_list"] if m["type"] == "Metric"}
        assert flags.get("error_non_finite_score") == 1

    def test_a_record_written_before_the_field_reads_as_it_always_did(self):
        from rewardpipe.models import Record

        base = {
            "run_id": "r",
            "group_id": "g",
            "rollout_id": "x",
            "task_id": "t",
            "status": "error",
            "components": {"a": None},
            "weights": {"a": 1.0},
            "aggregate": None,
        }
        old = {"kind": "component_out_of_range", "message": "component 'a': nan is not a finite number"}
        record = Record.model_validate({**base, "error": old})
        assert record.error.non_finite is None and non_finite_error(record.error)
        assert "non_finite" not in record.model_dump_json()  # a record without the fact is written as before
        other = ErrorInfo(kind="component_error", message="x")
        assert other.model_dump(mode="json") == {"kind": "component_error", "message": "x"}

    def test_the_monitors_fast_reader_still_reads_records_that_say_it(self):
        from rewardpipe.models import Record
        from rewardpipe.monitoring.fastread import _arrow_batch

        def line(rollout: str, error: ErrorInfo | None) -> str:
            components = {"a": None if error else 1.0}
            return Record(
                run_id="r",
                group_id="g",
                rollout_id=rollout,
                task_id="t",
                status="error" if error else "scored",
                error=error,
                components=components,
                weights={"a": 1.0},
                aggregate=None if error else 1.0,
            ).to_json()

        error = checked_score({"a": math.nan}, {"a": 1.0}, None, None)[2]
        data = "\n".join([line("x", error), line("y", None), line("z", None)]).encode() + b"\n"
        batch = _arrow_batch(data)
        assert batch is not None and len(batch.error_kinds.codes) == 3


class TestUnjudgedBatchesLogNoDeadFlag:
    """The TRL callback logged ``rewardpipe/<component>/dead`` = 0.0 for a batch the monitor gave no verdict
    (``insufficient_data``: a small batch waiting for its pool): a component constant in every group of every
    batch read 0, 0, 0, 1, 0, 0, 0, 1 over batches of one group, "alive" three batches in four. Such a batch
    logs no ``dead`` now; its other figures are logged as before."""

    def test_a_component_dead_throughout_never_logs_alive(self):
        from rewardpipe.integrations.trl import RewardPipeMonitor
        from rewardpipe.rewards.base import Component, Reward

        reward = Reward(
            "r",
            (
                Component("const", 1.0, lambda completion: 1.0),
                Component("vary", 1.0, lambda completion: float(len(completion) % 2)),
            ),
        )
        callback = RewardPipeMonitor(reward=reward, run_id="run")
        logged: list[dict] = []

        class Trainer:
            reward_funcs, reward_weights, num_generations = callback.reward_funcs, [1.0, 1.0], 4
            model = SimpleNamespace(training=True)

            def log(self, name, value):
                logged[-1][name] = value

        trainer = Trainer()
        for _ in range(8):  # one group per batch: four batches to a verdict
            logged.append({})
            for fn in callback.reward_funcs:
                fn(prompts=["q"] * 4, completions=["a", "bb", "a", "bb"], log_metric=trainer.log, trainer_state=None)
        assert not callback.failures
        dead = [batch.get("rewardpipe/const/dead") for batch in logged]
        assert dead == [None, None, None, 1.0, None, None, None, 1.0]
        assert [batch.get("rewardpipe/vary/dead") for batch in logged][3::4] == [0.0, 0.0]
        assert all(batch["rewardpipe/const/zero_variance_group_fraction"] == 1.0 for batch in logged)
