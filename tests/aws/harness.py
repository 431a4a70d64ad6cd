"""A mini-deployer and in-process AWS for the tests: the synthesized template, made real in moto.

* :func:`synthesized` — ONE synth of the real app per test process (cached), shared by tests/infra
  and tests/aws.
* :func:`install_patches` — moto monkeypatches, applied per test through pytest's monkeypatch:
  - Lambda: ``LambdaSimpleBackend.invoke`` runs the function's real handler in-process (the zipped
    asset moto holds is unpacked and imported), with the function's environment applied under a
    lock; an exception becomes ``FunctionError: Unhandled`` with errorType/errorMessage as on AWS.
  - Step Functions: moto 5.2.5 leaves the request/response normalisation of service integrations
    empty, so ``ecs:runTask.sync`` (and the SQS message body) reach boto3 in the wrong shape; fill it
    in from the botocore service model.
  - Step Functions: moto 5.2.5 drops SendTaskFailure's ``cause`` (AWS passes it to the Catch as
    ``Cause``, up to 32,768 characters; the conversation states leave their loop with it): pass it on.
  - Step Functions: StartExecution refuses an input over 256 KiB with ValidationException, as AWS does;
    so does SendTaskSuccess an output over 256 KiB. moto's own state-size check counts non-ASCII text as
    its JSON escapes; it counts UTF-8, as AWS does.
  - ECS: ``run_task`` runs the code-runner container's entry point (containers/code_runner/entry.py)
    as a **subprocess** with the container's environment and overrides, talking to a moto server
    thread over HTTP (it shares the in-process backends), and records its exit code.
* AWS limits moto does not enforce, checked on every call and every execution (:data:`LIMITS`); a
  breach is appended to :data:`LIMIT_VIOLATIONS` and fails the test at teardown
  (:func:`check_limits`): Step Functions state input/output, execution input and task results over
  256 KiB, executions over 25,000 history events, synchronous Lambda payloads over 6 MB,
  asynchronous ones over 1 MB, SQS messages over the queue's maximum (and SQS refuses, as AWS does, a message
  holding a character outside the set it allows), S3 object keys over 1,024 bytes (refused with
  ``KeyTooLongError``), SNS messages whose body and attributes exceed 256 KiB or whose subject SNS refuses, and
  ECS RunTask overrides over 8,192 characters.
* :class:`Deployment` — creates the template's bucket, functions, cluster, task definition, network,
  queue and state machine in moto, resolving the intrinsic functions the definition uses.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import io
import itertools
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    from tests.aws import iam
except ImportError:  # this file loaded by path (benchmarks/cost.py --root <a checkout without it>)
    import importlib.util as _importlib_util

    _spec = _importlib_util.spec_from_file_location("rewardpipe_test_iam", Path(__file__).with_name("iam.py"))
    iam = _importlib_util.module_from_spec(_spec)
    sys.modules[_spec.name] = iam
    _spec.loader.exec_module(iam)  # type: ignore[union-attr]

ROOT = Path(__file__).resolve().parents[2]
# The user package every AWS path is tested with (issue 20): a pip-installable project the tests import from
# its directory (on sys.path, see use_user_package), as a deployment imports it from its layer.
USER_PACKAGE = ROOT / "tests" / "fixtures" / "acme_rewards"
REGION = "us-east-1"
ACCOUNT = "123456789012"
STATE_MACHINE_NAME = "rewardpipe-rollout"
MOTO_CONFIG = {"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}

TEST_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
    "POWERTOOLS_TRACE_DISABLED": "1",
    "POWERTOOLS_SERVICE_NAME": "rewardpipe",
    "POWERTOOLS_METRICS_NAMESPACE": "RewardPipe",
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
}


def use_user_package() -> None:
    """Make the user package fixture importable in this process (the in-process Lambdas import it)."""
    if str(USER_PACKAGE) not in sys.path:
        sys.path.insert(0, str(USER_PACKAGE))


def user_code_env(
    environment: str | None = None,
    reward: str | None = None,
    single_turn_reward: str | None = None,
    components: Any = None,
    version: str | None = None,
) -> dict[str, Any]:
    """The variables the stack sets on the functions that import user code (docs: the issue 20 contract):
    ``ENVIRONMENT_REF``/``ENVIRONMENT_VERSION``, ``REWARD_REF``, ``SINGLE_TURN_REWARD_REF`` and, on the variance
    check, ``REWARD_COMPONENTS`` (a Reward's describe() as the JSON list). Until the stack sets them from
    cdk.json, the tests set them on the deployed functions with :class:`Deployment`'s ``function_env`` (a None
    value removes a variable the template sets: MAX_TURNS, which a user environment's own limit replaces)."""
    env: dict[str, Any] = {}
    if environment:
        env["ENVIRONMENT_REF"] = environment
        env["MAX_TURNS"] = None  # no max_turns in cdk.json: the environment's own turn limit
    if version:
        env["ENVIRONMENT_VERSION"] = version
    if reward:
        env["REWARD_REF"] = reward
        env["REWARD_WEIGHTS"] = "{}"  # the template's weights are the built-in reward's; the user's own weights stand
    if single_turn_reward:
        env["SINGLE_TURN_REWARD_REF"] = single_turn_reward
        env["REWARD_WEIGHTS"] = "{}"
    if components is not None:
        described = components.describe() if hasattr(components, "describe") else components
        env["REWARD_COMPONENTS"] = json.dumps(
            [
                {"name": name, "range": list(info["range"]), "role": info["role"], "weight": info["weight"]}
                for name, info in described.items()
            ]
        )
    return env


def apply_test_env() -> None:
    """Only what synthesis needs, process-wide (the Makefile exports it too). The fake AWS account is
    set per test by the ``aws`` fixture, so other tests in the same worker never see it."""
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")


def alarm_inbox() -> tuple[Any, str, str]:
    """An SNS topic ``alarms`` delivering raw messages to an SQS queue ``alarm-inbox`` (inside the ``aws``
    fixture): (the SQS client, the topic's ARN, the queue's URL), for a test to read the alarms a check sent."""
    import boto3

    sns = boto3.client("sns", region_name=REGION)
    sqs = boto3.client("sqs", region_name=REGION)
    topic = sns.create_topic(Name="alarms")["TopicArn"]
    queue = sqs.create_queue(QueueName="alarm-inbox")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn, Attributes={"RawMessageDelivery": "true"})
    return sqs, topic, queue


# --------------------------------------------------------------------------------------------------
# One synth per process


@dataclass
class Synth:
    app: Any
    stack: Any
    template: dict
    outdir: Path
    assertions: Any  # aws_cdk.assertions.Template


# The Lambda architecture whose compiled modules this interpreter can load (None: neither).
NATIVE_ARCHITECTURE = {"x86_64": "x86_64", "aarch64": "arm64"}.get(__import__("platform").machine())


def architecture_context(architecture: str) -> str:
    """CDK context (for :func:`synthesized`) deploying every function on ``architecture``."""
    return json.dumps({"rewardpipe": {"lambda": {"architecture": architecture}}}, sort_keys=True)


# CDK context enabling the Nova bridge (its queues, functions and alarm), for checks that must hold in
# every configuration of the stack.
# A second job role (the user's own) that may invoke the rollout proxy, so the resource policy it adds is tested.
NOVA_INVOKER_ROLE = "arn:aws:iam::210987654321:role/my-nova-job"
NOVA_BRIDGE_CONTEXT = json.dumps(
    {"rewardpipe_nova": {"enabled": True, "rollout_timeout_s": 600, "invoker_role_arns": [NOVA_INVOKER_ROLE]}},
    sort_keys=True,
)


@functools.cache
def synthesized(context_json: str = "") -> Synth:
    """The app synthesized once per process; ``context_json`` (a JSON object of CDK context, e.g. enabling
    the Nova bridge) gives a second, separately cached synth."""
    from tests.synth_group import check_may_synthesize

    check_may_synthesize()
    apply_test_env()
    sys.path.insert(0, str(ROOT)) if str(ROOT) not in sys.path else None
    from aws_cdk.assertions import Template

    from app import build_app

    outdir = Path(tempfile.mkdtemp(prefix="rewardpipe-cdk-"))
    import atexit

    atexit.register(shutil.rmtree, outdir, True)
    app, stack = build_app(json.loads(context_json) if context_json else None, outdir=str(outdir))
    assembly = app.synth()
    template = assembly.get_stack_artifact(stack.artifact_id).template
    return Synth(app=app, stack=stack, template=template, outdir=outdir, assertions=Template.from_stack(stack))


def asset_dir(synth: Synth, logical_id: str) -> Path:
    """The staged asset directory of a Lambda function or layer (its S3 key is ``<hash>.zip``)."""
    props = synth.template["Resources"][logical_id]["Properties"]
    code = props.get("Code") or props.get("Content")
    asset_hash = str(code["S3Key"]).split(".", 1)[0]
    return synth.outdir / f"asset.{asset_hash}"


# --------------------------------------------------------------------------------------------------
# Patches


