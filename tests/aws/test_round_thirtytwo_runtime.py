"""Round thirty-two, AWS runtime paths.

* The trainer-side client (:meth:`rewardpipe.aws.client.RolloutClient.serve_turns`) sent a turn's text only:
  ``respond`` had to return a string, so a model's tool calls, which the Nova path and the local OpenAI policy
  carry into the episode, could not reach a callback rollout at all (a message refused as "not text"). ``respond``
  may now return an assistant message (a dict, the OpenAI SDK's message or chat completion), read as the local
  policy reads a reply (:func:`rewardpipe.openai_client.choice_message`): the calls reach the episode the same way.
* A rollout whose function failed after it scored (its transcript or record not written, its answer to Step
  Functions not sent, the function timed out) was answered by RecordError with an error record: the computed score
  was lost, and where the record had been written the execution's answer (what Nova and ``wait`` read) said error
  beside a scored record. The scored record is now kept in the attempt's state folder before anything else is
  written, and RecordError answers with it (writing its record again if it was not): only this attempt's score,
  never an earlier attempt's.
"""

from __future__ import annotations

import json

import pytest

from tests.aws.handlers import Context, load
from tests.aws.test_client import _FakeSfn, _FakeSqs, _turn, turn_bucket  # noqa: F401 - the fixture
from tests.aws.test_rollout_handlers import _client_error, _event, _failed, _snapshot, bucket, runner  # noqa: F401 - fixtures
from tests.integrations.test_round_thirtyone_integrations import TOOL_REPLY, _tool_call

pytestmark = pytest.mark.xdist_group("cdk")


def _serve(respond, bodies, s3=None) -> _FakeSfn:
    from rewardpipe.aws.client import RolloutClient

    sfn, sqs = _FakeSfn(), _FakeSqs(bodies)
    client = RolloutClient("arn:aws:states:us-east-1:1:stateMachine:m", queue_url="q", sfn=sfn, sqs=sqs, s3=s3)
    calls = iter([False, True])
    client.serve_turns(respond, until=lambda: next(calls), poll_s=0.01)
    return sfn


class TestTheClientCarriesToolCalls:
    def test_a_message_with_tool_calls_reaches_the_episode_as_the_local_policy_reads_it(self, turn_bucket):  # noqa: F811
        """Before: ``respond`` returning the model's message failed the turn ("respond returned dict, not text"):
        the rollout an error record, the calls lost."""
        from rewardpipe.aws.rollout import trainer_turn
        from rewardpipe.envs.tool_call import BUNDLED_TASKS, ENVIRONMENT, ToolCallTask
        from rewardpipe.episode import start_episode
        from rewardpipe.models import load_task_rows
        from tests.security.test_round_thirtyone_environments import _endpoint_policy

        s3, _ = turn_bucket
        message = TOOL_REPLY["choices"][0]["message"]
        shapes = {"message": message, "choice": TOOL_REPLY["choices"][0], "completion": TOOL_REPLY}
        sfn = _serve(lambda request: shapes[request["rollout"]], [_turn(token) for token in shapes], s3)
        assert not sfn.failure and set(sfn.success) == set(shapes)
        task = load_task_rows(BUNDLED_TASKS, ToolCallTask)[0]
        state = start_episode(task, env=ENVIRONMENT, run_id="r", step=0, group_id="g", rollout_id="x")
        local = _endpoint_policy(TOOL_REPLY, tools=ENVIRONMENT.tool_schemas).next_turn(state, task)
        for token, output in sfn.success.items():
            turn = trainer_turn(output, "runs/r/state/a/reply-x.json", None)
            assert turn == local and len(turn.tool_calls) == 4, token  # the call that is no object dropped

    def test_an_sdk_message_object_and_plain_text_are_taken(self, turn_bucket):  # noqa: F811
        from rewardpipe.models import Message

        s3, _ = turn_bucket
        calls = [_tool_call("c1", "get_balance", '{"account": "checking"}')]
        replies = {"obj": Message(role="assistant", content="Checking.", tool_calls=calls), "text": "Just text."}
        sfn = _serve(lambda request: replies[request["rollout"]], [_turn("obj"), _turn("text")], s3)
        assert sfn.success == {
            "obj": {"text": "Checking.", "tool_calls": calls},
            "text": {"text": "Just text."},  # as before: no tool_calls key
        }

    def test_a_large_message_goes_through_its_reply_key_with_its_calls(self, turn_bucket):  # noqa: F811
        from rewardpipe.aws.rollout import trainer_turn
        from rewardpipe.aws.state import StateStore

        s3, store = turn_bucket
        calls = [_tool_call("c1", "get_balance", json.dumps({"account": "x" * 250_000}))]
        sfn = _serve(lambda request: {"content": None, "tool_calls": calls}, [_turn("big")], s3)
        assert sfn.success == {"big": {"text_key": "runs/r/state/a/reply-big.json"}}
        turn = trainer_turn(sfn.success["big"], "runs/r/state/a/reply-big.json", StateStore(store, "r", "a"))
        assert turn.content == "" and turn.tool_calls == calls

    def test_a_filtered_reply_is_a_content_filter_stop_and_a_reply_without_a_turn_fails_the_turn(self, turn_bucket):  # noqa: F811
        s3, _ = turn_bucket
        replies = {
            "refused": {"content": None, "refusal": "I can't help with that."},
            "empty": {"choices": [{"message": {"content": None}, "finish_reason": "length"}]},
            "nothing": {"role": "assistant"},
            "number": 42,
        }
        sfn = _serve(lambda request: replies[request["rollout"]], [_turn(token) for token in replies], s3)
        assert sfn.success == {"refused": {"filtered": True}, "empty": {"text": ""}}
        assert set(sfn.failure) == {"nothing", "number"}


