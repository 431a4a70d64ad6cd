"""Round thirty-three, the Nova Forge paths.

* A callback rollout on the Nova bridge's turn channel stored its environment's tools (``tools.json``) and named
  them in every turn request, but the bridge's forwarder never read them: Nova's generate request has no tools
  field (contracts: ``{"version", "sample_id", "step_id", "messages"}``). The tools are now stored and named only
  for the trainers' own turn queue, whose client hands them to ``respond``.
* The single-turn reward Lambda (``reward_lambda_arn``) lost a whole batch three ways: an id holding a lone
  surrogate (the python3.13 runtime could not encode the answer as UTF-8, after the handler returned; the harness
  wrote answers ASCII-escaped and hid it), a component without a ``timeout_s`` that hung, and an ``executed_code``
  hook that hung (both held the invocation until Lambda killed it). Each now costs its own sample only.
"""

from __future__ import annotations

import json

import pytest

from tests.aws.handlers import Context, load
from tests.aws.test_rollout_handlers import _event, bucket  # noqa: F401 - the fixture

pytestmark = pytest.mark.xdist_group("cdk")


class TestNovaChannelToolsAreNotWritten:
    @pytest.fixture
    def channels(self, bucket, monkeypatch):  # noqa: F811
        from rewardpipe.aws.rollout import TokenDelivery

        sent: dict[str, list[dict]] = {}

        class _Sqs:  # the turn queues (the IAM harness has no Nova queue in the default synth)
            def send_message(self, QueueUrl, MessageBody):
                sent.setdefault(QueueUrl, []).append(json.loads(MessageBody))

        monkeypatch.setattr(TokenDelivery, "_client", lambda self, service: _Sqs())
        monkeypatch.setenv("TURN_QUEUE_URL", "trainers")
        monkeypatch.setenv("TURN_CHANNELS", json.dumps({"nova": "nova"}))
        monkeypatch.setenv("ENVIRONMENT_REF", "rewardpipe.envs.tool_call:ENVIRONMENT")
        return sent

    @staticmethod
    def _start(sent, url, attempt, **policy):
        from rewardpipe.envs.tool_call import BUNDLED_TASKS, ToolCallTask
        from rewardpipe.models import load_task_rows

        task = load_task_rows(BUNDLED_TASKS, ToolCallTask)[0]
        event = {
            "input": {**_event(mode="callback", **policy), "task": task.model_dump(mode="json")},
            "attempt": attempt,
            "task_token": f"tok-{attempt}",
        }
        ref = load("rollout_start").lambda_handler(event, Context())
        (body,) = sent.pop(url)
        assert not sent  # asked on the one queue only
        return ref, body

    def test_a_nova_channel_rollout_stores_and_names_no_tools(self, bucket, channels):  # noqa: F811
        """Before: tools.json was written under the attempt's state folder and its key sent to the Nova bridge,
        which never reads it (nothing in the Nova contract can carry it)."""
        ref, body = self._start(channels, "nova", "att-nova", channel="nova")
        assert ref["next"] == "ask_trainer"
        assert "tools_key" not in body
        assert bucket.get_json("runs/r/state/att-nova/tools.json", default=None) is None
        assert bucket.get_json(ref["state_key"]).get("tools_key") is None

    def test_the_trainers_queue_still_gets_the_tools(self, bucket, channels):  # noqa: F811
        _, body = self._start(channels, "trainers", "att-own")
        assert body["tools_key"] == "runs/r/state/att-own/tools.json"
        assert bucket.get_json(body["tools_key"])


# --------------------------------------------------------------------------------------------------
# The single-turn reward Lambda (reward_lambda_arn)


def wire(results) -> bytes:
    """The answer as the python3.12+ runtime (the stack's python3.13) sends it: awslambdaric's marshaller writes
    JSON with ``ensure_ascii=False`` and posts it UTF-8 encoded, outside the handler's reach."""
    return json.dumps(results, ensure_ascii=False, allow_nan=True).encode("utf-8")


@pytest.fixture
def gsm8k(monkeypatch):
    monkeypatch.setenv("REWARD_NAME", "gsm8k")
    monkeypatch.delenv("REWARD_WEIGHTS", raising=False)
    monkeypatch.delenv("ERROR_REWARD", raising=False)
    return load("single_turn_reward")