_ENV_LOCK = threading.RLock()
# Function variables the process did not have before an invocation; removed when the test ends.
ADDED_ENV: set[str] = set()
_MODULES: dict[str, Any] = {}
SERVER: dict[str, Any] = {}
# Faults the tests inject: function name substring -> exception to raise instead of running the handler.
LAMBDA_FAULTS: dict[str, BaseException] = {}
# Faults of the Lambda service itself: function name substring -> (error code, HTTP status) answers the Invoke API
# gives, one per invocation, before the function runs again (a VPC function woken from Inactive answers
# ResourceNotReadyException, 502, "Wait for the VPC connection to reestablish and try again").
LAMBDA_SERVICE_FAULTS: dict[str, list[tuple[str, int]]] = {}
# AWS service limits the harness enforces (moto enforces none of them).
LIMITS = {
    # Step Functions quotas: "Maximum input or output size for a task, state, or execution: 256 KiB of
    # data as a UTF-8 encoded string" and "Maximum execution history size: 25,000 events".
    # https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html
    "sfn_payload_bytes": 262_144,
    "sfn_history_events": 25_000,
    "sfn_error_chars": 256,
    "sfn_cause_chars": 32_768,
    # Lambda Invoke API: "For synchronous invocations, the maximum payload size is 6 MB. For
    # asynchronous invocations, the maximum payload size is 1 MB."
    # https://docs.aws.amazon.com/lambda/latest/dg/API_Invoke.html
    "lambda_sync_bytes": 6 * 1024 * 1024,
    "lambda_async_bytes": 1024 * 1024,
    # SQS SendMessage MessageBody: "The maximum size is 1 MiB or 1,048,576 bytes" (raised from 256 KiB
    # in 2025); a queue's MaximumMessageSize attribute can lower it, and is then what applies.
    # https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html
    "sqs_message_bytes": 1_048_576,
    # Lambda: "Environment variables: 4 KB, for all environment variables associated with the function, in
    # aggregate" (keys and values). https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html
    "lambda_env_bytes": 4096,
    # CloudWatch Dimension: "Dimension values must contain only ASCII characters and must include at least one
    # non-whitespace character. ASCII control characters are not supported as part of dimension values", length
    # 1 to 1024; "You can assign up to 30 dimensions to a metric".
    # https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_Dimension.html
    "cw_dimension_value_chars": 1024,
    "cw_dimensions": 30,
    # S3: "The object key name consists of a sequence of Unicode characters encoded in UTF-8, with a maximum length
    # of 1,024 bytes"; the prefix and delimiter count. https://docs.aws.amazon.com/AmazonS3/latest/userguide/object-keys.html
    "s3_key_bytes": 1024,
    # SNS Publish: the message is "at most 256 KB in size (262,144 bytes, not 262,144 characters)", and "all parts of
    # the message attribute, including name, type, and value, are included in the message size restriction"; a
    # subject is ASCII, with no line breaks or control characters, at most 100 characters.
    # https://docs.aws.amazon.com/sns/latest/api/API_Publish.html
    "sns_message_bytes": 262_144,
    "sns_subject_chars": 100,
    # ECS RunTask: "A total of 8192 characters are allowed for overrides. This limit includes the JSON formatting
    # characters of the override structure." https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_RunTask.html
    "ecs_overrides_chars": 8192,
}
# Every breach seen during the current test, as "what: size > limit" strings.
LIMIT_VIOLATIONS: list[str] = []
# Executions a test breached a limit with on purpose (to prove the check sees it); not checked again.
CHECKED: set[str] = set()
# Every in-process Lambda invocation: (function name, CPU seconds of its own thread), excluding nested
# invocations and the time moto spends serving its AWS calls in that thread (on AWS that is the
# service's work, not the function's); botocore's client-side work stays in.
INVOCATION_CPU: list[tuple[str, float]] = []
_NESTED = threading.local()
# Every ECS container run: {"argv", "env", "returncode", "stdout", "stderr"}.
CONTAINER_RUNS: list[dict[str, Any]] = []
# Environment overrides the tests inject into the next container runs (e.g. to make one crash).
CONTAINER_FAULT_ENV: dict[str, str] = {}


class _Context:
    def __init__(self, fn: Any) -> None:
        self.function_name = fn.function_name
        self.function_version = "$LATEST"
        self.invoked_function_arn = fn.function_arn
        self.memory_limit_in_mb = int(fn.memory_size or 128)
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{fn.function_name}"
        self.log_stream_name = "test"
        self._deadline = time.time() + float(fn.timeout or 3)

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.time()) * 1000))


def _extracted(code: bytes, digest: str) -> Path:
    """The function's zip, unpacked once per content into a directory every process may share. This /tmp is the
    host's: the suite's other xdist process (and other checkouts' runs) unpack the same code there at the same time.
    Each unpacks into a directory of its own and renames it into place whole, so no process ever imports from a
    half-written directory (checking for the directory, then making and filling it, let the other process see it
    empty: a flaky import error, or ``FileExistsError`` from two makers)."""
    target = Path(tempfile.gettempdir()) / "rewardpipe-lambda-code" / digest
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    unpacked = Path(tempfile.mkdtemp(prefix=f".{digest}-", dir=target.parent))
    try:
        with zipfile.ZipFile(io.BytesIO(code)) as zf:
            zf.extractall(unpacked)
        unpacked.chmod(0o755)  # (mkdtemp's 0700 would keep the code from another uid's run)
        os.rename(unpacked, target)
    except OSError:
        if not target.exists():  # a failure of our own; else another process's rename came first: theirs is whole
            raise
    finally:
        shutil.rmtree(unpacked, ignore_errors=True)
    return target


