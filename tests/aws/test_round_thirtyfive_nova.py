"""Round thirty-five, single-turn scoring and the Nova Forge paths.

* The single-turn reward Lambda (``reward_lambda_arn``) lost a whole batch to one sample's id: an id taking
  megabytes in the answer (a request may hold 6 MB, and non-ASCII text is measured ASCII-escaped, up to three
  times its size) left the answer over Lambda's 6 MB synchronous response limit even with every diagnostic
  dropped, and ``fit_response`` refused the batch. The largest ids are now answered under a short stand-in,
  those samples flagged ``id_too_large``, every other sample scored and echoed as it came. A batch of too many
  samples for any answer to fit is refused before anything is read or scored.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.aws import harness
from tests.aws.handlers import Context
from tests.aws.test_round_thirtythree_nova import gsm8k, wire  # noqa: F401 - the fixture

#: Lambda Invoke: "For synchronous invocations, the maximum payload size is 6 MB" (request and response).
LAMBDA_SYNC_LIMIT = harness.LIMITS["lambda_sync_bytes"]


def _sample(sample_id, answer="#### 4", prompt="q"):
    return {
        "id": sample_id,
        "messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}],
        "reference_answer": "4",
    }


def _metrics(output) -> dict:
    return {m["name"]: m["value"] for m in output.get("metrics_list", [])}


def _answer_bytes(outputs) -> int:
    """The answer's size as the runtime may write it: ASCII-escaped (python3.11) or as UTF-8 (python3.12+)."""
    return max(len(json.dumps(outputs)), len(wire(outputs)))