def _sample(sample_id, answer="#### 42", **extra):
    return {
        "id": sample_id,
        "messages": [{"role": "user", "content": "6 * 7?"}, {"role": "nova_assistant", "content": answer}],
        "metadata": {"reference_answer": "42"},
        **extra,
    }


class TestEveryAnswerCanBeSent:
    def test_an_id_with_a_lone_surrogate_does_not_lose_the_batch(self, gsm8k):
        """Before: JSON's "\\ud800" in an id was echoed as it came; the runtime's UTF-8 encoding of the answer
        raised UnicodeEncodeError after the handler returned, and all 3 samples' scores were lost."""
        ids = ["ok", "bad-\ud800", {"k\udfff": 1}]
        results = gsm8k.lambda_handler([_sample(i) for i in ids], Context())
        sent = json.loads(wire(results))
        assert len(sent) == 3 and sent[0]["id"] == "ok"
        assert [r["aggregate_reward_score"] for r in sent] == [1.5, 1.5, 1.5]
        assert sent[1]["id"] == "bad-\\ud800" and "\\udfff" in sent[2]["id"]

    def test_the_deployed_function_answers_such_a_batch_as_its_runtime_sends_it(self, deployment, synth):
        """The harness now writes a function's answer as the python3.12+ runtime does (it wrote ASCII-escaped
        JSON, which hid the lost batch above)."""
        import boto3

        from tests.aws import harness

        (runtime,) = {
            r["Properties"]["Runtime"]
            for name, r in synth.template["Resources"].items()
            if name.startswith("SingleTurnReward") and r["Type"] == "AWS::Lambda::Function"
        }
        assert runtime in ("python3.12", "python3.13", "python3.14")  # the marshaller the harness copies
        client = boto3.client("lambda", region_name=harness.REGION)
        response = client.invoke(
            FunctionName=deployment.function_name("SingleTurnReward"),
            Payload=json.dumps([_sample("ok"), _sample("bad-\ud800")]),
        )
        assert "FunctionError" not in response
        assert [r["id"] for r in json.loads(response["Payload"].read())] == ["ok", "bad-\\ud800"]


class TestAComponentWithoutALimitCannotHoldTheBatch:
    """Before: a component with no ``timeout_s`` that hung (a loop on one odd answer, a call without a timeout) held
    the reward Lambda until Lambda killed it: the whole batch was lost, every other sample's score with it. The
    handler's ``answer_by`` covered only the time between samples, not a call in progress."""

    @pytest.fixture
    def release(self):
        import threading

        event = threading.Event()
        yield event
        event.set()

    @staticmethod
    def _reward(release, *, is_async=False):
        from rewardpipe import Reward, component

        if is_async:

            @component(range=(0, 1), role="outcome", name="stuck")
            async def stuck_async(completion):
                import asyncio

                if "hang" in completion:
                    await asyncio.get_running_loop().run_in_executor(None, release.wait)
                return 1.0

            return Reward("r", [stuck_async])

        @component(range=(0, 1), role="outcome", name="stuck")
        def stuck(completion):
            if "hang" in completion:
                release.wait()
            return 1.0

        return Reward("r", [stuck])

    @pytest.mark.parametrize("is_async", [False, True])
    def test_a_hung_component_is_its_samples_error_and_the_batch_is_answered(self, release, is_async):
        import time

        from rewardpipe.single_turn import is_flagged, score_samples

        samples = [_sample("ok", "fine"), _sample("stuck", "hang"), _sample("after", "fine too")]
        now = time.monotonic()
        # 5 s (was 0.5 s): the sample before the hang must be scored in it on a loaded machine
        results = score_samples(
            samples, self._reward(release, is_async=is_async), answer_by=now + 5, error_reward="zero"
        )
        assert [r["id"] for r in results] == ["ok", "stuck", "after"]
        flags = {r["id"]: {m["name"] for m in r["metrics_list"] if m["name"].startswith("error_")} for r in results}
        assert flags["stuck"] == {"error_component_timeout"} and is_flagged(results[1])
        if not is_async:  # scored one by one: the sample before the hang keeps its score
            assert not is_flagged(results[0]) and results[0]["aggregate_reward_score"] == 1.0
        assert is_flagged(results[2])  # reached with no time left: flagged, never a 0 taken for a score

    def test_a_hung_executed_code_hook_is_its_samples_error_and_the_batch_is_answered(self, release):
        """Before: the reward's ``executed_code`` hook (the user's function picking the code out of an answer) was
        called with no bound before any code ran: one that hung held the Lambda until it was killed."""
        import time

        from rewardpipe import Reward, component
        from rewardpipe.single_turn import is_flagged, score_samples

        @component(range=(0, 1), role="outcome", name="ran")
        def ran(completion):
            return 1.0

        def pick(transcript):
            if "hang" in transcript.assistant_texts[-1]:
                release.wait()
            return None  # no code to run: scored on the answer alone

        reward = Reward("r", [ran], needs_execution=True, executed_code=pick)
        samples = [_sample("ok", "fine"), _sample("stuck", "hang")]
        now = time.monotonic()
        # 5 s and 10 s (were 0.5 s and 1 s): the sample before the hang must be scored in them on a loaded machine
        results = score_samples(samples, reward, deadline=now + 5, answer_by=now + 10, error_reward="zero")
        assert [r["id"] for r in results] == ["ok", "stuck"]
        assert not is_flagged(results[0]) and results[0]["aggregate_reward_score"] == 1.0
        flags = {m["name"] for m in results[1]["metrics_list"] if m["name"].startswith("error_")}
        assert flags == {"error_deadline_exceeded"} and is_flagged(results[1])