def _handler_for(fn: Any) -> Any:
    digest = hashlib.sha256(fn.code_bytes).hexdigest()[:16]
    # A function whose configuration changed is initialised again, as on Lambda (a handler reads its settings
    # at INIT: another ENVIRONMENT_REF is another environment).
    config = hashlib.sha256(json.dumps(fn.environment_vars or {}, sort_keys=True).encode()).hexdigest()[:16]
    key = f"{fn.function_name}:{digest}:{config}"
    module = _MODULES.get(key)
    if module is None:
        target = _extracted(fn.code_bytes, digest)
        module_file, _, _attr = fn.handler.rpartition(".")
        spec = importlib.util.spec_from_file_location(f"lambda_{digest}_{module_file}", target / f"{module_file}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        _MODULES[key] = module
    return getattr(module, fn.handler.rpartition(".")[2])


def invoke_in_process(fn: Any, payload: Any, response_headers: dict[str, Any]) -> bytes:
    from rewardpipe.aws.settings import reset_clients

    with _ENV_LOCK:
        overlay = {k: str(v) for k, v in (fn.environment_vars or {}).items()}
        saved = {k: os.environ.get(k) for k in overlay}
        os.environ.update(overlay)  # only the function's own variables change; nothing is ever cleared
        reset_clients()
        try:
            for pattern, fault in LAMBDA_FAULTS.items():
                if pattern in fn.function_name:
                    raise fault
            handler = _handler_for(fn)
            stack = _NESTED.__dict__.setdefault("stack", [])
            stack.append(0.0)  # CPU to subtract: nested invocations and moto's serving of the handler's calls
            started = time.thread_time()
            try:
                with iam.calling_as(function_caller(fn.function_name)):
                    result = handler(payload, _Context(fn))
            finally:
                spent = time.thread_time() - started
                served = stack.pop()  # a nested invocation is inside a served call (_patch_moto_serving)
                INVOCATION_CPU.append((fn.function_name, spent - served))
            # As the python3.12+ runtime's marshaller writes the answer (awslambdaric: ensure_ascii=False, then
            # UTF-8): an answer holding a lone surrogate cannot be sent, and fails the invocation.
            body = json.dumps(result, ensure_ascii=False).encode("utf-8")
        except Exception as exc:  # noqa: BLE001 - reported the way Lambda reports it
            response_headers["x-amz-function-error"] = "Unhandled"
            error = {"errorMessage": str(exc), "errorType": type(exc).__name__, "stackTrace": []}
            body = json.dumps(error).encode("utf-8")
        finally:
            for key, value in saved.items():
                if value is None:
                    # Deleting a variable while another thread (a trainer in the test) iterates os.environ
                    # raises KeyError there, so a variable the test did not have stays until the test ends.
                    ADDED_ENV.add(key)
                else:
                    os.environ[key] = value
            reset_clients()
    return body


# --------------------------------------------------------------------------------------------------
# IAM: who is calling (tests/aws/iam.py checks each call against that principal's policies in the template)

# The deployments of the current test; a function invoked in-process is found in one of them by its name.
DEPLOYMENTS: list[Deployment] = []


def function_caller(function_name: str) -> iam.Caller | None:
    """The principal of a deployed function (None: not one of the template's, so not checked)."""
    for deployment in DEPLOYMENTS:
        for logical, name in deployment.functions.items():
            if name == function_name:
                return deployment.caller(logical)
    return None


def _derived(cfn_type: str, attrs: dict[str, str]) -> dict[str, str]:
    """The other attributes of a resource whose ``Ref`` the test knows (what CloudFormation would return)."""
    ref = attrs.get("Ref")
    if not ref:
        return attrs
    derived: dict[str, str] = {}
    if cfn_type == "AWS::S3::Bucket":
        derived = {"Arn": f"arn:aws:s3:::{ref}"}
    elif cfn_type == "AWS::SQS::Queue":
        name = ref.rstrip("/").rsplit("/", 1)[-1]
        derived = {"QueueName": name, "Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"}
    elif cfn_type == "AWS::Lambda::Function":
        derived = {"Arn": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{ref}"}
    elif cfn_type == "AWS::StepFunctions::StateMachine":
        derived = {"Arn": ref, "Name": ref.rsplit(":", 1)[-1]}
    elif cfn_type == "AWS::SNS::Topic":
        derived = {"TopicArn": ref, "TopicName": ref.rsplit(":", 1)[-1]}
    return {**derived, **attrs}


def environment_bindings(template: dict, logical: str, env: Any = None) -> dict[str, dict[str, str]]:
    """What a function called directly by a test knows of its resources: each of its environment variables
    that the template sets to a ``Ref``/``Fn::GetAtt`` names that resource's value in this test."""
    env = os.environ if env is None else env
    variables = template["Resources"][logical].get("Properties", {}).get("Environment", {}).get("Variables", {})
    bound: dict[str, dict[str, str]] = {}
    for variable, intrinsic in variables.items():
        value = env.get(variable)
        if not value or not isinstance(intrinsic, dict):
            continue
        if "Ref" in intrinsic and intrinsic["Ref"] in template["Resources"]:
            bound.setdefault(intrinsic["Ref"], {})["Ref"] = value
        elif "Fn::GetAtt" in intrinsic:
            target, attr = intrinsic["Fn::GetAtt"]
            bound.setdefault(target, {})[attr] = value
    return {k: _derived(template["Resources"][k]["Type"], v) for k, v in bound.items()}


# The CDK context of the stack whose functions a test calls directly (tests/aws/handlers.py) when it is not
# the default one: a test of a setting that changes a function's grants sets it (monkeypatch) to that synth's.
DIRECT_CONTEXT = ""


def function_for_folder(folder: str) -> tuple[str, str]:
    return _function_for_folder(folder, DIRECT_CONTEXT)


@functools.cache
def _function_for_folder(folder: str, direct_context: str) -> tuple[str, str]:
    """(synth context, logical id) of the template function whose code is ``functions/<folder>``: the test's
    synth first (:data:`DIRECT_CONTEXT`), then the one with the Nova bridge."""
    source = (ROOT / "functions" / folder / "handler.py").read_bytes()
    for context in (direct_context, NOVA_BRIDGE_CONTEXT):
        synth = synthesized(context)
        for logical, resource in synth.template["Resources"].items():
            if (
                resource["Type"] == "AWS::Lambda::Function"
                and str(resource["Properties"].get("Runtime", "")).startswith("python")
                and (asset_dir(synth, logical) / "handler.py").read_bytes() == source
            ):
                return context, logical
    raise LookupError(f"no function of the template runs functions/{folder}")


def folder_caller(folder: str) -> iam.Caller:
    """The principal of the template function whose code is ``functions/<folder>``, for a handler a test calls
    directly: its resources are those of the test's deployment, else what its environment names."""

    def resolve() -> tuple[iam.TemplateModel, str]:
        context, logical = function_for_folder(folder)
        template = synthesized(context).template
        deployed = next((d for d in DEPLOYMENTS if d.synth is synthesized(context)), None)

        def lookup(target: str, attr: str) -> str | None:
            if deployed is not None and attr in deployed.refs.get(target, {}):
                return deployed.refs[target][attr]
            return environment_bindings(template, logical).get(target, {}).get(attr)

        return iam.TemplateModel(template, lookup, REGION, ACCOUNT), logical

    return iam.Caller(f"functions/{folder}", resolve)


def _state_machine_caller() -> iam.Caller | None:
    # Only a deployment that is complete: an execution an earlier test left waiting can wake up while this
    # test is still deploying (its calls then meet a moto account without its functions, and fail there).
    machines = [
        (d, logical)
        for d in DEPLOYMENTS
        if d.state_machine_arn
        for logical in d.of_type("AWS::StepFunctions::StateMachine")
    ]
    return machines[0][0].caller(machines[0][1]) if len(machines) == 1 else None


def _patch_sfn_role() -> list[tuple[Any, str, Any]]:
    """A state machine's own calls (invoking the functions, running the Fargate task) are made with its role.
    moto's interpreter makes them in threads of its own, with clients keyed "ak"
    (moto.stepfunctions.parser.asl.utils.boto_client): those are the deployed state machine's."""
    iam.KEY_CALLERS["ak"] = _state_machine_caller
    return []


def _patch_moto_serving() -> list[tuple[Any, str, Any]]:
    """Charge the thread CPU moto spends answering an AWS call to moto, not to the calling handler."""
    from moto.core.botocore_stubber import BotocoreStubber

    original = BotocoreStubber.process_request

    def process_request(self, request):
        stack = _NESTED.__dict__.get("stack")
        if not stack:
            return original(self, request)
        started = time.thread_time()
        try:
            return original(self, request)
        finally:
            stack[-1] += time.thread_time() - started

    return [(BotocoreStubber, "process_request", process_request)]


def _patch_lambda() -> list[tuple[Any, str, Any]]:
    from moto.awslambda_simple.models import LambdaSimpleBackend

    def invoke(self, function_name, qualifier, body, headers, response_headers):
        fn = self.get_function(function_name, qualifier)  # raises ResourceNotFound like AWS
        for pattern, faults in LAMBDA_SERVICE_FAULTS.items():
            if pattern in fn.function_name and faults:
                from moto.core.exceptions import JsonRESTError

                code, status = faults.pop(0)
                fault = JsonRESTError(code, f"{code} (injected by the test)")
                fault.code = status
                raise fault
        asynchronous = (headers or {}).get(
            "X-Amz-Invocation-Type", (headers or {}).get("x-amz-invocation-type")
        ) == "Event"
        limit = LIMITS["lambda_async_bytes" if asynchronous else "lambda_sync_bytes"]
        kind = "asynchronous" if asynchronous else "synchronous"
        if _size(body) > limit:
            # What Lambda answers (HTTP 413): the function never runs. Recorded too: nothing we ship may send one.
            from moto.core.exceptions import JsonRESTError

            class RequestTooLarge(JsonRESTError):
                code = 413

            _check_size(f"{kind} Lambda request to {fn.function_name}", _size(body), limit)
            raise RequestTooLarge(
                "RequestTooLargeException",
                f"Request must be smaller than {limit} bytes for the "
                f"{'InvokeAsync' if asynchronous else 'Invoke'} operation",
            )
        payload = json.loads(body) if body else {}
        response = invoke_in_process(fn, payload, response_headers)
        _check_size(f"Lambda response of {fn.function_name}", len(response), LIMITS["lambda_sync_bytes"])
        return response

    return [(LambdaSimpleBackend, "invoke", invoke)]


def _env_size(env: dict[str, str]) -> int:
    return sum(len(k.encode("utf-8")) + len(str(v).encode("utf-8")) for k, v in env.items())


def _size(body: Any) -> int:
    if body is None:
        return 0
    return len(body if isinstance(body, (bytes, bytearray)) else str(body).encode("utf-8"))


def _data_size(value: Any) -> int:
    """Bytes of a state's data as Step Functions holds it: the JSON value as UTF-8 text. moto writes the data in
    its histories and descriptions with ``json.dumps``' ``\\u`` escapes (six bytes for a CJK character); AWS
    counts the characters themselves, as they were sent (a string that is not JSON counts as it is)."""
    if not isinstance(value, str):
        return _size(value)
    try:
        data = json.loads(value)
    except (ValueError, RecursionError):
        return _size(value)
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return len(text.encode("utf-8", "backslashreplace"))  # a lone surrogate: 6 bytes, as its escape


def _check_size(what: str, size: int, limit: int) -> None:
    if size > limit:
        LIMIT_VIOLATIONS.append(f"{what}: {size} bytes > {limit}")


# SQS SendMessage: "A message can include only XML, JSON, and unformatted text. The following Unicode characters
# are allowed: #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF. Any characters not
# included in this list will be rejected." (InvalidMessageContents; moto takes any text.)
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html
SQS_REFUSED_CHARACTERS = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _patch_sqs() -> list[tuple[Any, str, Any]]:
    from moto.sqs.exceptions import SQSException
    from moto.sqs.models import SQSBackend

    original = SQSBackend.send_message

    def send_message(self, queue_name, message_body, message_attributes=None, *args, **kwargs):
        refused = SQS_REFUSED_CHARACTERS.search(message_body) if isinstance(message_body, str) else None
        if refused:
            raise SQSException(
                "InvalidMessageContents",
                f"Invalid characters found. Invalid character found at index {refused.start()}: {refused.group()!a}",
            )
        queue = self.get_queue(queue_name)
        limit = min(
            LIMITS["sqs_message_bytes"],
            int(getattr(queue, "maximum_message_size", None) or LIMITS["sqs_message_bytes"]),
        )
        attributes = sum(_size(k) + _size(json.dumps(v)) for k, v in (message_attributes or {}).items())
        _check_size(f"SQS message to {queue_name}", _size(message_body) + attributes, limit)
        return original(self, queue_name, message_body, message_attributes, *args, **kwargs)

    return [(SQSBackend, "send_message", send_message)]


def _patch_s3_keys() -> list[tuple[Any, str, Any]]:
    """S3 refuses an object key over 1,024 UTF-8 bytes (``KeyTooLongError``, HTTP 400); moto stores it."""
    from moto.s3.exceptions import S3ClientError
    from moto.s3.models import S3Backend

    class KeyTooLong(S3ClientError):
        code = "KeyTooLongError"

        def __init__(self, size: int) -> None:
            super().__init__(
                "KeyTooLongError", f"Your key is too long ({size} bytes, at most {LIMITS['s3_key_bytes']})"
            )

    def checked(original: Any, position: int) -> Any:
        def method(self, *args, **kwargs):
            key = args[position] if len(args) > position else kwargs.get("key_name", kwargs.get("dest_key_name"))
            if isinstance(key, str) and len(key.encode("utf-8", "surrogatepass")) > LIMITS["s3_key_bytes"]:
                _check_size(
                    f"S3 object key {key[:60]!r}...", len(key.encode("utf-8", "surrogatepass")), LIMITS["s3_key_bytes"]
                )
                raise KeyTooLong(len(key.encode("utf-8", "surrogatepass")))
            return original(self, *args, **kwargs)

        return method

    return [
        (S3Backend, "put_object", checked(S3Backend.put_object, 1)),
        (S3Backend, "create_multipart_upload", checked(S3Backend.create_multipart_upload, 1)),
    ]


def sns_publish_problem(message: Any, subject: Any, attributes: dict[str, Any] | None) -> str | None:
    """Why SNS would refuse a Publish (:data:`LIMITS`: the message and its attributes' names, types and values
    in UTF-8 bytes; the subject's rules), or None."""
    size = _size(message)
    for name, value in (attributes or {}).items():
        size += _size(name) + _size(value.get("Type") or value.get("DataType") or "")
        size += _size(value.get("Value") or value.get("StringValue") or value.get("BinaryValue") or "")
    if size > LIMITS["sns_message_bytes"]:
        return f"SNS message and attributes: {size} bytes > {LIMITS['sns_message_bytes']}"
    if subject is not None and (
        not isinstance(subject, str)
        or not 1 <= len(subject) <= LIMITS["sns_subject_chars"]
        or not subject.isascii()
        or not subject.isprintable()
        or subject.startswith(" ")  # it begins with a letter, a number or a punctuation mark
    ):
        return f"SNS subject {subject!r:.120}: not 1 to {LIMITS['sns_subject_chars']} printable ASCII characters"
    return None


def _patch_sns() -> list[tuple[Any, str, Any]]:
    """SNS refuses a message whose body and attributes exceed 256 KiB (UTF-8 bytes) with InvalidParameter; moto
    counts the body's characters only and none of the attributes."""
    from moto.sns.exceptions import SNSInvalidParameter
    from moto.sns.models import SNSBackend

    original = SNSBackend.publish

    def publish(self, message, arn, phone_number=None, subject=None, message_attributes=None, *args, **kwargs):
        problem = sns_publish_problem(message, subject, message_attributes)
        if problem is not None:
            LIMIT_VIOLATIONS.append(problem)
            raise SNSInvalidParameter(f"Invalid parameter: {problem}")
        return original(self, message, arn, phone_number, subject, message_attributes, *args, **kwargs)

    return [(SNSBackend, "publish", publish)]


_PAYLOAD_FIELDS = ("input", "output", "parameters", "result")


def history_violations(sfn: Any, execution_arn: str) -> list[str]:
    """Step Functions limits breached by one execution, read from its history."""
    found = []
    events: list[dict] = []
    token = None
    while True:
        page = sfn.get_execution_history(
            executionArn=execution_arn, maxResults=1000, **({"nextToken": token} if token else {})
        )
        events += page["events"]
        token = page.get("nextToken")
        if not token:
            break
    name = execution_arn.rsplit(":", 1)[-1]
    if len(events) > LIMITS["sfn_history_events"]:
        found.append(f"execution {name}: {len(events)} history events > {LIMITS['sfn_history_events']}")
    for event in events:
        for key, details in event.items():
            if not (isinstance(details, dict) and key.endswith("EventDetails")):
                continue
            for field_name in _PAYLOAD_FIELDS:
                value = details.get(field_name)
                if isinstance(value, str) and _data_size(value) > LIMITS["sfn_payload_bytes"]:
                    where = details.get("name") or event.get("type")
                    found.append(
                        f"execution {name}: {event['type']} {where} {field_name} is {_data_size(value)} bytes "
                        f"> {LIMITS['sfn_payload_bytes']}"
                    )
    return found


def dimension_problem(value: Any) -> str | None:
    """Why CloudWatch would refuse ``value`` as a dimension value (:data:`LIMITS`), or None."""
    if not isinstance(value, str) or not 1 <= len(value) <= LIMITS["cw_dimension_value_chars"]:
        return f"{value!r:.80}: not a string of 1 to {LIMITS['cw_dimension_value_chars']} characters"
    if not value.isascii() or not value.isprintable() or not value.strip():
        return f"{value!r:.80}: not ASCII, holds a control character or has no non-whitespace character"
    return None


def converse_problem(request: dict[str, Any]) -> str | None:
    """Why Bedrock Converse would refuse ``request`` for an Anthropic model, or None (moto has no Converse, and
    botocore's Stubber checks only the shapes). A blank text block: "The text field in the ContentBlock object
    ... is blank"; messages must alternate, start with the user's and (Anthropic's current models, which take no
    prefill) end with the user's; and a stop sequence of whitespace only: "each stop sequence must contain
    non-whitespace" (ValidationException each)."""
    blocks = [*request.get("system", []), *(b for m in request.get("messages", []) for b in m["content"])]
    if any(not block["text"].strip() for block in blocks):
        return "a blank text block"
    roles = [message["role"] for message in request.get("messages", [])]
    if not roles or roles[0] != "user" or any(a == b for a, b in itertools.pairwise(roles)):
        return f"messages must alternate from the user's: {roles}"
    if roles[-1] == "assistant":  # older models take a prefill, if it does not end with whitespace
        return "This model does not support assistant message prefill. The conversation must end with a user message."
    stops = request.get("inferenceConfig", {}).get("stopSequences", [])
    if "anthropic." in request.get("modelId", "") and any(not stop.strip() for stop in stops):
        return "stop_sequences: each stop sequence must contain non-whitespace"
    return None


def metric_value_problem(value: Any) -> str | None:
    """CloudWatch's MetricDatum Value: "Values must be in the range of 8.515920e-109 to 1.174271e+108 (Base 10)
    ... special values (for example, NaN, +Infinity, -Infinity) are not supported"; 0 is a value.
    https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_MetricDatum.html"""
    values = value if isinstance(value, list) else [value]
    for one in values:
        if isinstance(one, bool) or not isinstance(one, (int, float)) or not math.isfinite(one):
            return f"{one!r:.40}: not a finite number"
        if one != 0 and not 8.515920e-109 <= abs(one) <= 1.174271e108:
            return f"{one!r}: magnitude outside 8.515920e-109 to 1.174271e+108"
    return None


def cloudwatch_statistic_sets(stdout: str, period_s: int = 60) -> dict[tuple[str, tuple[tuple[str, str], ...]], dict]:
    """The statistic sets CloudWatch keeps for the EMF documents printed to ``stdout``: per metric (name and its
    dimensions) and per period (the document's timestamp rounded down to ``period_s``), every datapoint of that
    period aggregated into one set: SampleCount, Sum, Minimum, Maximum (an alarm's Average is Sum / SampleCount).
    Two points for one period are one set of two samples, not two values: a Sum and a SampleCount double, a
    Maximum keeps the larger. moto's CloudWatch stores each PutMetricData datum as it came and EMF lines never
    reach it here, so this is the service's rule, written down for the tests that read what an alarm reads."""
    sets: dict[tuple[str, tuple[tuple[str, str], ...]], dict] = {}
    for line in stdout.splitlines():
        if not line.startswith('{"_aws"'):
            continue
        doc = json.loads(line)
        period = doc["_aws"]["Timestamp"] // 1000 // period_s * period_s
        for directive in doc["_aws"]["CloudWatchMetrics"]:
            for dimension_set in directive["Dimensions"]:
                dims = tuple(sorted((name, str(doc[name])) for name in dimension_set))
                for metric in directive["Metrics"]:
                    values = doc[metric["Name"]]
                    for value in values if isinstance(values, list) else [values]:
                        stats = sets.setdefault((metric["Name"], dims), {}).setdefault(
                            period, {"SampleCount": 0, "Sum": 0.0, "Minimum": value, "Maximum": value}
                        )
                        stats["SampleCount"] += 1
                        stats["Sum"] += value
                        stats["Minimum"] = min(stats["Minimum"], value)
                        stats["Maximum"] = max(stats["Maximum"], value)
    return sets


def emf_violations(stdout: str) -> list[str]:
    """CloudWatch's rules broken by the EMF documents printed to ``stdout``: every dimension a directive names
    must be present with a value CloudWatch accepts, at most 30 of them, and every metric's value must be one
    CloudWatch takes. Powertools drops a blank dimension (with a warning) and passes anything else on;
    CloudWatch refuses the metric."""
    found = []
    for line in stdout.splitlines():
        if not line.startswith('{"_aws"'):
            continue
        doc = json.loads(line)
        for directive in doc["_aws"]["CloudWatchMetrics"]:
            for metric in directive["Metrics"]:
                problem = metric_value_problem(doc.get(metric["Name"]))
                if problem:
                    found.append(f"metric {metric['Name']} value {problem}")
            for dimension_set in directive["Dimensions"]:
                if len(dimension_set) > LIMITS["cw_dimensions"]:
                    found.append(f"{len(dimension_set)} dimensions > {LIMITS['cw_dimensions']}")
                for name in dimension_set:
                    problem = dimension_problem(doc.get(name))
                    if problem:
                        metrics = [m["Name"] for m in directive["Metrics"]]
                        found.append(f"metric {metrics} dimension {name}: {problem}")
    return found


def check_limits() -> list[str]:
    """Every limit breach of the test: the calls seen, plus the histories of every execution in the account."""
    import boto3

    sfn = boto3.client("stepfunctions", region_name=REGION)
    found = list(LIMIT_VIOLATIONS)
    for machine in sfn.list_state_machines()["stateMachines"]:
        for execution in sfn.list_executions(stateMachineArn=machine["stateMachineArn"])["executions"]:
            if execution["executionArn"] in CHECKED:
                continue
            desc = sfn.describe_execution(executionArn=execution["executionArn"])
            _check = [
                (f"execution {execution['name']} input", desc.get("input")),
                (f"execution {execution['name']} output", desc.get("output")),
            ]
            found += [
                f"{what}: {_data_size(v)} bytes > {LIMITS['sfn_payload_bytes']}"
                for what, v in _check
                if isinstance(v, str) and _data_size(v) > LIMITS["sfn_payload_bytes"]
            ]
            found += history_violations(sfn, execution["executionArn"])
    return found


def _patch_sfn_normalisation() -> list[tuple[Any, str, Any]]:
    import botocore.session
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service import (
        StateTaskService,
    )
    from moto.stepfunctions.parser.utils import camel_to_snake_case

    session = botocore.session.get_session()

    @functools.cache
    def operation(service: str, action: str) -> Any:
        model = session.get_service_model(service)
        for name in model.operation_names:
            if camel_to_snake_case(name) == action:
                return model.operation_model(name)
        return None

    def normalise_parameters(self, parameters, boto_service_name=None, service_action_name=None):
        op = operation(
            self._get_boto_service_name(boto_service_name), self._get_boto_service_action(service_action_name)
        )
        if op is not None and op.input_shape is not None:
            self._to_boto_request(parameters, op.input_shape)

    def normalise_response(self, response, boto_service_name=None, service_action_name=None):
        op = operation(
            self._get_boto_service_name(boto_service_name), self._get_boto_service_action(service_action_name)
        )
        if op is not None and op.output_shape is not None:
            self._from_boto_response(response, op.output_shape)

    return [
        (StateTaskService, "_normalise_parameters", normalise_parameters),
        (StateTaskService, "_normalise_response", normalise_response),
    ]


def _patch_sfn_task_failure() -> list[tuple[Any, str, Any]]:
    from moto.core.responses import ActionResult, EmptyResult
    from moto.stepfunctions.responses import StepFunctionResponse

    def send_task_failure(self) -> ActionResult:
        # SendTaskFailure: "error" at most 256 characters, "cause" at most 32,768
        # (https://docs.aws.amazon.com/step-functions/latest/apireference/API_SendTaskFailure.html)
        _check_size("SendTaskFailure error", len(self._get_param("error") or ""), LIMITS["sfn_error_chars"])
        _check_size("SendTaskFailure cause", len(self._get_param("cause") or ""), LIMITS["sfn_cause_chars"])
        self.stepfunction_backend.send_task_failure(
            self._get_param("taskToken"), error=self._get_param("error"), cause=self._get_param("cause")
        )
        return EmptyResult()

    return [(StepFunctionResponse, "send_task_failure", send_task_failure)]


def _patch_sfn_start_execution() -> list[tuple[Any, str, Any]]:
    """StartExecution refuses an input over 256 KiB, as AWS does (moto starts it): the API reference gives
    ``input`` a "Maximum length of 262144" in UTF-8 bytes, and Step Functions reports a violated length
    constraint as ValidationException "1 validation error detected: ... failed to satisfy constraint"
    (moto's own message for an over-long name). No execution exists afterwards, so the caller's error
    is the only trace."""
    from moto.stepfunctions.exceptions import ValidationException
    from moto.stepfunctions.responses import StepFunctionResponse

    original = StepFunctionResponse.start_execution

    def start_execution(self):
        if _size(self._get_param("input")) > LIMITS["sfn_payload_bytes"]:
            raise ValidationException(
                "1 validation error detected: Value at 'input' failed to satisfy constraint: Member must have "
                f"length less than or equal to {LIMITS['sfn_payload_bytes']}"
            )
        return original(self)

    return [(StepFunctionResponse, "start_execution", start_execution)]


def _patch_sfn_state_quota() -> list[tuple[Any, str, Any]]:
    """moto's own state-size check (States.DataLimitExceeded) counts a state's data as ``json.dumps`` writes it,
    non-ASCII text as ``\\u`` escapes: it fails a state of 50,000 CJK characters (150 KB as UTF-8) that AWS
    runs. Count "256 KiB of data as a UTF-8 encoded string", as the quota page states it."""
    import importlib

    def is_within_size_quota(value: Any) -> bool:
        size = _size(value) if isinstance(value, str) else _data_size(json.dumps(value, default=str))
        return size < LIMITS["sfn_payload_bytes"]

    modules = (
        "moto.stepfunctions.parser.quotas",
        "moto.stepfunctions.parser.asl.component.state.state",
        "moto.stepfunctions.parser.asl.component.state.exec.state_task.state_task_lambda",
        "moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service",
    )
    return [(importlib.import_module(name), "is_within_size_quota", is_within_size_quota) for name in modules]


def _patch_sfn_task_success() -> list[tuple[Any, str, Any]]:
    """SendTaskSuccess refuses an ``output`` over 256 KiB, as AWS does (moto takes any size): the API reference
    gives ``output`` a "Maximum length of 262144" and the quota counts it "as a UTF-8 encoded string". The
    string counted is the one the caller sent: JSON whose non-ASCII text is written as ``\\u`` escapes
    (``json.dumps``' default) is up to six times the text's size."""
    from moto.stepfunctions.exceptions import ValidationException
    from moto.stepfunctions.responses import StepFunctionResponse

    original = StepFunctionResponse.send_task_success

    def send_task_success(self):
        if _size(self._get_param("output")) > LIMITS["sfn_payload_bytes"]:
            raise ValidationException(
                "1 validation error detected: Value at 'output' failed to satisfy constraint: Member must have "
                f"length less than or equal to {LIMITS['sfn_payload_bytes']}"
            )
        return original(self)

    return [(StepFunctionResponse, "send_task_success", send_task_success)]


def _patch_ecs() -> list[tuple[Any, str, Any]]:
    from moto.ecs.models import EC2ContainerServiceBackend

    original = EC2ContainerServiceBackend.run_task

    def run_task(self, cluster_str, task_definition_str, count, overrides, *args, **kwargs):
        size = len(json.dumps(overrides or {}, separators=(",", ":")))
        if size > LIMITS["ecs_overrides_chars"]:
            from moto.ecs.exceptions import InvalidParameterException

            _check_size("ECS RunTask overrides", size, LIMITS["ecs_overrides_chars"])
            raise InvalidParameterException(
                f"Container Overrides length must be at most {LIMITS['ecs_overrides_chars']}"
            )
        tasks = original(self, cluster_str, task_definition_str, count, overrides, *args, **kwargs)
        task_def = self.describe_task_definition(task_definition_str)
        overrides_by_name = {o.get("name"): o for o in (overrides or {}).get("containerOverrides", [])}
        principal = _task_principal(task_def.arn)
        for task in tasks:
            for container in task_def.container_definitions:
                env = {e["name"]: e["value"] for e in container.get("environment", [])}
                env.update(
                    {e["name"]: e["value"] for e in overrides_by_name.get(container["name"], {}).get("environment", [])}
                )
                CONTAINER_RUNS.append(run_container(env, principal=principal))
                for c in getattr(task, "containers", []) or []:
                    if isinstance(c, dict):
                        c["exitCode"] = CONTAINER_RUNS[-1]["returncode"]
        return tasks

    return [(EC2ContainerServiceBackend, "run_task", run_task)]


def _task_principal(task_definition_arn: str) -> dict | None:
    """The task role of a deployed task definition, frozen for the container process (tests/aws/iam.py)."""
    for deployment in DEPLOYMENTS:
        for logical in deployment.of_type("AWS::ECS::TaskDefinition"):
            if deployment.refs.get(logical, {}).get("Ref") == task_definition_arn:
                return iam.frozen_principal(deployment.iam_model, logical, f"{logical} (task role)")
    return None


# Puts the IAM check into the container process before its own code runs (tests/aws/iam.py, install_in_child).
_CHILD_IAM = """import os
if os.environ.get("REWARDPIPE_IAM_PRINCIPAL"):
    from tests.aws import iam
    iam.install_in_child(os.environ["REWARDPIPE_IAM_PRINCIPAL"], os.environ["REWARDPIPE_IAM_DENIALS"])
"""


def run_container(env: dict[str, str], principal: dict | None = None) -> dict[str, Any]:
    """Run the code-runner container's entry point as its own process, like Fargate would. With ``principal``
    (its task role, :func:`iam.frozen_principal`) every AWS call it makes is authorized as that role, and a
    denied one fails the test like a denied call of a function."""
    with tempfile.TemporaryDirectory(prefix="rewardpipe-iam-") as iam_dir:
        iam_env: dict[str, str] = {}
        if principal is not None:
            Path(iam_dir, "sitecustomize.py").write_text(_CHILD_IAM)
            Path(iam_dir, "principal.json").write_text(json.dumps(principal))
            iam_env = {
                "REWARDPIPE_IAM_PRINCIPAL": str(Path(iam_dir, "principal.json")),
                "REWARDPIPE_IAM_DENIALS": str(Path(iam_dir, "denials.jsonl")),
            }
        run = _run_container(env, iam_env, iam_dir if principal is not None else None)
        denials = Path(iam_dir, "denials.jsonl")
        if denials.exists():
            iam.DENIALS.extend(json.loads(line) for line in denials.read_text().splitlines() if line.strip())
    return run


def _run_container(env: dict[str, str], iam_env: dict[str, str], site_dir: str | None) -> dict[str, Any]:
    child_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": os.pathsep.join([*([site_dir] if site_dir else []), str(ROOT)]),
        **iam_env,
        "AWS_ENDPOINT_URL": SERVER["url"],
        "AWS_DEFAULT_REGION": REGION,
        # What Fargate gives a task: a credentials endpoint. Here: static test keys plus a fake
        # relative URI, so the test can check the entry point scrubs both before running model code.
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/v2/credentials/fake-task-role",
        **env,
        **CONTAINER_FAULT_ENV,
    }
    argv = [sys.executable, str(ROOT / "containers" / "code_runner" / "entry.py")]
    with tempfile.TemporaryDirectory(prefix="rewardpipe-scratch-") as scratch:
        if child_env.get("TMPDIR") == "/scratch":  # the task's scratch volume, fresh per task as on Fargate
            # The image's /scratch is 0755 (mkdir + chown in the Dockerfile); mkdtemp's 0700 would keep the
            # sandbox's dropped uid out whenever this test process runs as root without a mount namespace.
            os.chmod(scratch, 0o755)
            child_env["TMPDIR"] = scratch
        proc = subprocess.run(argv, env=child_env, capture_output=True, text=True, timeout=300)
    return {"argv": argv, "env": env, "returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}


def start_server() -> str:
    if "url" not in SERVER:
        from moto.server import ThreadedMotoServer

        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        SERVER.update(server=server, url=f"http://{host}:{port}")
    return SERVER["url"]


def install_stop_execution_patch(monkeypatch: Any) -> None:
    """StopExecution as on AWS: the execution is aborted at once, even while a task waits for its token.

    moto 5.2.5 marks the program stopped but leaves a ``waitForTaskToken`` task blocked on its callback until
    the task's own timeout, so the execution stays RUNNING (and sends no status change) for up to that
    long; waking the callback instead makes the task time out and run its Catch path, which AWS never does
    after a stop. So the execution is marked ABORTED (with its stop date) at once, and the blocked worker
    thread (a daemon) may never change that status when it ends. Opt-in (tests that stop waiting
    executions call it), so the other tests keep stock behaviour.
    """
    from moto.stepfunctions.parser.api import ExecutionStatus
    from moto.stepfunctions.parser.backend.execution import BaseExecutionWorkerCommunication, Execution

    original_stop = Execution.stop
    original_reflect = BaseExecutionWorkerCommunication._reflect_execution_status

    def stop(self, stop_date, error, cause):
        original_stop(self, stop_date=stop_date, error=error, cause=cause)
        if self.exec_status == ExecutionStatus.RUNNING:
            self.exec_status, self.stop_date = ExecutionStatus.ABORTED, stop_date
            self.error, self.cause = error, cause

    def reflect(self):
        if self.execution.exec_status != ExecutionStatus.ABORTED:
            original_reflect(self)

    monkeypatch.setattr(Execution, "stop", stop)
    monkeypatch.setattr(BaseExecutionWorkerCommunication, "_reflect_execution_status", reflect)


def install_patches(monkeypatch: Any) -> None:
    """Apply the moto patches for one test (``monkeypatch`` undoes them afterwards, so other
    tests in the same worker see stock moto)."""
    for target, name, value in (
        *_patch_lambda(),
        *_patch_sfn_normalisation(),
        *_patch_sfn_task_failure(),
        *_patch_sfn_start_execution(),
        *_patch_sfn_task_success(),
        *_patch_sfn_state_quota(),
        *_patch_ecs(),
        *_patch_sqs(),
        *_patch_s3_keys(),
        *_patch_sns(),
        *_patch_moto_serving(),
        *_patch_sfn_role(),
        *iam.patch_botocore(),
    ):
        monkeypatch.setattr(target, name, value)
    DEPLOYMENTS.clear()
    iam.reset()


# --------------------------------------------------------------------------------------------------
# Mini-deployer


@dataclass
class Deployment:
    synth: Synth
    bucket: str = "rewardpipe-test-records"
    refs: dict[str, dict[str, str]] = field(default_factory=dict)
    functions: dict[str, str] = field(default_factory=dict)  # logical id -> function name
    state_machine_arn: str = ""
    topic_arn: str = ""
    queue_url: str = ""
    # Variables added to every deployed Python function but the code runner (which never imports user code):
    # what the stack will set from cdk.json's environment/reward settings (user_code_env).
    function_env: dict[str, Any] = field(default_factory=dict)

    # -- intrinsic functions ---------------------------------------------------------------------

    def resolve(self, value: Any) -> Any:
        if isinstance(value, dict) and len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref":
                return {
                    "AWS::Partition": "aws",
                    "AWS::Region": REGION,
                    "AWS::AccountId": ACCOUNT,
                    "AWS::URLSuffix": "amazonaws.com",
                }.get(arg) or self.refs[arg]["Ref"]
            if key == "Fn::GetAtt":
                logical, attr = arg if isinstance(arg, list) else arg.split(".", 1)
                return self.refs[logical][attr]
            if key == "Fn::Join":
                sep, parts = arg
                return sep.join(str(self.resolve(p)) for p in parts)
        if isinstance(value, dict):
            return {k: self.resolve(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        return value

    def of_type(self, cfn_type: str) -> dict[str, dict]:
        return {k: v for k, v in self.synth.template["Resources"].items() if v["Type"] == cfn_type}

    # -- deploy ----------------------------------------------------------------------------------

    def lookup(self, logical: str, attr: str) -> str | None:
        return self.refs.get(logical, {}).get(attr)

    @functools.cached_property
    def iam_model(self) -> iam.TemplateModel:
        return iam.TemplateModel(self.synth.template, self.lookup, REGION, ACCOUNT)

    def caller(self, logical: str) -> iam.Caller:
        """The principal of one of the template's functions, task definitions, state machines or managed
        policies, for :func:`iam.calling_as`."""
        return iam.Caller(logical, lambda: (self.iam_model, logical))

    def deploy(self) -> Deployment:
        import boto3

        DEPLOYMENTS.append(self)
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket=self.bucket)
        for logical in self.of_type("AWS::S3::Bucket"):
            self.refs[logical] = {"Ref": self.bucket, "Arn": f"arn:aws:s3:::{self.bucket}"}

        sns = boto3.client("sns", region_name=REGION)
        for logical in self.of_type("AWS::SNS::Topic"):
            self.topic_arn = sns.create_topic(Name=f"rewardpipe-alarms-{logical[-8:]}")["TopicArn"]
            self.refs[logical] = {"Ref": self.topic_arn, "TopicArn": self.topic_arn}

        sqs = boto3.client("sqs", region_name=REGION)
        queues = self.of_type("AWS::SQS::Queue")
        # Dead-letter queues first: a FIFO queue's redrive policy names its DLQ's ARN.
        for logical in sorted(queues, key=lambda q: "RedrivePolicy" in queues[q]["Properties"]):
            url = self._create_queue(sqs, logical, queues[logical]["Properties"])
            arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
            self.refs[logical] = {"Ref": url, "Arn": arn, "QueueName": url.rsplit("/", 1)[-1]}
            if logical.startswith("RolloutWorkflowTurnRequests") and "Dlq" not in logical:
                self.queue_url = url  # the trainers' turn queue (the Nova bridge has its own)

        self._deploy_network()
        self._deploy_ecs()
        # Functions may name the state machine (its ARN in their environment) and the state machine names the
        # functions: its ARN is known before it exists (moto's ARN is a function of its name).
        for logical, resource in self.of_type("AWS::StepFunctions::StateMachine").items():
            # The template's name: grants on the machine's executions are written with it.
            name = str(resource["Properties"].get("StateMachineName") or STATE_MACHINE_NAME)
            arn = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{name}"
            self.refs[logical] = {"Ref": arn, "Arn": arn, "Name": name}
        self._deploy_functions()
        self._deploy_state_machine()
        return self

    def _create_queue(self, sqs: Any, logical: str, props: dict) -> str:
        """A queue as the template declares it. FIFO queues (the Nova bridge's) keep their name (".fifo" is
        how AWS and moto tell FIFO apart), deduplication mode, visibility timeout, size limit and redrive
        policy; other queues are created by logical id with moto's defaults, as they always were."""
        if not props.get("FifoQueue"):
            return sqs.create_queue(QueueName=logical)["QueueUrl"]
        attributes = {
            "FifoQueue": "true",
            "ContentBasedDeduplication": str(bool(props.get("ContentBasedDeduplication"))).lower(),
        }
        for key in (
            "VisibilityTimeout",
            "MaximumMessageSize",
            "MessageRetentionPeriod",
            "DeduplicationScope",
            "FifoThroughputLimit",
        ):
            if key in props:
                attributes[key] = str(props[key])
        if "RedrivePolicy" in props:
            attributes["RedrivePolicy"] = json.dumps(self.resolve(props["RedrivePolicy"]))
        return sqs.create_queue(QueueName=str(self.resolve(props["QueueName"])), Attributes=attributes)["QueueUrl"]

    def output(self, key: str) -> Any:
        """A stack output's value, resolved against the deployed resources."""
        return self.resolve(self.synth.template["Outputs"][key]["Value"])

    def expire_objects(self, written_before: Any, age_days: float) -> list[str]:
        """Run the records bucket's lifecycle expiration as S3 would once the objects last written before
        ``written_before`` (a datetime) are ``age_days`` old; returns the keys expired. moto never runs a lifecycle
        rule, so without this a test cannot see an object the template lets S3 delete while the code still needs it.

        S3: "Expiration actions ... the number of days after object creation", counted from the current version's
        last write; on a versioned bucket expiring the current version adds a delete marker (what ``delete_object``
        does here). https://docs.aws.amazon.com/AmazonS3/latest/userguide/intro-lifecycle-rules.html
        The records bucket is the one that logs to another; a rule filtering by anything but a key prefix fails
        loudly rather than be guessed."""
        import boto3

        buckets = self.of_type("AWS::S3::Bucket")
        (records,) = [b for b in buckets.values() if "LoggingConfiguration" in b["Properties"]]
        rules = records["Properties"].get("LifecycleConfiguration", {}).get("Rules", [])
        due = []
        for rule in rules:
            if rule.get("Status") != "Enabled" or "ExpirationInDays" not in rule or rule["ExpirationInDays"] > age_days:
                continue
            if set(rule) - {"Id", "Status", "Prefix", "ExpirationInDays", "Transitions"}:
                raise NotImplementedError(f"lifecycle rule {rule.get('Id')}: only prefix filters are simulated")
            due.append(rule.get("Prefix", ""))
        s3 = boto3.client("s3", region_name=REGION)
        expired = []
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket):
            for obj in page.get("Contents", []):
                if obj["LastModified"] < written_before and any(obj["Key"].startswith(p) for p in due):
                    expired.append(obj["Key"])
        for key in expired:
            s3.delete_object(Bucket=self.bucket, Key=key)
        return expired

    def _deploy_network(self) -> None:
        import boto3

        ec2 = boto3.client("ec2", region_name=REGION)
        vpc_id = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        ec2.modify_vpc_attribute(VpcId=vpc_id, EnableDnsHostnames={"Value": True})  # moto needs it for awsvpc tasks
        for logical in self.of_type("AWS::EC2::VPC"):
            self.refs[logical] = {"Ref": vpc_id, "CidrBlock": "10.0.0.0/16"}
        for i, logical in enumerate(self.of_type("AWS::EC2::Subnet")):
            subnet = ec2.create_subnet(VpcId=vpc_id, CidrBlock=f"10.0.{i}.0/24")["Subnet"]["SubnetId"]
            self.refs[logical] = {"Ref": subnet, "SubnetId": subnet}
        for logical in self.of_type("AWS::EC2::SecurityGroup"):
            group = ec2.create_security_group(GroupName=logical, Description="test", VpcId=vpc_id)["GroupId"]
            self.refs[logical] = {"Ref": group, "GroupId": group}

    def _deploy_ecs(self) -> None:
        import boto3

        ecs = boto3.client("ecs", region_name=REGION)
        for logical in self.of_type("AWS::ECS::Cluster"):
            arn = ecs.create_cluster(clusterName=logical)["cluster"]["clusterArn"]
            self.refs[logical] = {"Ref": logical, "Arn": arn}
        for logical, resource in self.of_type("AWS::ECS::TaskDefinition").items():
            props = resource["Properties"]
            containers = []
            for c in props["ContainerDefinitions"]:
                containers.append(
                    {
                        "name": c["Name"],
                        "image": "rewardpipe-runner:test",
                        "memory": int(c["Memory"]),
                        "environment": [
                            {"name": e["Name"], "value": str(self.resolve(e["Value"]))}
                            for e in c.get("Environment", [])
                        ],
                    }
                )
            td = ecs.register_task_definition(
                family=props["Family"],
                containerDefinitions=containers,
                requiresCompatibilities=["FARGATE"],
                networkMode="awsvpc",
                cpu=str(props["Cpu"]),
                memory=str(props["Memory"]),
            )["taskDefinition"]
            self.refs[logical] = {"Ref": td["taskDefinitionArn"]}

    def _role(self) -> str:
        import boto3

        iam = boto3.client("iam", region_name=REGION)
        try:
            return iam.get_role(RoleName="rewardpipe-test")["Role"]["Arn"]
        except iam.exceptions.NoSuchEntityException:
            doc = {
                "Version": "2012-10-17",
                "Statement": [
                    {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}
                ],
            }
            return iam.create_role(RoleName="rewardpipe-test", AssumeRolePolicyDocument=json.dumps(doc))["Role"]["Arn"]

    def _deploy_functions(self) -> None:
        import boto3

        client = boto3.client("lambda", region_name=REGION)
        role = self._role()
        for logical, resource in self.of_type("AWS::Lambda::Function").items():
            props = resource["Properties"]
            if not str(props.get("Runtime", "")).startswith("python"):
                continue  # CDK's own custom-resource providers
            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w") as zf:
                source = asset_dir(self.synth, logical)
                for path in sorted(source.rglob("*")):
                    if path.is_file():
                        zf.write(path, path.relative_to(source).as_posix())
            env = {k: str(self.resolve(v)) for k, v in props.get("Environment", {}).get("Variables", {}).items()}
            if self.function_env and not logical.startswith("CodeRunner"):
                env.update(self.function_env)
                env = {k: v for k, v in env.items() if v is not None}
            _check_size(f"environment variables of {logical}", _env_size(env), LIMITS["lambda_env_bytes"])
            name = str(props.get("FunctionName") or logical)[:64]
            fn = client.create_function(
                FunctionName=name,
                Runtime=props["Runtime"],
                Role=role,
                Handler=props["Handler"],
                Code={"ZipFile": buf.getvalue()},
                Timeout=int(props.get("Timeout", 3)),
                MemorySize=int(props.get("MemorySize", 128)),
                Environment={"Variables": env},
                Architectures=props.get("Architectures", ["x86_64"]),
            )
            self.functions[logical] = name
            self.refs[logical] = {"Ref": name, "Arn": fn["FunctionArn"]}

    def _deploy_state_machine(self) -> None:
        import boto3

        sfn = boto3.client("stepfunctions", region_name=REGION)
        ((logical, resource),) = self.of_type("AWS::StepFunctions::StateMachine").items()
        definition = self.resolve(resource["Properties"]["DefinitionString"])
        self.definition = json.loads(definition)
        self.state_machine_arn = sfn.create_state_machine(
            name=self.refs[logical]["Name"],
            definition=definition,
            roleArn=self._role(),
        )["stateMachineArn"]
        assert self.state_machine_arn == self.refs[logical]["Arn"], "moto's state machine ARN changed form"

    def function_name(self, logical_prefix: str) -> str:
        matches = [name for logical, name in self.functions.items() if logical.startswith(logical_prefix)]
        if len(matches) != 1:
            raise KeyError(f"{logical_prefix}: {matches}")
        return matches[0]


def chat_server(reply: Any) -> tuple[Any, str, list[dict]]:
    """A local OpenAI-compatible ``/chat/completions`` endpoint: ``reply(request_body)`` gives the
    assistant text. Returns (server, base URL, what it was sent); call ``server.shutdown()`` after."""
    from http.server import BaseHTTPRequestHandler

    from tests.http_server import QuietHTTPServer

    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
            # The fields the OpenAI SDK's ChatCompletion model requires, so SDK-based clients accept it too.
            data = json.dumps(
                {
                    "id": f"chatcmpl-{len(seen)}",
                    "object": "chat.completion",
                    "created": 0,
                    "model": str(body.get("model", "")),
                    "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": reply(body)}, "finish_reason": "stop"}
                    ],
                    "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = QuietHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1", seen


def create_function(folder: str, name: str, env: dict[str, str] | None = None, timeout_s: int = 900) -> str:
    """A Lambda of ``functions/<folder>`` in moto (run in-process by the patched invoke), for tests that call
    handlers directly but need the function another one invokes (the code runner). Returns its name."""
    import boto3

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.write(ROOT / "functions" / folder / "handler.py", "handler.py")
    iam_client = boto3.client("iam", region_name=REGION)
    doc = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }
    role = iam_client.create_role(RoleName=f"{name}-role", AssumeRolePolicyDocument=json.dumps(doc))["Role"]["Arn"]
    boto3.client("lambda", region_name=REGION).create_function(
        FunctionName=name,
        Runtime="python3.11",
        Role=role,
        Handler="handler.lambda_handler",
        Code={"ZipFile": buf.getvalue()},
        Timeout=timeout_s,
        MemorySize=1769,
        Environment={"Variables": env or {}},
    )
    return name


