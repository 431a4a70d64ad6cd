"""What moto cannot check: the resource policies, limits and service rules a real account enforces
(issue 7), asserted on the synthesized template against AWS's documented behaviour."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import pytest

from tests.aws import harness

pytestmark = pytest.mark.xdist_group("cdk")

ROOT = Path(__file__).resolve().parents[2]


def _of_type(resources: dict, cfn_type: str) -> dict:
    return {k: v for k, v in resources.items() if v["Type"] == cfn_type}


def _one(resources: dict, cfn_type: str, prefix: str) -> tuple[str, dict]:
    (item,) = [(k, v) for k, v in _of_type(resources, cfn_type).items() if k.startswith(prefix)]
    return item


def _statements_of_role(resources: dict, role_prefix: str) -> list[dict]:
    out = []
    for policy in _of_type(resources, "AWS::IAM::Policy").values():
        if any(r.get("Ref", "").startswith(role_prefix) for r in policy["Properties"].get("Roles", [])):
            out.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return out


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def _alarm_arn_pattern(condition_value) -> str:
    """The aws:SourceArn pattern with CloudFormation pseudo parameters written out as placeholders."""
    parts = condition_value["Fn::Join"][1]
    return "".join(p if isinstance(p, str) else f"<{p['Ref']}>" for p in parts)


# -- item 1: alarms reach people ---------------------------------------------------------------------


def test_cloudwatch_may_publish_to_the_alarm_topic_only_for_this_stacks_alarms(synth, resources):
    (policy,) = _of_type(resources, "AWS::SNS::TopicPolicy").values()
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    # enforce_ssl's Deny is still there ...
    assert any(
        st["Effect"] == "Deny" and st["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for st in statements
    )
    # ... beside the Allow CloudWatch needs, because an explicit topic policy replaces SNS's default one.
    (allow,) = [st for st in statements if st["Effect"] == "Allow"]
    assert allow["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    assert _as_list(allow["Action"]) == ["sns:Publish"]
    assert allow["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    pattern = _alarm_arn_pattern(allow["Condition"]["ArnLike"]["aws:SourceArn"])
    stack = synth.stack.stack_name
    assert pattern == f"arn:<AWS::Partition>:cloudwatch:<AWS::Region>:<AWS::AccountId>:alarm:{stack}-*"


@pytest.mark.parametrize("context", ["", harness.NOVA_BRIDGE_CONTEXT], ids=["default", "nova-bridge"])
def test_every_alarm_matches_the_topic_grant_and_notifies_the_topic(context):
    """Every alarm of every configuration, not only the default one: an alarm CloudFormation names itself
    falls outside the topic's aws:SourceArn grant and its notifications are refused."""
    synth = harness.synthesized(context)
    stack = synth.stack.stack_name
    alarms = _of_type(synth.template["Resources"], "AWS::CloudWatch::Alarm")
    assert len(alarms) >= (11 if context else 10)
    for logical, alarm in alarms.items():
        props = alarm["Properties"]
        assert props["AlarmName"].startswith(f"{stack}-"), logical  # else the topic refuses its notifications
        assert [a["Ref"] for a in props["AlarmActions"]] and all(
            a["Ref"].startswith("MonitoringAlarms") for a in props["AlarmActions"]
        ), logical


def test_the_topic_key_lets_cloudwatch_encrypt_only_for_this_stacks_alarms(resources):
    (key,) = _of_type(resources, "AWS::KMS::Key").values()
    (statement,) = [
        st
        for st in key["Properties"]["KeyPolicy"]["Statement"]
        if st.get("Principal", {}).get("Service") == "cloudwatch.amazonaws.com"
    ]
    assert sorted(_as_list(statement["Action"])) == ["kms:Decrypt", "kms:GenerateDataKey*"]
    (topic_policy,) = _of_type(resources, "AWS::SNS::TopicPolicy").values()
    (allow,) = [st for st in topic_policy["Properties"]["PolicyDocument"]["Statement"] if st["Effect"] == "Allow"]
    assert statement["Condition"] == allow["Condition"]