class TestTheMainThreadsCallIsStoppedInPlace:
    """The reward Lambda's handler runs on the main thread. Bounding its scoring calls by running each in a thread of
    its own (above) broke every component that uses ``signal`` (``math_verify``'s parse/verify timeouts set SIGALRM
    handlers, which raise ``ValueError`` off the main thread: each sample ``scoring_failed``) and left a hung call
    running. On the main thread the call is now stopped by its interval timer, in place."""

    @staticmethod
    def _score(component, samples, seconds):
        import time

        from rewardpipe import Reward
        from rewardpipe.single_turn import score_samples

        return score_samples(
            samples, Reward("r", [component]), answer_by=time.monotonic() + seconds, error_reward="zero"
        )

    @staticmethod
    def _flags(result):
        return {m["name"] for m in result["metrics_list"] if m["name"].startswith("error_")}

    def test_a_component_using_sigalrm_scores_as_it_does_unbounded(self):
        import signal

        from rewardpipe import component

        @component(range=(0, 1), role="outcome", name="verified")
        def verified(completion):  # the shape of math_verify's timeout decorator
            def too_slow(signum, frame):
                raise TimeoutError

            previous = signal.signal(signal.SIGALRM, too_slow)
            signal.alarm(5)
            try:
                return 1.0 if "42" in completion else 0.0
            finally:
                signal.alarm(0)
                signal.signal(signal.SIGALRM, previous)

        results = self._score(verified, [_sample("right", "42"), _sample("wrong", "41")], 30)
        assert [self._flags(r) for r in results] == [set(), set()], results
        assert [r["aggregate_reward_score"] for r in results] == [1.0, 0.0]

    def test_a_hung_call_is_stopped_not_left_running_and_the_timer_is_put_back(self):
        import signal
        import time

        from rewardpipe import component
        from rewardpipe.single_turn import _SCORING_CALLS

        @component(range=(0, 1), role="outcome", name="spins")
        def spins(completion):
            started = time.monotonic()
            while "hang" in completion and time.monotonic() - started < 30:
                try:
                    sum(range(1000))
                except Exception:  # noqa: BLE001 - a catch-all of the component's own does not swallow the stop
                    return 0.0
            return 1.0

        before = _SCORING_CALLS.still_running()
        # The batch's 5 s is for the right answer first on a loaded machine (0.5 s was a budget its scheduling alone
        # could spend); the hung call spins 30 s, stopped at the deadline or failing the test.
        results = self._score(spins, [_sample("ok", "fine"), _sample("stuck", "hang")], 5)
        assert self._flags(results[0]) == set() and results[0]["aggregate_reward_score"] == 1.0
        assert self._flags(results[1]) == {"error_component_timeout"}
        assert _SCORING_CALLS.still_running() == before  # stopped, not abandoned in a thread
        assert signal.getsignal(signal.SIGALRM) is signal.SIG_DFL
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