def run_execution(sfn: Any, arn: str, payload: dict, timeout_s: float = 120.0) -> dict:
    """Start a named execution (moto needs names) and wait for it to finish."""
    execution = sfn.start_execution(stateMachineArn=arn, name=f"x-{uuid.uuid4().hex}", input=json.dumps(payload))
    return wait_execution(sfn, execution["executionArn"], timeout_s)


def wait_execution(sfn: Any, execution_arn: str, timeout_s: float = 120.0) -> dict:
    deadline = time.time() + timeout_s
    while True:
        desc = sfn.describe_execution(executionArn=execution_arn)
        if desc["status"] != "RUNNING":
            return desc
        if time.time() > deadline:
            sfn.stop_execution(executionArn=execution_arn)
            raise TimeoutError(f"execution {execution_arn} still running after {timeout_s}s")
        time.sleep(0.05)


#: How long a test's end waits for the Lambdas its stopped executions have in flight (a loaded 2-core machine
#: runs an in-process Lambda in well under a second; the bound only decides how long a stuck one takes to fail).
QUIESCE_TIMEOUT_S = 30.0


def quiesce_executions(timeout_s: float = QUIESCE_TIMEOUT_S) -> list[str]:
    """Stop every execution still running when a test ends, and wait until no thread of moto's Step Functions
    interpreter is doing anything (bounded). moto runs executions in daemon threads that outlive the test; one
    still running went on into the next test of the worker (its Lambda invoked in-process there, its turn request
    sent to the next deployment's queue of the same name, its function's variables left in os.environ). A
    thread parked on a task token stays parked: the stopped execution ends at its next state without running
    it. Returns the threads still busy at the bound (named in the failure they cause)."""
    import boto3
    from moto.stepfunctions.parser.utils import TMP_THREADS

    sfn = boto3.client("stepfunctions", region_name=REGION)
    try:
        machines = sfn.list_state_machines()["stateMachines"]
        for machine in machines:
            pages = sfn.get_paginator("list_executions").paginate(
                stateMachineArn=machine["stateMachineArn"], statusFilter="RUNNING"
            )
            for page in pages:
                for execution in page["executions"]:
                    sfn.stop_execution(executionArn=execution["executionArn"], error="rewardpipe.TestEnded")
    except Exception:  # noqa: BLE001 - a test that broke moto's state still gets its threads waited for
        pass
    deadline = time.monotonic() + timeout_s
    while True:
        busy = [thread for thread in list(TMP_THREADS) if thread.is_alive() and not _parked(thread)]
        if not busy or time.monotonic() > deadline:
            TMP_THREADS[:] = [thread for thread in TMP_THREADS if thread.is_alive()]
            return [thread.name for thread in busy]
        time.sleep(0.02)