# -- item 2: Fargate jobs can run ---------------------------------------------------------------------


def test_runner_container_drops_every_capability_and_runs_an_init_process(resources):
    _, task = _one(resources, "AWS::ECS::TaskDefinition", "CodeRunnerTask")
    (container,) = task["Properties"]["ContainerDefinitions"]
    assert container["LinuxParameters"]["Capabilities"] == {"Drop": ["ALL"]}
    assert container["LinuxParameters"]["InitProcessEnabled"] is True
    assert task["Properties"]["RuntimePlatform"]["CpuArchitecture"] == "X86_64"


def test_runner_image_is_built_for_linux_amd64(synth):
    manifest = json.loads((synth.outdir / f"{synth.stack.stack_name}.assets.json").read_text())
    (image,) = manifest["dockerImages"].values()
    assert image["source"]["platform"] == "linux/amd64"


def test_dockerfile_gives_the_runtime_user_its_scratch_volume():
    """Fargate creates a bind volume root-owned 0755 unless the image's directory exists and is declared
    a VOLUME (then the volume starts with the image's ownership and mode)."""
    lines = [
        re.sub(r"\s+", " ", line.strip())
        for line in (ROOT / "containers" / "code_runner" / "Dockerfile").read_text().replace("\\\n", " ").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert lines[0].startswith("FROM --platform=linux/amd64 ")
    user = next(i for i, line in enumerate(lines) if line.startswith("USER "))
    uid = lines[user].split()[1]
    volume = next(i for i, line in enumerate(lines) if line.startswith("VOLUME "))
    assert json.loads(lines[volume][len("VOLUME ") :]) == ["/scratch"] and volume < user
    setup = " ".join(line for line in lines[:volume] if line.startswith("RUN "))
    assert re.search(r"mkdir (-p )?/scratch", setup)
    assert re.search(rf"chown {uid}(:{uid})? /scratch", setup)


# -- item 5: the single-turn Lambda never loses a batch --------------------------------------------


def test_single_turn_lambda_may_run_as_long_as_nova_waits_with_a_sandbox_sized_to_it(resources):
    _, fn = _one(resources, "AWS::Lambda::Function", "SingleTurnRewardFunction")
    props = fn["Properties"]
    assert props["Timeout"] == 900
    env = props["Environment"]["Variables"]
    workers, memory = int(env["REWARDPIPE_SANDBOX_WORKERS"]), int(env["REWARDPIPE_SANDBOX_MEMORY_MB"])
    assert workers >= 2 and workers * memory < props["MemorySize"]  # every worker's cap fits, with headroom
    assert env["ERROR_REWARD"] == "neutral"


def test_every_sandbox_host_caps_the_sandbox_below_its_own_memory(resources):
    _, runner = _one(resources, "AWS::Lambda::Function", "CodeRunnerFunction")
    assert (
        int(runner["Properties"]["Environment"]["Variables"]["REWARDPIPE_SANDBOX_MEMORY_MB"])
        < runner["Properties"]["MemorySize"]
    )
    _, task = _one(resources, "AWS::ECS::TaskDefinition", "CodeRunnerTask")
    (container,) = task["Properties"]["ContainerDefinitions"]
    env = {e["Name"]: e["Value"] for e in container["Environment"]}
    assert int(env["REWARDPIPE_SANDBOX_MEMORY_MB"]) < int(task["Properties"]["Memory"])


# -- item 8: monitoring cannot fail silently ---------------------------------------------------------


@pytest.mark.parametrize("context", ["", harness.NOVA_BRIDGE_CONTEXT], ids=["default", "nova-bridge"])
def test_no_function_reserves_concurrency(context):
    resources = harness.synthesized(context).template["Resources"]
    for logical, fn in _of_type(resources, "AWS::Lambda::Function").items():
        assert "ReservedConcurrentExecutions" not in fn["Properties"], logical


def _alarm_on(resources, namespace: str, metric: str, dimension_ref: str) -> dict:
    found = [
        a["Properties"]
        for a in _of_type(resources, "AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("Namespace") == namespace
        and a["Properties"].get("MetricName") == metric
        and any(json.dumps(d["Value"]).find(dimension_ref) >= 0 for d in a["Properties"].get("Dimensions", []))
    ]
    assert len(found) == 1, (metric, dimension_ref)
    return found[0]


def test_the_variance_checks_own_errors_and_throttles_alarm(resources):
    logical, _ = _one(resources, "AWS::Lambda::Function", "MonitoringVarianceCheck")
    for metric in ("Errors", "Throttles"):
        alarm = _alarm_on(resources, "AWS/Lambda", metric, logical)
        assert alarm["Threshold"] == 0 and alarm["ComparisonOperator"] == "GreaterThanThreshold"
        assert alarm["EvaluationPeriods"] == 1


def test_undeliverable_checks_land_in_an_alarmed_dead_letter_queue(resources):
    queue, _ = _one(resources, "AWS::SQS::Queue", "MonitoringCheckDeadLetters")
    (rule,) = _of_type(resources, "AWS::Events::Rule").values()
    (target,) = rule["Properties"]["Targets"]
    assert target["DeadLetterConfig"]["Arn"] == {"Fn::GetAtt": [queue, "Arn"]}
    assert target["RetryPolicy"]["MaximumRetryAttempts"] == 2
    _, invoke_config = _one(resources, "AWS::Lambda::EventInvokeConfig", "MonitoringVarianceCheck")
    assert invoke_config["Properties"]["DestinationConfig"]["OnFailure"]["Destination"] == {
        "Fn::GetAtt": [queue, "Arn"]
    }
    # EventBridge may send to the queue only for this rule (the queue policy CDK writes for the DLQ).
    text = json.dumps([p for p in _of_type(resources, "AWS::SQS::QueuePolicy").values()])
    assert "events.amazonaws.com" in text and "aws:SourceArn" in text
    alarm = _alarm_on(resources, "AWS/SQS", "ApproximateNumberOfMessagesVisible", queue)
    assert alarm["Threshold"] == 0


def test_a_silent_check_while_rollouts_run_alarms(resources):
    (alarm,) = [
        a["Properties"]
        for a in _of_type(resources, "AWS::CloudWatch::Alarm").values()
        if "variance-check-silent" in a["Properties"]["AlarmName"]
    ]
    metrics = {m["Id"]: m for m in alarm["Metrics"]}
    expression = next(m["Expression"] for m in alarm["Metrics"] if "Expression" in m)
    assert "started" in expression and "checks" in expression
    assert metrics["checks"]["MetricStat"]["Metric"]["MetricName"] == "ChecksRun"
    assert metrics["started"]["MetricStat"]["Metric"]["MetricName"] == "ExecutionsStarted"
    assert alarm["Threshold"] == 0 and alarm["EvaluationPeriods"] == 1


# -- item 10: deployable from any laptop ---------------------------------------------------------------


def _recommended_flags() -> dict:
    import aws_cdk

    (archive,) = (Path(aws_cdk.__file__).parent / "_jsii").glob("aws-cdk-lib@*.jsii.tgz")
    with tarfile.open(archive) as tar:
        return json.load(tar.extractfile("package/recommended-feature-flags.json"))


def test_cdk_json_sets_every_flag_cdk_init_sets_for_the_pinned_version():
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    recommended = _recommended_flags()
    # Deliberate deviations, each explained in docs/aws.md.
    deviations = {"@aws-cdk/aws-ecs:enableImdsBlockingDeprecatedFeature", "@aws-cdk/aws-ecs:disableEcsImdsBlocking"}
    missing = {k: v for k, v in recommended.items() if k not in deviations and context.get(k) != v}
    assert not missing, f"flags cdk init would set but cdk.json does not: {sorted(missing)}"


@pytest.mark.parametrize("context", ["", harness.NOVA_BRIDGE_CONTEXT], ids=["default", "nova-bridge"])
def test_every_taggable_resource_is_tagged_with_the_project(context):
    resources = harness.synthesized(context).template["Resources"]
    tagged = [r for r in resources.values() if "Tags" in r.get("Properties", {})]
    assert len(tagged) >= 20
    for resource in tagged:
        tags = resource["Properties"]["Tags"]
        pairs = {t["Key"]: t["Value"] for t in tags} if isinstance(tags, list) else tags
        assert pairs.get("project") == "rewardpipe", resource["Type"]
        assert pairs.get("rewardpipe:stack") == "RewardPipe", resource["Type"]


def test_state_machine_logs_to_a_vended_logs_group(resources):
    _, group = _one(resources, "AWS::Logs::LogGroup", "RolloutWorkflowLogs")
    assert group["Properties"]["LogGroupName"].startswith("/aws/vendedlogs/states/")


@pytest.mark.parametrize("role_prefix", ["CodeRunnerFunction", "CodeRunnerTaskTaskRole"])
def test_sandbox_roles_reach_s3_only_through_the_vpc_endpoint(resources, role_prefix):
    endpoint, _ = _one(resources, "AWS::EC2::VPCEndpoint", "NetworkVpcS3")
    s3 = [
        st
        for st in _statements_of_role(resources, role_prefix)
        if any(a.startswith("s3:") for a in _as_list(st["Action"]))
    ]
    # The runner Lambda gets its job inline and has no S3 grant at all (rewardpipe.aws.jobs); the Fargate task's
    # grant works only through the VPC's endpoint.
    assert bool(s3) is (role_prefix == "CodeRunnerTaskTaskRole")
    for st in s3:
        assert st["Condition"]["StringEquals"]["aws:SourceVpce"] == {"Ref": endpoint}, st


def test_the_s3_endpoint_lets_the_sandbox_list_its_prefix_so_a_missing_job_reads_as_404(resources):
    _, endpoint = _one(resources, "AWS::EC2::VPCEndpoint", "NetworkVpcS3")
    statements = endpoint["Properties"]["PolicyDocument"]["Statement"]
    assert any(
        _as_list(st["Action"]) == ["s3:ListBucket"] and st["Condition"] == {"StringLike": {"s3:prefix": ["jobs/*"]}}
        for st in statements
    )


def test_trainer_policy_is_output_with_exactly_what_a_trainer_does(synth, resources):
    logical, policy = _one(resources, "AWS::IAM::ManagedPolicy", "TrainerPolicy")
    assert synth.template["Outputs"]["TrainerPolicyArn"]["Value"] == {"Ref": logical}
    actions = {a for st in policy["Properties"]["PolicyDocument"]["Statement"] for a in _as_list(st["Action"])}
    assert actions == {
        "states:StartExecution",
        "states:DescribeExecution",
        "states:SendTaskSuccess",
        "states:SendTaskFailure",
        "states:SendTaskHeartbeat",
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
        "sqs:ChangeMessageVisibility",
        "sqs:GetQueueAttributes",
        "sqs:GetQueueUrl",
        "lambda:InvokeFunction",
        "s3:GetObject",
        "s3:PutObject",
    }
    for st in policy["Properties"]["PolicyDocument"]["Statement"]:
        if st.get("Sid") != "AnswerTurns":  # task tokens: see the test below
            assert "*" not in _as_list(st["Resource"]), st


TASK_TOKEN_ACTIONS = {"states:SendTaskSuccess", "states:SendTaskFailure", "states:SendTaskHeartbeat"}


@pytest.mark.parametrize("context", ["", harness.NOVA_BRIDGE_CONTEXT], ids=["default", "nova-bridge"])
def test_task_token_actions_are_granted_on_all_resources_and_alone(context):
    """The Service Authorization Reference ("Actions, resources, and condition keys for AWS Step
    Functions") lists no resource type for SendTaskSuccess, SendTaskFailure and SendTaskHeartbeat: "If
    there is no value for this column, you must specify all resources ("*")". A grant on the state
    machine's ARN (what aws-cdk's grantTaskResponse does) is not documented to authorize a call that
    names only a task token, so every such statement is on "*", and holds these actions only so the
    wildcard covers nothing else. Every role whose code calls them has them."""
    resources = harness.synthesized(context).template["Resources"]
    granted: dict[str, set[str]] = {}
    for policy in [
        *_of_type(resources, "AWS::IAM::Policy").values(),
        *_of_type(resources, "AWS::IAM::ManagedPolicy").values(),
    ]:
        owners = [r["Ref"] for r in policy["Properties"].get("Roles", [])] or ["TrainerPolicy"]
        for st in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = set(_as_list(st["Action"]))
            if actions & TASK_TOKEN_ACTIONS:
                assert actions <= TASK_TOKEN_ACTIONS and st["Resource"] == "*" and "Condition" not in st, st
                for owner in owners:
                    granted.setdefault(owner, set()).update(actions)
    needed = {
        "TrainerPolicy": TASK_TOKEN_ACTIONS,  # RolloutClient answers, fails and heartbeats turns
        "RolloutWorkflowStartEpisode": {"states:SendTaskSuccess", "states:SendTaskFailure"},
        "RolloutWorkflowConverse": {"states:SendTaskSuccess", "states:SendTaskFailure"},
    }
    if context:
        needed.update({"NovaBridgeForwarder": TASK_TOKEN_ACTIONS, "NovaBridgeRouter": TASK_TOKEN_ACTIONS})
    for prefix, actions in needed.items():
        owners = [owner for owner in granted if owner.startswith(prefix)]
        assert owners and all(actions <= granted[owner] for owner in owners), (prefix, granted)


def _object_patterns(policy: dict, action: str) -> list[str]:
    """The key patterns (after the bucket ARN) that a policy allows ``action`` on."""
    patterns = []
    for st in policy["Properties"]["PolicyDocument"]["Statement"]:
        if action in _as_list(st["Action"]):
            for resource in _as_list(st["Resource"]):
                parts = resource["Fn::Join"][1]
                patterns.append("".join(p for p in parts if isinstance(p, str)).lstrip("/"))
    return patterns


def test_trainer_policy_covers_every_key_the_rollout_client_exchanges_and_no_other(resources):
    """The client reads state snapshots and writes large replies and inputs (rewardpipe.aws.state): without
    these grants a real trainer fails on the first long conversation, which moto (no IAM) never shows."""
    from fnmatch import fnmatchcase

    from rewardpipe.aws.rollout import inline_task_key
    from rewardpipe.aws.state import attempt_prefix, inputs_prefix

    _, policy = _one(resources, "AWS::IAM::ManagedPolicy", "TrainerPolicy")
    reads, writes = _object_patterns(policy, "s3:GetObject"), _object_patterns(policy, "s3:PutObject")
    run, attempt = "exp/1 long", "group-3_rollout-7-a2"
    snapshot = f"{attempt_prefix(run, attempt)}episode-4.json"
    written = [
        f"{attempt_prefix(run, attempt)}reply-4.json",
        f"{inputs_prefix(run, attempt)}turns.json",
        inline_task_key(run, {"task_id": "task/with odd id", "prompt": "p"}),
    ]
    assert any(fnmatchcase(snapshot, p) for p in reads), (snapshot, reads)
    for key in written:
        assert any(fnmatchcase(key, p) for p in writes), (key, writes)
    # Records, hidden tasks and jobs stay out of the trainer's reach.
    for key in ("runs/r/records/step=0/group=g/x.json", "tasks/bundled.jsonl", "jobs/abc/job.json"):
        assert not any(fnmatchcase(key, p) for p in reads + writes), key


# CloudWatch metric math, as documented in "Metric math syntax and functions"
# (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/using-metric-math.html#metric-math-syntax):
# arithmetic + - * / ^; "Comparison and logical operators": comparison == != <= >= < > and logical "AND or &&",
# "OR or ||" only (no NOT), between time series or scalars, giving a 0/1 time series, e.g.
# "(metric1 > 15 AND metric2 > 15)"; "Using IF expressions": IF(condition, trueValue, falseValue) where the
# condition may be such a time series (the IF(TS, S, S) form); FILL(metric, value), ... An expression id must
# start with a lowercase letter. SEARCH is not allowed in alarms.
_MATH_FUNCTIONS = {
    "ABS",
    "AVG",
    "CEIL",
    "DATAPOINT_COUNT",
    "DIFF",
    "DIFF_TIME",
    "FILL",
    "FIRST",
    "FLOOR",
    "IF",
    "LAST",
    "LOG",
    "LOG10",
    "MAX",
    "METRICS",
    "MIN",
    "PERIOD",
    "RATE",
    "REMOVE_EMPTY",
    "RUNNING_SUM",
    "SLICE",
    "SORT",
    "STDDEV",
    "SUM",
    "TIME_SERIES",
}
_MATH_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+(?:\.\d+)?)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>==|!=|<=|>=|&&|\|\||[-+*/^<>(),]))"
)