class TestAnIdTooLargeToEchoCostsItsSampleOnly:
    def test_the_handler_keeps_under_lambdas_6_mb_response_limit(self, gsm8k):  # noqa: F811
        assert gsm8k.RESPONSE_LIMIT_BYTES <= LAMBDA_SYNC_LIMIT

    @pytest.mark.parametrize(
        "big_id",
        [
            "x" * (LAMBDA_SYNC_LIMIT - 400),  # an ASCII id filling the request: over the limit with its envelope
            "é" * (LAMBDA_SYNC_LIMIT // 2 - 400),  # 6 MB of UTF-8 in the request, 18 MB measured ASCII-escaped
            {"k": ["é" * 1000] * (LAMBDA_SYNC_LIMIT // 2010)},  # an id of any JSON shape
        ],
        ids=["ascii", "non-ascii", "object"],
    )
    def test_a_batch_with_one_huge_id_is_answered_whole_within_the_limit(self, gsm8k, big_id):  # noqa: F811
        event = [_sample("a"), _sample(big_id), _sample(7, "#### 5")]
        assert len(json.dumps(event, ensure_ascii=False).encode("utf-8")) <= LAMBDA_SYNC_LIMIT  # a request Lambda takes
        outputs = gsm8k.lambda_handler(event, Context())
        assert _answer_bytes(outputs) <= LAMBDA_SYNC_LIMIT
        assert [o["id"] for o in (outputs[0], outputs[2])] == ["a", 7]  # the others echoed as they came, scored
        assert [o["aggregate_reward_score"] for o in (outputs[0], outputs[2])] == [1.5, 0.5]
        stand_in = outputs[1]["id"]
        digest = hashlib.sha256(json.dumps(big_id, ensure_ascii=False).encode("utf-8")).hexdigest()[:32]
        assert isinstance(stand_in, str) and len(stand_in) < 200 and digest in stand_in
        flags = _metrics(outputs[1])
        assert flags["reward_error"] == 1 and flags["error_id_too_large"] == 1
        assert outputs[1]["aggregate_reward_score"] == 1.0  # neutral: the mean of its prompt's scored samples

    def test_only_as_many_ids_as_needed_largest_first_are_stood_in(self):
        from rewardpipe.single_turn import ids_too_large

        ids = ["s", "m" * 5_000, "l" * 20_000, "t"]
        assert ids_too_large(ids, 10**6) == {}  # fits: nothing changes
        assert set(ids_too_large(ids, 20_000)) == {2}
        assert set(ids_too_large(ids, 5_000)) == {1, 2}
        # over the limit by the number of samples alone: no stand-in is shorter, none is made
        assert ids_too_large(list(range(1000)), 1000) == {}

    @pytest.mark.parametrize("policy, score", [("zero", 0.0), ("neutral", 1.5)])
    def test_the_stand_in_sample_takes_the_error_reward_policy(self, policy, score):
        from rewardpipe.single_turn import score_samples

        outputs = score_samples(
            [_sample("a"), _sample("b" * 10_000)], "gsm8k", error_reward=policy, response_limit_bytes=5_000
        )
        assert outputs[0]["id"] == "a" and outputs[1]["aggregate_reward_score"] == score
        assert _metrics(outputs[1])["error_id_too_large"] == 1

    def test_a_batch_too_many_for_any_answer_to_fit_is_refused_before_anything_is_scored(self):
        """1.5 million ``{}`` fit a 6 MB request but no answer of one entry each fits 6 MB: they were all read and
        scored first (a minute, and past the function's memory), to end in the same ``ResponseTooLarge``."""
        from rewardpipe import Reward, component
        from rewardpipe.single_turn import ResponseTooLarge, score_samples

        called = []

        @component(range=(0, 1), role="outcome", name="counted")
        def counted(completion):
            called.append(completion)
            return 1.0

        with pytest.raises(ResponseTooLarge, match="1000 samples need at least"):
            score_samples([_sample(i) for i in range(1000)], Reward("r", [counted]), response_limit_bytes=30_000)
        assert called == []
        assert len(score_samples([_sample(i) for i in range(100)], Reward("r", [counted]), response_limit_bytes=30_000))

    def test_without_a_limit_ids_are_echoed_whatever_their_size(self):
        from rewardpipe.single_turn import score_samples

        big = "b" * 100_000
        assert score_samples([_sample(big)], "gsm8k")[0]["id"] == big


# A batch scored on the main thread (as the handler scores it) in a fresh interpreter, whose answer is printed: a
# component stuck in one C call took the interpreter with it, so the test bounds it from outside.
_STUCK_IN_C = """
import json, math, os, re, sys, time

from rewardpipe import Reward, component
from rewardpipe.single_turn import score_samples


@component(range=(0, 1), role="outcome", name="stuck", timeout_s=None if sys.argv[3] != "own-limit" else 1.0)
def stuck(completion):
    if "regex" in completion:  # catastrophic backtracking: about 2**40 steps in one call of the C engine
        re.match(r"(a+)+$", "a" * 40 + "b")
    if "factorial" in completion:  # one C call of big-integer arithmetic
        math.factorial(10**8)
    return 1.0


samples = [
    {"id": name, "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": name}]}
    for name in ("fine", sys.argv[2], "after")
]
if sys.argv[3] == "forked" and os.fork() != 0:  # scored in a forked child (the parent only waits for it)
    sys.exit(os.wait()[1])
results = score_samples(samples, Reward("r", [stuck]), answer_by=time.monotonic() + float(sys.argv[1]))
print(json.dumps(results), flush=True)
"""


@pytest.mark.parametrize(
    ("stuck", "where"), [("regex", "main"), ("factorial", "main"), ("regex", "forked"), ("regex", "own-limit")]
)
def test_a_component_stuck_in_one_c_call_costs_its_sample_not_the_batch(stuck, where):
    """The batch's deadline on the main thread was sent by a watching thread, which never got the interpreter lock
    back from a call stuck in C: a regex backtracking or ``math.factorial(10**8)`` in a component ran until Lambda
    killed the invocation, every sample of the batch lost. A kernel timer now sends the stop; those C calls check
    for signals, so the stop lands in them, and each such sample is its own ``component_timeout``. In a forked
    child too (timers are not inherited: the child makes its own, aimed at its own thread). A component with its own
    ``timeout_s`` ran in a thread of its own, whose stuck C call held the lock from the main thread: within the
    batch's deadline it is now stopped in place too, at its own limit, and the batch goes on."""
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-c", _STUCK_IN_C, "3", stuck, where], capture_output=True, text=True, timeout=300, check=False
    )
    assert run.returncode == 0, run.stderr[-2000:]
    results = {r["id"]: r for r in json.loads(run.stdout.splitlines()[-1])}
    assert results["fine"]["aggregate_reward_score"] == 1.0 and _metrics(results["fine"])["reward_error"] == 0
    assert _metrics(results[stuck])["error_component_timeout"] == 1, results[stuck]
    if where == "own-limit":  # stopped at its own limit, with the batch's time left for the next sample
        assert results["after"]["aggregate_reward_score"] == 1.0 and _metrics(results["after"])["reward_error"] == 0
    else:
        assert _metrics(results["after"])["error_deadline_exceeded"] == 1  # its turn came with the batch's time up


def test_a_component_with_a_longer_limit_of_its_own_is_stopped_at_the_batchs_deadline():
    """Stopped in place within the batch's deadline, a component whose own ``timeout_s`` is later than the batch's
    time left is stopped at the batch's deadline, as the batch's own call (``component_timeout``), and the rest of
    the batch is answered at once."""
    import time

    from rewardpipe import Reward, component
    from rewardpipe.single_turn import score_samples

    @component(range=(0, 1), role="outcome", name="slow", timeout_s=600)
    def slow(completion):
        started = time.monotonic()
        while "slow" in completion and time.monotonic() - started < 20:
            sum(range(1000))
        return 1.0

    samples = [_sample("fine", "fine"), _sample("slow", "slow"), _sample("after", "after")]
    samples = [{**s, "messages": [s["messages"][0], {"role": "assistant", "content": s["id"]}]} for s in samples]
    results = score_samples(samples, Reward("r", [slow]), answer_by=time.monotonic() + 1.0, error_reward="zero")
    assert results[0]["aggregate_reward_score"] == 1.0 and _metrics(results[0])["reward_error"] == 0
    assert _metrics(results[1])["error_component_timeout"] == 1, results[1]  # not its 1.0 twenty seconds later
    assert _metrics(results[2])["error_deadline_exceeded"] == 1