_PARKED_IN = (
    # (file name ending, function): where an interpreter thread waits on nothing the test started
    ("eval/callback/callback.py", "wait"),  # a task token, an activity, a heartbeat
    ("exec/execute_state.py", "_evaluate_with_timeout"),  # its task's own thread, judged on its own
    ("program/program.py", "eval"),  # its program's thread, the same
    ("state_parallel/branches_decl.py", "wait"),
    ("state_map/iteration/job.py", "await_jobs"),
)


def _parked(thread: threading.Thread) -> bool:
    frame = sys._current_frames().get(thread.ident or -1)
    leaf = frame
    while frame is not None:
        code = frame.f_code
        if code.co_name == "invoke_in_process" and code.co_filename == __file__:
            return False  # a Lambda of the execution is running
        if any(code.co_filename.endswith(path) and code.co_name == name for path, name in _PARKED_IN):
            return leaf is not None and leaf.f_code.co_filename == threading.__file__  # blocked, not working
        frame = frame.f_back
    return False


# --------------------------------------------------------------------------------------------------
# Event sources: what AWS itself does between the deployed resources (additive; used by the Nova bridge
# end-to-end test). Everything is read from the template: the SQS event-source mappings, the EventBridge
# rules (event patterns and schedules), their targets and the Lambda permissions that let EventBridge in.