# -- a failure after the score -------------------------------------------------------------------------------------


def _sent_nothing_back(monkeypatch, code: str = "ThrottlingException") -> list:
    """Step Functions refuses every SendTaskFailure (botocore's retries spent): the conversation state's answer."""
    from rewardpipe.aws import rollout

    tried = []

    class Refusing:
        def send_task_failure(self, **kwargs):
            tried.append(kwargs)
            raise _client_error(code)

    monkeypatch.setattr(rollout.TokenDelivery, "_client", lambda self, service: Refusing())
    return tried


def _values(output: dict) -> dict:
    return {m["name"]: m["value"] for m in output["metrics_list"]}


class _FifteenMinutes(Context):
    def get_remaining_time_in_millis(self) -> int:
        return 900_000  # time to run the job inline and score in the same invocation


class TestAScoreOutlivesALaterFailure:
    def test_a_conversation_state_whose_answer_failed_after_it_scored_is_answered_with_the_score(
        self,
        bucket,  # noqa: F811
        runner,  # noqa: F811
        monkeypatch,
    ):
        """Before: the record was scored but RecordError's answer, the execution's output, was an error record."""
        tried = _sent_nothing_back(monkeypatch)
        with pytest.raises(Exception, match="ThrottlingException"):
            load("rollout_start").lambda_handler(
                {"input": _event(), "attempt": "att-1", "task_token": "t"}, _FifteenMinutes()
            )
        assert tried and json.loads(tried[0]["cause"])["status"] == "scored"
        # The Pass before RecordError keeps only the error; the run is what RecordError reads back from the execution.
        out = load("error_record").lambda_handler(
            _failed({"run": "r"}, "StartEpisodeStep", "ThrottlingException"), Context()
        )
        sent = json.loads(tried[0]["cause"])
        assert out["status"] == "scored" and out["aggregate_reward_score"] == sent["aggregate_reward_score"]
        assert _values(out) == _values(sent) and _values(out)["reward_error"] == 0
        assert bucket.get_json(out["record_key"])["status"] == "scored"

    def test_a_score_whose_transcript_and_record_were_not_written_is_written_and_answered(
        self,
        bucket,  # noqa: F811
        runner,  # noqa: F811
        monkeypatch,
    ):
        """Before: nothing was written but an error record (scoring_error): the score computed was lost."""
        from rewardpipe.aws import rollout

        ref = load("rollout_start").lambda_handler({"input": _event(), "attempt": "att-1"}, Context())
        written = rollout.put_transcript

        def unwritable(*args, **kwargs):
            raise _client_error("AccessDenied")

        monkeypatch.setattr(rollout, "put_transcript", unwritable)
        with pytest.raises(Exception, match="AccessDenied"):
            load("score_rollout").lambda_handler(ref, Context())
        assert not bucket.list_keys("runs/r/step=2/")
        monkeypatch.setattr(rollout, "put_transcript", written)
        out = load("error_record").lambda_handler(_failed(ref, "ScoreStep", "AccessDenied"), Context())
        record = bucket.get_json(out["record_key"])
        assert out["status"] == record["status"] == "scored" and record["error"] is None
        assert _values(out)["correctness"] == 1.0
        assert bucket.list_keys("runs/r/transcripts/")  # and the rollout has its transcript

    def test_only_this_attempts_score_answers_for_it(self, bucket, runner):  # noqa: F811
        """A re-run's failure is its own: an earlier attempt's score (another model's answers) never stands in."""
        ref = load("rollout_start").lambda_handler({"input": _event(), "attempt": "att-1"}, Context())
        scored = load("score_rollout").lambda_handler(ref, Context())
        again = load("rollout_start").lambda_handler({"input": _event(), "attempt": "att-2"}, Context())
        out = load("error_record").lambda_handler(
            _failed(again, "ScoreStep", "States.Timeout", attempt="att-2"), Context()
        )
        assert out["status"] == "error" and out["record_key"] == scored["record_key"]
        assert bucket.get_json(scored["record_key"])["status"] == "scored"  # kept, as before
        # An error record, or an unreadable object, where a score would be is no score either.
        bucket.put_json("runs/r/state/att-2/scored.json", {"status": "scored", "run_id": "r"})
        out = load("error_record").lambda_handler(
            _failed(again, "ScoreStep", "States.Timeout", attempt="att-2"), Context()
        )
        assert out["status"] == "error"

    def test_a_late_answer_with_a_score_leaves_a_re_runs_scored_record(self, bucket, runner):  # noqa: F811
        """Answering a failed attempt with its score writes its record only where there is none, or an error record:
        a re-run's scored record written meanwhile stays (the record is the rollout's latest result)."""
        ref = load("rollout_start").lambda_handler({"input": _event(), "attempt": "att-1"}, Context())
        scored = load("score_rollout").lambda_handler(ref, Context())
        rerun = {**bucket.get_json(scored["record_key"]), "aggregate": 0.25}
        bucket.put_json(scored["record_key"], rerun)
        out = load("error_record").lambda_handler(_failed(ref, "ScoreStep", "States.Timeout"), Context())
        assert out["status"] == "scored" and out["aggregate_reward_score"] == scored["aggregate_reward_score"]
        assert bucket.get_json(scored["record_key"]) == rerun