def _check_metric_math(expression: str, ids: set[str]) -> None:
    """Fail unless ``expression`` uses only documented functions/operators, known ids and balanced
    parentheses, and IF has exactly three arguments."""
    pos, depth, stack = 0, 0, []
    previous = None
    while pos < len(expression):
        match = _MATH_TOKEN.match(expression, pos)
        assert match and match.end() > pos, f"unparsable metric math at {expression[pos:]!r}"
        pos = match.end()
        name, op = match.group("name"), match.group("op")
        if name:
            if name in ("AND", "OR"):
                pass
            elif name.upper() == name and name not in ids:
                assert name in _MATH_FUNCTIONS, f"{name} is not a metric math function"
                stack.append([name, 1])
            else:
                assert name in ids and name[0].islower(), f"{name} is not a metric id of this alarm"
        if op == "(":
            depth += 1
            if not (previous and previous.group("name") and previous.group("name") in _MATH_FUNCTIONS):
                stack.append(["(", 1])
        elif op == ")":
            depth -= 1
            function, args = stack.pop()
            if function == "IF":
                assert args == 3, f"IF takes (condition, value if true, value if false), got {args} arguments"
        elif op == ",":
            stack[-1][1] += 1
        assert depth >= 0, "unbalanced parentheses"
        previous = match
    assert depth == 0 and not stack, "unbalanced parentheses"


def test_every_math_alarm_uses_documented_metric_math(resources):
    expressions = 0
    for alarm in (a["Properties"] for a in _of_type(resources, "AWS::CloudWatch::Alarm").values()):
        metrics = alarm.get("Metrics") or []
        ids = {m["Id"] for m in metrics}
        for metric in metrics:
            if "Expression" in metric:
                expressions += 1
                _check_metric_math(metric["Expression"], ids - {metric["Id"]})
                assert "SEARCH" not in metric["Expression"]  # not allowed in alarms
    assert expressions >= 2  # the heartbeat and rollouts-without-record alarms
    for bad in (
        "IF(FILL(started, 0) > 0 AND FILL(checks, 0) == 0, 1)",
        "IFF(started, 1, 0)",
        "started + nope",
        "IF(started > 0, 1, 0",
        "IF(NOT started > 0, 1, 0)",
        "IF(!(checks == 0), 1, 0)",
    ):
        with pytest.raises(AssertionError):
            _check_metric_math(bad, {"started", "checks"})