# A Step Functions status-change event carries the execution's input and output only up to 248 KiB; above
# that the field is left out and "<field>Details": {"included": false} says so (Step Functions developer
# guide, "Automating Step Functions event delivery with EventBridge").
STATUS_EVENT_PAYLOAD_BYTES = 248 * 1024
_RATE_SECONDS = {"minute": 60, "minutes": 60, "hour": 3600, "hours": 3600, "day": 86400, "days": 86400}


def _iso(epoch_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_s))


def sqs_event_record(message: dict[str, Any], queue_arn: str) -> dict[str, Any]:
    """One record of the event Lambda's SQS poller hands a function (the documented shape)."""
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": {k: str(v) for k, v in message.get("Attributes", {}).items()},
        "messageAttributes": message.get("MessageAttributes", {}),
        "md5OfBody": message.get("MD5OfBody", ""),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": REGION,
    }


def event_matches(pattern: Any, event: Any) -> bool:
    """EventBridge matching for the pattern forms the templates use: nested objects, and lists of exact
    values (a field matches when its value, or one of its values, is in the list)."""
    if isinstance(pattern, dict):
        return isinstance(event, dict) and all(
            key in event and event_matches(sub, event[key]) for key, sub in pattern.items()
        )
    if isinstance(pattern, list):
        values = event if isinstance(event, list) else [event]
        return any(value in pattern for value in values)
    return pattern == event