class TestTheTrainerIsHandedTheTools:
    """Before: a callback turn request carried the conversation only, so a trainer had to know and pass the
    environment's tools to its model itself (and the workflow's own ``openai`` policy sent none): a tool-calling
    environment's model was asked without the tools the local OpenAI policy offers it."""

    @pytest.fixture
    def tool_env(self, bucket, monkeypatch):  # noqa: F811
        import boto3

        from tests.aws import harness

        sqs = boto3.client("sqs", region_name=harness.REGION)
        url = sqs.create_queue(QueueName="turns")["QueueUrl"]
        monkeypatch.setenv("TURN_QUEUE_URL", url)
        monkeypatch.setenv("ENVIRONMENT_REF", "rewardpipe.envs.tool_call:ENVIRONMENT")
        return sqs, url

    @staticmethod
    def _start(sqs, url, attempt="att-1"):
        from rewardpipe.envs.tool_call import BUNDLED_TASKS, ToolCallTask
        from rewardpipe.models import load_task_rows

        task = load_task_rows(BUNDLED_TASKS, ToolCallTask)[0]
        event = {
            "input": {**_event(mode="callback"), "task": task.model_dump(mode="json")},
            "attempt": attempt,
            "task_token": f"tok-{attempt}",
        }
        ref = load("rollout_start").lambda_handler(event, Context())
        (message,) = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        return task, ref, json.loads(message["Body"])

    def test_respond_gets_the_environments_tools_for_the_task(self, bucket, tool_env):  # noqa: F811
        from rewardpipe.envs.tool_call import ENVIRONMENT

        task, ref, body = self._start(*tool_env)
        assert ref["next"] == "ask_trainer" and body["tools_key"] == "runs/r/state/att-1/tools.json"
        seen = []
        sfn = _serve(lambda request: seen.append(request) or "I will check.", [body], bucket.client)
        assert not sfn.failure and list(sfn.success) == ["tok-att-1"]
        assert seen[0]["tools"] == ENVIRONMENT.tool_schemas(task) and seen[0]["tools"]
        assert seen[0]["messages"] == _snapshot(bucket, ref)["state"]["messages"]

    def test_a_request_without_tools_is_as_before_and_a_foreign_tools_key_fails_the_turn(self, turn_bucket):  # noqa: F811
        s3, store = turn_bucket
        store.put_json("runs/r/state/b/tools.json", [{"type": "function"}])
        seen = []
        sfn = _serve(
            lambda request: seen.append(request) or "ok",
            [_turn("plain"), {**_turn("foreign"), "tools_key": "runs/r/state/b/tools.json"}],
            s3,
        )
        assert [sorted(r) for r in seen] == [["group", "messages", "rollout", "run", "step"]]  # no "tools" key
        assert list(sfn.success) == ["plain"] and "tools_key must be under runs/r/state/a/" in sfn.failure["foreign"][1]

    def test_tools_over_the_limit_or_not_json_are_the_environments_failure(self, bucket, tool_env, monkeypatch):  # noqa: F811
        from rewardpipe.aws import rollout
        from rewardpipe.envs.tool_call import ENVIRONMENT

        monkeypatch.setattr(rollout, "TOOLS_LIMIT", 100)
        with pytest.raises(rollout.SimulatorError, match=r"tool_schemas failed: ValueError: the tools are \d+ bytes"):
            rollout.task_tools(ENVIRONMENT, None)
        monkeypatch.setattr(type(ENVIRONMENT), "tool_schemas", lambda self, task: [{"f": {1, 2}}])
        with pytest.raises(rollout.SimulatorError, match="tool_schemas failed: TypeError"):
            rollout.task_tools(ENVIRONMENT, None)

    def test_the_workflows_openai_policy_sends_the_tools(self, bucket, tool_env):  # noqa: F811
        from rewardpipe.aws.rollout import EpisodeSnapshot, build_policy
        from rewardpipe.aws.settings import Settings
        from rewardpipe.envs.tool_call import ENVIRONMENT

        policy = {"mode": "openai", "base_url": "http://model", "model": "m"}
        snapshot = EpisodeSnapshot.model_validate({"task_key": "k", "policy": policy, "state": {"messages": []}})
        policy = build_policy(snapshot, Settings.from_env())
        assert policy.tools == ENVIRONMENT.tool_schemas


def test_an_execution_named_inputs_has_no_state_folder_a_trainer_may_write(bucket):  # noqa: F811
    """Before: an execution named ``inputs`` (a trainer may start executions with any name) kept its episode, its
    tools and the score RecordError answers with in ``runs/<run>/state/inputs/``, where the TrainerPolicy allows
    ``s3:PutObject``: its trainer could rewrite them. Such a name is refused as bad input at the start."""
    from rewardpipe.aws.state import attempt_prefix

    with pytest.raises(ValueError, match="may not be named 'inputs'"):
        attempt_prefix("r", "inputs")
    with pytest.raises(ValueError, match="may not be named 'inputs'"):
        load("rollout_start").lambda_handler({"input": _event(mode="callback"), "attempt": "inputs"}, Context())
    assert bucket.list_keys("runs/r/state/") == []
