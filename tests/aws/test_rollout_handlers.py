"""The rollout-step handlers and the code runners, called directly with moto S3: happy paths that
the state machine test does not isolate, and malformed events (each must fail loudly, naming the
field, so the state machine's Catch turns it into an error record)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from pydantic import ValidationError

from rewardpipe.models import load_tasks
from tests.aws import harness
from tests.aws.handlers import Context, load

BUCKET = "rollout-test-records"
TASK = load_tasks(harness.ROOT / "rewardpipe" / "data" / "tasks.jsonl")[0]


@pytest.fixture
def bucket(aws, monkeypatch):
    import boto3

    from rewardpipe.store import S3Store

    s3 = boto3.client("s3", region_name=harness.REGION)
    s3.create_bucket(Bucket=BUCKET)
    monkeypatch.setenv("BUCKET", BUCKET)
    monkeypatch.setenv("REWARD_NAME", "ask_before_coding")
    monkeypatch.setenv("ROUTING_THRESHOLD_S", "600")
    return S3Store(BUCKET, client=s3)


def _started(bucket, **policy) -> dict:
    handler = load("rollout_start")
    event = {"run": "r", "step": 2, "group": "g", "rollout": "x", "task": TASK.model_dump(mode="json"),
             "policy": policy or {"mode": "replay", "turns": [f"```python\n{TASK.reference_solution}\n```"]}}
    return handler.lambda_handler(event, Context())


def test_start_stores_an_inline_task_and_opens_the_episode(bucket):
    ctx = _started(bucket)
    assert ctx["task_key"] == f"tasks/inline/r/{TASK.task_id}.json"
    assert bucket.get_json(ctx["task_key"])["tests"] == TASK.tests
    assert ctx["state"]["next_action"] == "policy" and ctx["state"]["step"] == 2
    assert ctx["state"]["messages"] == [{"role": "user", "content": TASK.prompt}]


def test_start_reads_a_task_by_key(bucket):
    bucket.put_json("tasks/shared/t1.json", TASK.model_dump(mode="json"))
    ctx = load("rollout_start").lambda_handler(
        {"run": "r", "group": "g", "rollout": "y", "task_key": "tasks/shared/t1.json",
         "policy": {"mode": "callback"}}, Context())
    assert ctx["state"]["task_id"] == TASK.task_id and ctx["policy"]["mode"] == "callback"


@pytest.mark.parametrize("event, field", [
    ({"group": "g", "rollout": "x", "task_key": "tasks/a.json"}, "run"),
    ({"run": "r", "group": "g", "rollout": "x"}, "task"),
    ({"run": "r", "group": "g", "rollout": "x", "task_key": "secrets/a.json"}, "task_key"),
    ({"run": "r", "step": -1, "group": "g", "rollout": "x", "task_key": "tasks/a.json"}, "step"),
    ({"run": "r", "group": "g", "rollout": "x", "task_key": "tasks/a.json", "policy": {"mode": "replay"}}, "turns"),
    ({"run": "r", "group": "g", "rollout": "x", "task_key": "tasks/a.json", "policy": {"mode": "psychic"}}, "mode"),
    ({"run": "r", "group": "g", "rollout": "x", "task": {"task_id": "t"}}, "prompt"),
])
def test_start_rejects_malformed_input_naming_the_field(bucket, event, field):
    with pytest.raises(ValidationError) as info:
        load("rollout_start").lambda_handler(event, Context())
    assert field in str(info.value)


def test_a_missing_task_object_is_a_clear_error(bucket):
    with pytest.raises(FileNotFoundError, match="tasks/none.json"):
        load("rollout_start").lambda_handler(
            {"run": "r", "group": "g", "rollout": "x", "task_key": "tasks/none.json"}, Context())


@pytest.mark.parametrize("handler", ["policy_turn", "simulator_turn", "prepare_execution", "score_rollout"])
def test_step_handlers_reject_a_context_without_state(bucket, handler):
    with pytest.raises(ValidationError) as info:
        load(handler).lambda_handler({"run": "r", "step": 0, "group": "g", "rollout": "x", "task_key": "tasks/a.json",
                                      "policy": {"mode": "callback"}}, Context())
    assert "state" in str(info.value)


def test_callback_reply_must_carry_text(bucket):
    ctx = _started(bucket, mode="callback")
    ctx["policy_reply"] = {"answer": "no text field"}
    with pytest.raises(ValueError, match="text"):
        load("policy_turn").lambda_handler(ctx, Context())


def test_prepare_routes_by_time_budget_and_writes_the_job(bucket, monkeypatch):
    ctx = load("policy_turn").lambda_handler(_started(bucket), Context())
    assert ctx["state"]["next_action"] == "execute"
    prepared = load("prepare_execution").lambda_handler(ctx, Context())
    execution = prepared["execution"]
    assert execution["route"] == "lambda" and execution["timeout_s"] == (TASK.timeout_s or 10.0)
    job = bucket.get_json(execution["job_key"])
    assert job["code"].strip() == TASK.reference_solution.strip() and job["tests"] == TASK.tests
    monkeypatch.setenv("ROUTING_THRESHOLD_S", "1")  # same job, lower threshold: Fargate
    assert load("prepare_execution").lambda_handler(ctx, Context())["execution"]["route"] == "fargate"


def test_code_runner_lambda_writes_a_result_and_score_reads_it(bucket):
    ctx = load("prepare_execution").lambda_handler(load("policy_turn").lambda_handler(_started(bucket), Context()), Context())
    summary = load("code_runner").lambda_handler(
        {"job_key": ctx["execution"]["job_key"], "result_key": ctx["execution"]["result_key"]}, Context())
    assert summary["status"] == "passed" and summary["passed"] == summary["total"] > 0
    assert "stdout" not in summary  # the model's output stays out of logs and the execution history
    out = load("score_rollout").lambda_handler(ctx, Context())
    assert out["status"] == "scored" and out["record_key"] == "runs/r/step=2/group=g/x.json"
    assert {m["name"]: m["value"] for m in out["metrics_list"]}["correctness"] == 1.0


def test_score_without_a_runner_result_raises_execution_result_missing(bucket):
    from rewardpipe.aws.rollout import ExecutionResultMissing

    ctx = load("prepare_execution").lambda_handler(load("policy_turn").lambda_handler(_started(bucket), Context()), Context())
    with pytest.raises(ExecutionResultMissing, match="left no result"):
        load("score_rollout").lambda_handler(ctx, Context())


@pytest.mark.parametrize("event", [{}, {"job_key": "jobs/a/job.json"}, {"job_key": "", "result_key": "jobs/r.json"}])
def test_code_runner_rejects_malformed_requests(bucket, event):
    with pytest.raises(ValidationError):
        load("code_runner").lambda_handler(event, Context())


def test_code_runner_refuses_keys_outside_the_jobs_prefix(bucket):
    with pytest.raises(ValueError, match="jobs/"):
        load("code_runner").lambda_handler({"job_key": "runs/x.json", "result_key": "jobs/r.json"}, Context())


@pytest.mark.parametrize("event, kind", [
    ("not even an object", "start_error"),
    ({"run": "r", "group": "g", "rollout": "z", "error": {"Error": "ValidationError", "Cause": "bad"}}, "bad_input"),
    ({"run": 5, "step": "two", "group": None, "rollout": "z2", "error": "junk"}, "start_error"),
])
def test_error_record_handler_always_writes_a_record(bucket, event, kind):
    out = load("error_record").lambda_handler(event, Context())
    assert out["status"] == "error" and out["aggregate_reward_score"] == 0.0
    record = bucket.get_json(out["record_key"])
    assert record["status"] == "error" and record["aggregate"] is None and record["error"]["kind"] == kind
    assert set(record["components"]) == {"correctness", "asked_before_coding", "guessed_immediately", "loop_penalty"}


def test_error_record_uses_the_episode_phase_and_lambda_error_message(bucket):
    ctx = _started(bucket)
    ctx["error"] = {"Error": "EndpointError", "Cause": json.dumps({"errorType": "EndpointError", "errorMessage": "HTTP 503"})}
    out = load("error_record").lambda_handler(ctx, Context())
    record = bucket.get_json(out["record_key"])
    assert record["error"] == {"kind": "policy_error", "message": "EndpointError: EndpointError: HTTP 503"}
    assert record["task_id"] == TASK.task_id and record["step"] == 2


# -- the Fargate container's entry point ------------------------------------------------------------


def _entry(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(harness.ROOT / "containers" / "code_runner" / "entry.py")],
                          env={"PATH": os.environ["PATH"], "PYTHONPATH": str(harness.ROOT), **env},
                          capture_output=True, text=True, timeout=120)


def test_container_entry_point_names_missing_configuration():
    proc = _entry({"BUCKET": "b"})
    assert proc.returncode == 2
    assert "JOB_KEY" in proc.stderr and "RESULT_KEY" in proc.stderr


def test_container_entry_point_fails_without_writing_a_result_when_the_job_is_missing(bucket):
    url = harness.start_server()
    proc = _entry({"BUCKET": BUCKET, "JOB_KEY": "jobs/none/job.json", "RESULT_KEY": "jobs/none/result.json",
                   "AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                   "AWS_DEFAULT_REGION": harness.REGION})
    assert proc.returncode == 1 and "no execution job" in proc.stderr
    assert bucket.get_json("jobs/none/result.json", default=None) is None


def test_credentials_are_scrubbed_and_the_process_made_non_dumpable():
    code = ("import os, json\n"
            "os.environ['AWS_SECRET_ACCESS_KEY'] = 's'; os.environ['AWS_CONTAINER_CREDENTIALS_RELATIVE_URI'] = '/x'\n"
            "from rewardpipe.aws.hardening import scrub_credentials, make_non_dumpable, is_dumpable\n"
            "removed = scrub_credentials(os.environ)\n"
            "ok = make_non_dumpable()\n"
            "print(json.dumps([sorted(removed), ok, is_dumpable(), [k for k in os.environ if k.startswith('AWS_')]]))\n")
    proc = subprocess.run([sys.executable, "-c", code], env={"PATH": os.environ["PATH"], "PYTHONPATH": str(harness.ROOT)},
                          capture_output=True, text=True, timeout=60)
    removed, ok, dumpable, left = json.loads(proc.stdout)
    assert removed == ["AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_SECRET_ACCESS_KEY"] and left == []
    if sys.platform.startswith("linux"):
        assert ok is True and dumpable is False


# -- the OpenAI-compatible policy ------------------------------------------------------------------


@pytest.fixture
def chat_endpoint():
    """A local OpenAI-compatible /chat/completions endpoint that records what it was sent."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
            reply = json.dumps({"choices": [{"message": {"role": "assistant", "content": "Which format do you want?"},
                                             "finish_reason": "stop"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", seen
    server.shutdown()


def test_openai_policy_turn_calls_the_endpoint_with_the_key_from_secrets_manager(bucket, chat_endpoint, monkeypatch):
    import boto3

    url, seen = chat_endpoint
    boto3.client("secretsmanager", region_name=harness.REGION).create_secret(Name="policy-key", SecretString="sk-test")
    monkeypatch.setenv("POLICY_API_KEY_SECRET", "policy-key")
    monkeypatch.setenv("POLICY_MODEL", "default-model")
    ctx = _started(bucket, mode="openai", base_url=url)
    out = load("policy_turn").lambda_handler(ctx, Context())
    assert out["state"]["messages"][-1] == {"role": "assistant", "content": "Which format do you want?"}
    assert out["state"]["next_action"] == "simulator" and out["state"]["turn_kinds"] == ["question"]
    (call,) = seen
    assert call["path"] == "/v1/chat/completions" and call["auth"] == "Bearer sk-test"
    assert call["body"]["model"] == "default-model"
    # The policy sees the conversation, never the hidden spec or tests.
    assert any(m == {"role": "user", "content": TASK.prompt} for m in call["body"]["messages"])
    sent = " ".join(m["content"] for m in call["body"]["messages"])
    assert TASK.tests not in sent and all(item not in sent for item in TASK.spec)


def test_an_unreachable_endpoint_fails_the_step_loudly(bucket):
    ctx = _started(bucket, mode="openai", base_url="http://127.0.0.1:9/v1", model="m")
    from rewardpipe.aws.lambda_support import TransientError
    from rewardpipe.openai_client import EndpointError

    # Raised under the name the state machine retries; after the retries its Catch records a policy_error.
    with pytest.raises(TransientError) as info:
        load("policy_turn").lambda_handler(ctx, Context())
    assert isinstance(info.value.__cause__, EndpointError)


def _client_error(code: str):
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code, "Message": "m"}}, "PutObject")


@pytest.mark.parametrize("code, transient", [("SlowDown", True), ("ThrottlingException", True), ("503", True),
                                              ("InternalError", True), ("AccessDenied", False), ("NoSuchBucket", False)])
def test_transient_faults_are_recognised_through_the_cause_chain(code, transient):
    from rewardpipe.aws.lambda_support import is_transient
    from rewardpipe.store import StoreError

    try:
        try:
            raise _client_error(code)
        except Exception as inner:
            raise StoreError(f"S3 error {code}") from inner
    except StoreError as outer:
        assert is_transient(outer) is transient


def test_s3_throttling_in_a_step_surfaces_as_transient_error(bucket, monkeypatch):
    from rewardpipe.aws import settings as settings_module
    from rewardpipe.aws.lambda_support import TransientError

    ctx = _started(bucket)

    class Throttled:
        def __getattr__(self, name):
            def call(*args, **kwargs):
                raise _client_error("SlowDown")
            return call

    monkeypatch.setitem(settings_module._CLIENTS, "s3", Throttled())
    with pytest.raises(TransientError, match="SlowDown"):
        load("simulator_turn").lambda_handler({**ctx, "state": {**ctx["state"], "next_action": "simulator"}}, Context())