@dataclass
class EventSources:
    """Plays, against a :class:`Deployment`, the event sources of the functions whose logical id starts with
    one of ``prefixes``:

    * SQS event-source mappings: a poll receives up to ``BatchSize`` messages, invokes the function
      synchronously with the SQS event, and deletes what succeeded: everything when the function returns,
      nothing when it raises, and with ``ReportBatchItemFailures`` all but the listed ``itemIdentifier`` s
      (a malformed list fails the whole batch). Messages not deleted come back after the queue's
      visibility timeout, as on AWS. Lambda refuses a mapping whose queue's visibility timeout is below
      the function's timeout: such a mapping is a limit violation here.
    * EventBridge rules with an event pattern on Step Functions status changes: each execution of a
      matched state machine that ends is delivered once, as the documented event, to every target
      (asynchronous invocation).
    * EventBridge schedules (``rate(...)``): fired by :meth:`fire_schedules` each time ``now`` has passed
      another period since the first call.

    Targets need the template's ``AWS::Lambda::Permission`` for ``events.amazonaws.com`` from that rule, as
    on AWS; a missing one is a violation. Invocation failures are kept in :attr:`failures`.
    """

    deployment: Deployment
    prefixes: tuple[str, ...] = ("",)
    failures: list[str] = field(default_factory=list)
    delivered_statuses: set[str] = field(default_factory=set)
    _next_fire: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        import boto3

        self.sqs = boto3.client("sqs", region_name=REGION)
        self.sfn = boto3.client("stepfunctions", region_name=REGION)
        self.lam = boto3.client("lambda", region_name=REGION)
        d = self.deployment
        functions = d.of_type("AWS::Lambda::Function")
        queues = d.of_type("AWS::SQS::Queue")
        queues_by_arn = {d.refs[q]["Arn"]: q for q in queues}
        self.mappings: list[dict[str, Any]] = []
        for props in (r["Properties"] for r in d.of_type("AWS::Lambda::EventSourceMapping").values()):
            target = self._function_logical(props["FunctionName"])
            if target is None or not target.startswith(self.prefixes):
                continue
            queue_arn = d.resolve(props["EventSourceArn"])
            queue = queues_by_arn[queue_arn]
            url = d.refs[queue]["Ref"]
            # As the template declares it (SQS's default is 30 s): the harness gives non-FIFO queues moto's defaults.
            visibility = int(queues[queue]["Properties"].get("VisibilityTimeout", 30))
            timeout = int(functions[target]["Properties"].get("Timeout", 3))
            if visibility < timeout:
                LIMIT_VIOLATIONS.append(
                    f"event source mapping {target}: queue visibility timeout {visibility}s is "
                    f"below the function timeout {timeout}s (Lambda refuses the mapping)"
                )
            # Lambda's poller reads, deletes and inspects the queue with the function's own role ("Lambda
            # execution role permissions" for SQS: ReceiveMessage, DeleteMessage, GetQueueAttributes).
            with iam.calling_as(d.caller(target)):
                self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout"])
            self.mappings.append(
                {
                    "function": d.functions[target],
                    "queue_url": url,
                    "queue_arn": queue_arn,
                    "caller": d.caller(target),
                    "batch_size": int(props.get("BatchSize", 10)),
                    "report_failures": "ReportBatchItemFailures" in props.get("FunctionResponseTypes", []),
                }
            )
        self.rules: list[dict[str, Any]] = []
        permissions = [r["Properties"] for r in d.of_type("AWS::Lambda::Permission").values()]
        for logical, rule in d.of_type("AWS::Events::Rule").items():
            props = rule["Properties"]
            for target in props.get("Targets", []):
                fn = self._function_logical(target["Arn"])
                if fn is None or not fn.startswith(self.prefixes):
                    continue
                allowed = any(
                    p.get("Principal") == "events.amazonaws.com"
                    and self._function_logical(p["FunctionName"]) == fn
                    and p.get("SourceArn") == {"Fn::GetAtt": [logical, "Arn"]}
                    for p in permissions
                )
                if not allowed:
                    LIMIT_VIOLATIONS.append(f"rule {logical}: no Lambda permission lets EventBridge invoke {fn}")
                self.rules.append(
                    {
                        "rule": logical,
                        "function": d.functions[fn],
                        "pattern": d.resolve(props.get("EventPattern")) if "EventPattern" in props else None,
                        "rate_s": self._rate(props.get("ScheduleExpression")),
                    }
                )

    @staticmethod
    def _function_logical(ref: Any) -> str | None:
        if isinstance(ref, dict) and "Ref" in ref:
            return ref["Ref"]
        if isinstance(ref, dict) and "Fn::GetAtt" in ref:
            return ref["Fn::GetAtt"][0]
        return None

    @staticmethod
    def _rate(expression: Any) -> float | None:
        if not isinstance(expression, str) or not expression.startswith("rate("):
            return None
        value, unit = expression[len("rate(") : -1].split()
        return float(value) * _RATE_SECONDS[unit]

    def _invoke(self, function: str, event: dict[str, Any], asynchronous: bool) -> tuple[bool, Any]:
        """(succeeded, the function's result)."""
        response = self.lam.invoke(
            FunctionName=function,
            InvocationType="Event" if asynchronous else "RequestResponse",
            Payload=json.dumps(event).encode("utf-8"),
        )
        body = response["Payload"].read()
        if response.get("FunctionError"):
            self.failures.append(f"{function}: {body[:500]!r}")
            return False, None
        return True, json.loads(body) if body else None

    def poll_sqs(self) -> int:
        """One poll of every mapping; returns how many messages were handed to functions."""
        handed = 0
        for m in self.mappings:
            with iam.calling_as(m["caller"]):
                messages = self.sqs.receive_message(
                    QueueUrl=m["queue_url"],
                    MaxNumberOfMessages=m["batch_size"],
                    AttributeNames=["All"],
                    MessageAttributeNames=["All"],
                ).get("Messages", [])
            if not messages:
                continue
            handed += len(messages)
            ok, result = self._invoke(
                m["function"], {"Records": [sqs_event_record(x, m["queue_arn"]) for x in messages]}, asynchronous=False
            )
            done = {x["MessageId"] for x in messages} if ok else set()  # a raise: the whole batch comes back
            if ok and m["report_failures"] and isinstance(result, dict) and result.get("batchItemFailures"):
                failed = [f.get("itemIdentifier") if isinstance(f, dict) else None for f in result["batchItemFailures"]]
                done = set() if any(i not in done for i in failed) else done - set(failed)
            for message in messages:
                if message["MessageId"] in done:
                    with iam.calling_as(m["caller"]):
                        self.sqs.delete_message(QueueUrl=m["queue_url"], ReceiptHandle=message["ReceiptHandle"])
        return handed

    def deliver_status_changes(self) -> int:
        """Deliver the status-change event of every execution that ended since the last call."""
        delivered = 0
        status_rules = [r for r in self.rules if r["pattern"] and "aws.states" in json.dumps(r["pattern"])]
        if not status_rules:
            return 0
        for machine in self.sfn.list_state_machines()["stateMachines"]:
            for execution in self.sfn.list_executions(stateMachineArn=machine["stateMachineArn"])["executions"]:
                arn = execution["executionArn"]
                if execution["status"] == "RUNNING" or arn in self.delivered_statuses:
                    continue
                self.delivered_statuses.add(arn)
                event = self.status_change_event(self.sfn.describe_execution(executionArn=arn))
                for rule in status_rules:
                    if event_matches(rule["pattern"], event):
                        self._invoke(rule["function"], event, asynchronous=True)
                        delivered += 1
        return delivered

    @staticmethod
    def status_change_event(desc: dict[str, Any]) -> dict[str, Any]:
        detail: dict[str, Any] = {
            "executionArn": desc["executionArn"],
            "stateMachineArn": desc["stateMachineArn"],
            "name": desc["name"],
            "status": desc["status"],
            "startDate": int(desc["startDate"].timestamp() * 1000),
            "stopDate": int(desc["stopDate"].timestamp() * 1000) if desc.get("stopDate") else None,
        }
        # "If the combined escaped input and escaped output sent to EventBridge exceeds 248KB, then the input will
        # be excluded. Similarly, if the escaped output exceeds 248KB, then the output will be excluded."
        # Escaped: as a JSON string inside the event (every quote and backslash doubled, non-ASCII as \\u).
        escaped = {key: len(json.dumps(desc[key])) if desc.get(key) is not None else 0 for key in ("input", "output")}
        keep = {
            "output": desc.get("output") is not None and escaped["output"] <= STATUS_EVENT_PAYLOAD_BYTES,
            "input": desc.get("input") is not None
            and escaped["input"] + escaped["output"] <= STATUS_EVENT_PAYLOAD_BYTES,
        }
        for key in ("input", "output"):
            detail[key] = desc.get(key) if keep[key] else None
            detail[f"{key}Details"] = {"included": keep[key]}
        return {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": "Step Functions Execution Status Change",
            "source": "aws.states",
            "account": ACCOUNT,
            "time": _iso(time.time()),
            "region": REGION,
            "resources": [desc["executionArn"]],
            "detail": detail,
        }

    def fire_schedules(self, now: float) -> int:
        """Fire every schedule whose period has passed since the first call (or its last firing)."""
        fired = 0
        for rule in self.rules:
            if not rule["rate_s"]:
                continue
            due = self._next_fire.setdefault(rule["rule"], now + rule["rate_s"])
            if now < due:
                continue
            self._next_fire[rule["rule"]] = now + rule["rate_s"]
            self._invoke(
                rule["function"],
                {
                    "version": "0",
                    "id": str(uuid.uuid4()),
                    "detail-type": "Scheduled Event",
                    "source": "aws.events",
                    "account": ACCOUNT,
                    "time": _iso(now),
                    "region": REGION,
                    "resources": [f"arn:aws:events:{REGION}:{ACCOUNT}:rule/{rule['rule']}"],
                    "detail": {},
                },
                asynchronous=True,
            )
            fired += 1
        return fired

    def pump(self, now: float | None = None) -> int:
        """One round of everything: SQS polls, status changes, schedules. Returns how much was delivered."""
        return (
            self.poll_sqs() + self.deliver_status_changes() + self.fire_schedules(time.time() if now is None else now)
        )
