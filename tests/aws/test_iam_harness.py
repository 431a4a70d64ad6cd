"""The IAM-enforcing harness (tests/aws/iam.py): the evaluation rules it applies, the operations it knows, and
that it catches a grant missing from the template, end to end (a function in the state machine, the Fargate
container in its own process) as well as in a direct call."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
from botocore.exceptions import ClientError

from rewardpipe.models import load_tasks
from tests.aws import harness, iam

pytestmark = pytest.mark.xdist_group("cdk")

TASK = load_tasks(harness.ROOT / "rewardpipe" / "data" / "tasks.jsonl")[0]
REGION, ACCOUNT = harness.REGION, harness.ACCOUNT


# --------------------------------------------------------------------------------------------------
# The evaluation rules (IAM user guide: policy evaluation logic, Resource element, condition operators)


@pytest.mark.parametrize(
    "pattern, arn, matches",
    [
        ("arn:aws:s3:::bucket/runs/*", "arn:aws:s3:::bucket/runs/r/step=0/x.json", True),
        ("arn:aws:s3:::bucket/runs/*", "arn:aws:s3:::bucket/jobs/r/job.json", False),
        ("arn:aws:s3:::bucket/runs/*/state/*", "arn:aws:s3:::bucket/runs/r/state/a/episode.json", True),
        ("arn:aws:s3:::bucket/runs/*/state/*", "arn:aws:s3:::bucket/runs/r/step=0/x.json", False),
        # A * inside an ARN segment does not cross a colon; one that ends its segment may.
        (
            "arn:aws:states:us-east-1:1:execution:M-rollouts:*",
            "arn:aws:states:us-east-1:1:execution:M-rollouts:x",
            True,
        ),
        ("arn:aws:states:us-east-1:1:execution:M-*s:x", "arn:aws:states:us-east-1:1:execution:M-a:b-rollouts:x", False),
        ("arn:aws:secretsmanager:r:1:secret:key-??????", "arn:aws:secretsmanager:r:1:secret:key-AbC123", True),
        ("arn:aws:secretsmanager:r:1:secret:key-??????", "arn:aws:secretsmanager:r:1:secret:key-AbC12", False),
        ("arn:aws:s3:::Bucket/*", "arn:aws:s3:::bucket/x", False),  # ARNs are case-sensitive
    ],
)
def test_resource_arns_match_segment_by_segment(pattern, arn, matches):
    assert iam.resource_matches([pattern], arn) is matches


def test_an_action_without_resource_type_is_allowed_only_on_star():
    assert iam.resource_matches(["*"], None)
    assert not iam.resource_matches(["arn:aws:states:us-east-1:1:stateMachine:m"], None)
    assert not iam.resource_matches(["arn:*"], None)


def test_actions_are_case_insensitive_and_take_wildcards():
    assert iam.action_matches(["S3:getobject"], "s3:GetObject")
    assert iam.action_matches(["kms:GenerateDataKey*"], "kms:GenerateDataKey")
    assert not iam.action_matches(["s3:Get*"], "s3:PutObject")


@pytest.mark.parametrize(
    "conditions, context, holds",
    [
        ({"StringLike": {"s3:prefix": ["jobs/*"]}}, {"s3:prefix": ("jobs/r/",)}, True),
        ({"StringLike": {"s3:prefix": ["jobs/*"]}}, {"s3:prefix": ("runs/r/",)}, False),
        ({"StringLike": {"s3:prefix": ["jobs/*"]}}, {}, False),  # absent key: a positive test fails
        ({"StringNotEquals": {"aws:SourceVpce": "vpce-1"}}, {}, True),  # ... and a negated one holds
        ({"StringEquals": {"aws:SourceVpce": "vpce-1"}}, {"aws:sourcevpce": ("vpce-1",)}, True),
        ({"StringEqualsIfExists": {"aws:SourceVpce": "vpce-1"}}, {}, True),
        ({"Bool": {"aws:SecureTransport": "false"}}, {"aws:securetransport": ("true",)}, False),
        ({"Null": {"s3:prefix": "true"}}, {}, True),
        (
            {"ArnLike": {"aws:SourceArn": "arn:aws:cloudwatch:r:1:alarm:Stack-*"}},
            {"aws:sourcearn": ("arn:aws:cloudwatch:r:1:alarm:Stack-x",)},
            True,
        ),
        # two keys in one block, and two blocks: all must hold
        (
            {"StringLike": {"s3:prefix": ["jobs/*"]}, "StringEquals": {"aws:SourceVpce": "v"}},
            {"s3:prefix": ("jobs/",), "aws:sourcevpce": ("w",)},
            False,
        ),
    ],
)
def test_condition_operators(conditions, context, holds):
    assert iam.condition_matches(conditions, context) is holds


def test_an_unknown_condition_operator_is_refused_not_guessed():
    with pytest.raises(iam.UnsupportedCondition, match="IpAddress"):
        iam.condition_matches({"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}, {"aws:sourceip": ("10.0.0.1",)})


def test_an_explicit_deny_wins_and_nothing_allows_by_default():
    allow = {"Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
    deny = {
        "Statement": [
            {
                "Effect": "Deny",
                "Principal": {"AWS": "*"},
                "Action": "s3:*",
                "Resource": "*",
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            }
        ]
    }
    request = iam.Request("s3:GetObject", "arn:aws:s3:::b/k")
    common = {"principal_arn": "arn:aws:iam::1:role/r", "account": "1", "endpoint_policy": None}
    assert iam.evaluate(
        request, identity=[allow], resource_policies=[deny], context={"aws:securetransport": ("true",)}, **common
    ).allowed
    assert not iam.evaluate(
        request, identity=[allow], resource_policies=[deny], context={"aws:securetransport": ("false",)}, **common
    ).allowed
    assert not iam.evaluate(request, identity=[], resource_policies=[], context={}, **common).allowed
    # A VPC endpoint's policy must allow the request too.
    endpoint = {
        "Statement": [
            {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/jobs/*"}
        ]
    }
    assert not iam.evaluate(
        request, identity=[allow], resource_policies=[], context={}, **{**common, "endpoint_policy": endpoint}
    ).allowed


# --------------------------------------------------------------------------------------------------
# What each operation needs


def test_every_operation_is_described_with_its_source():
    for (service, operation), auth in iam.OPERATIONS.items():
        assert auth.source.startswith("https://docs.aws.amazon.com/"), (service, operation)
        assert auth.resource is None or auth.resource in iam.RESOURCES, (service, operation)
        assert all(action.count(":") == 1 for action in auth.actions), (service, operation)
    for actions, source in iam.KMS_NEEDS.values():
        assert source.startswith("https://docs.aws.amazon.com/") and all(a.startswith("kms:") for a in actions)


@pytest.mark.parametrize(
    "service, operation, params, expected",
    [
        (
            "s3",
            "GetObject",
            {"Bucket": "b", "Key": "runs/r/x.json"},
            [("s3:GetObject", "arn:aws:s3:::b/runs/r/x.json")],
        ),
        (
            "s3",
            "GetObject",
            {"Bucket": "b", "Key": "k", "VersionId": "v1"},
            [("s3:GetObjectVersion", "arn:aws:s3:::b/k")],
        ),
        ("s3", "HeadObject", {"Bucket": "b", "Key": "k"}, [("s3:GetObject", "arn:aws:s3:::b/k")]),
        ("s3", "PutObject", {"Bucket": "b", "Key": "k", "IfNoneMatch": "*"}, [("s3:PutObject", "arn:aws:s3:::b/k")]),
        ("s3", "ListObjectsV2", {"Bucket": "b", "Prefix": "jobs/"}, [("s3:ListBucket", "arn:aws:s3:::b")]),
        (
            "sqs",
            "SendMessage",
            {"QueueUrl": "https://sqs.us-east-1.amazonaws.com/123456789012/q.fifo", "MessageBody": "x"},
            [("sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:q.fifo")],
        ),
        ("stepfunctions", "SendTaskSuccess", {"taskToken": "t", "output": "{}"}, [("states:SendTaskSuccess", None)]),
        (
            "lambda",
            "Invoke",
            {"FunctionName": "fn"},
            [("lambda:InvokeFunction", f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:fn")],
        ),
        (
            "lambda",
            "Invoke",
            {"FunctionName": "fn", "Qualifier": "live"},
            [("lambda:InvokeFunction", f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:fn:live")],
        ),
        (
            "stepfunctions",
            "DescribeExecution",
            {"executionArn": "arn:aws:states:r:1:execution:m:x"},
            [("states:DescribeExecution", "arn:aws:states:r:1:execution:m:x")],
        ),
    ],
)
def test_operations_map_to_the_action_and_resource_aws_authorizes(service, operation, params, expected):
    requests = iam.requests_for(service, operation, params, REGION, ACCOUNT)
    assert [(r.action, r.resource) for r in requests] == expected


def test_listing_carries_its_prefix_as_the_s3_prefix_condition_key():
    (request,) = iam.requests_for("s3", "ListObjectsV2", {"Bucket": "b", "Prefix": "jobs/x/"}, REGION, ACCOUNT)
    assert request.context["s3:prefix"] == ("jobs/x/",)


def test_an_operation_the_table_does_not_know_fails_loudly():
    with pytest.raises(iam.UnmappedOperation, match="s3:CopyObject"):
        iam.requests_for("s3", "CopyObject", {"Bucket": "b", "Key": "k"}, REGION, ACCOUNT)


def _model(synth, refs=None):
    refs = refs or {}
    return iam.TemplateModel(synth.template, lambda logical, attr: refs.get(logical, {}).get(attr), REGION, ACCOUNT)


def _logical(template, prefix, cfn_type="AWS::Lambda::Function"):
    (found,) = [k for k, r in template["Resources"].items() if k.startswith(prefix) and r["Type"] == cfn_type]
    return found


def test_publishing_to_the_kms_encrypted_alarm_topic_also_needs_the_key(synth):
    topic = _logical(synth.template, "MonitoringAlarms", "AWS::SNS::Topic")
    key = _logical(synth.template, "MonitoringTopicKey", "AWS::KMS::Key")
    arn = f"arn:aws:sns:{REGION}:{ACCOUNT}:alarms"
    model = _model(synth, {topic: {"Ref": arn, "TopicArn": arn}, key: {"Arn": "arn:aws:kms:r:1:key/k"}})
    requests = iam.requests_for("sns", "Publish", {"TopicArn": arn, "Message": "m"}, REGION, ACCOUNT, model)
    assert [(r.action, r.resource) for r in requests] == [
        ("sns:Publish", arn),
        ("kms:GenerateDataKey", "arn:aws:kms:r:1:key/k"),
        ("kms:Decrypt", "arn:aws:kms:r:1:key/k"),
    ]
    check = _logical(synth.template, "MonitoringVarianceCheck")
    caller = iam.Caller("check", lambda: (model, check))
    assert iam.check_call(caller, "sns", "Publish", {"TopicArn": arn, "Message": "m"}, REGION) is None


# --------------------------------------------------------------------------------------------------
# Against the synthesized template


BUCKET = "iam-test-records"


def _bucket_model(synth):
    records = _logical(synth.template, "StorageRecords", "AWS::S3::Bucket")
    return _model(synth, {records: {"Ref": BUCKET, "Arn": f"arn:aws:s3:::{BUCKET}"}})


def _drop(template: dict, role_prefix: str, action: str, resource_suffix: str) -> dict:
    """A copy of ``template`` where the policy of the role named ``role_prefix`` no longer grants ``action`` on
    the resources ending in ``resource_suffix`` (everything else it granted stays)."""
    template = copy.deepcopy(template)
    dropped = 0
    for logical, resource in template["Resources"].items():
        if resource["Type"] != "AWS::IAM::Policy" or not logical.startswith(role_prefix):
            continue
        statements = []
        for st in resource["Properties"]["PolicyDocument"]["Statement"]:
            actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
            resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
            hit = [r for r in resources if action in actions and json.dumps(r).endswith(f'{resource_suffix}"]]}}')]
            rest = [r for r in resources if r not in hit]
            if rest:
                statements.append({**st, "Resource": rest})
            if hit and len(actions) > 1:
                statements.append({**st, "Action": [a for a in actions if a != action], "Resource": hit})
            dropped += len(hit)
        resource["Properties"]["PolicyDocument"]["Statement"] = statements
    assert dropped, f"{role_prefix} has no {action} on *{resource_suffix} to drop"
    return template


def test_the_harness_denies_a_call_whose_grant_was_removed_and_allows_it_otherwise(synth):
    score = _logical(synth.template, "RolloutWorkflowScore")
    params = {"Bucket": BUCKET, "Key": "runs/r/step=0/group=g/x.json", "Body": b"{}"}
    granted = iam.Caller("Score", lambda: (_bucket_model(synth), score))
    assert iam.check_call(granted, "s3", "PutObject", params, REGION) is None
    broken = _drop(synth.template, "RolloutWorkflowScoreServiceRoleDefaultPolicy", "s3:PutObject", "/runs/*")
    model = iam.TemplateModel(broken, _bucket_model(synth).lookup, REGION, ACCOUNT)
    denial = iam.check_call(iam.Caller("Score", lambda: (model, score)), "s3", "PutObject", params, REGION)
    assert denial and "s3:PutObject on arn:aws:s3:::iam-test-records/runs/r/step=0/group=g/x.json" in denial


def test_the_runner_roles_reach_s3_only_through_the_vpc_endpoint_and_only_jobs(synth):
    """The Fargate task role's grant holds aws:SourceVpce; the harness gives a VPC principal's S3 calls the
    endpoint's id and checks the endpoint policy too. The runner Lambda has no S3 grant at all."""
    model = _bucket_model(synth)
    task = _logical(synth.template, "CodeRunnerTask", "AWS::ECS::TaskDefinition")
    as_task = iam.Caller("task", lambda: (model, task))
    job = {"Bucket": BUCKET, "Key": "jobs/r/x/a/job.json"}
    assert iam.check_call(as_task, "s3", "GetObject", job, REGION) is None
    assert "not authorized" in iam.check_call(as_task, "s3", "GetObject", {**job, "Key": "tasks/t.json"}, REGION)
    # The same policy outside the VPC (no endpoint): the SourceVpce condition fails.
    frozen = iam.frozen_principal(model, task, "task")
    outside = {**frozen, "vpc": False}
    assert (
        frozen["vpc"]
        and not iam.evaluate(
            iam.Request("s3:GetObject", f"arn:aws:s3:::{BUCKET}/jobs/r/x/a/job.json"),
            identity=outside["identity"],
            resource_policies=[],
            endpoint_policy=None,
            principal_arn=outside["arn"],
            account=ACCOUNT,
            context={},
        ).allowed
    )
    runner = _logical(synth.template, "CodeRunnerFunction")
    as_runner = iam.Caller("runner", lambda: (model, runner))
    assert "not authorized" in iam.check_call(as_runner, "s3", "GetObject", job, REGION)
    # No other service is even reachable from the isolated VPC.
    assert "cannot reach" in iam.check_call(
        as_runner, "sqs", "SendMessage", {"QueueUrl": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/q"}, REGION
    )


def test_a_direct_handler_call_is_checked_as_its_function(aws, synth, monkeypatch):
    """A function of functions/<folder> called directly (tests/aws/handlers.py) is checked as the template's
    function with that code: the runner, which has no S3 grant, is refused what it could do before (read a job
    from jobs/), with the error AWS gives (403 AccessDenied)."""
    import boto3

    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=BUCKET)
    s3.put_object(Bucket=BUCKET, Key="jobs/j.json", Body=b"{}")
    monkeypatch.setenv("BUCKET", BUCKET)
    with iam.calling_as(harness.folder_caller("code_runner")), pytest.raises(ClientError) as caught:
        boto3.client("s3", region_name=REGION).get_object(Bucket=BUCKET, Key="jobs/j.json")
    assert caught.value.response["Error"]["Code"] == "AccessDenied"
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert iam.DENIALS and "functions/code_runner" in iam.DENIALS[0]
    iam.DENIALS.clear()  # seen: this test is about the denial
    # The test itself is nobody in particular: its own calls are not checked.
    boto3.client("s3", region_name=REGION).get_object(Bucket=BUCKET, Key="jobs/j.json")
    assert not iam.DENIALS


def _replay(sfn, deployment, rollout: str, **extra) -> dict:
    payload = {
        "run": "iam",
        "step": 0,
        "group": "g",
        "rollout": rollout,
        "task": TASK.model_dump(mode="json"),
        "policy": {"mode": "replay", "turns": [f"```python\n{TASK.reference_solution}\n```"]},
        **extra,
    }
    return harness.run_execution(sfn, deployment.state_machine_arn, payload)


def test_a_state_machine_run_with_a_removed_grant_is_caught(aws, synth, sfn, s3):
    """The class of bug this harness exists for: StartEpisode cannot write its episode snapshot. moto alone runs
    the rollout to an error record and the test would pass; the harness names the denied call."""
    broken = dataclasses.replace(
        synth,
        template=_drop(
            synth.template, "RolloutWorkflowStartEpisodeServiceRoleDefaultPolicy", "s3:PutObject", "/runs/*"
        ),
    )
    deployment = harness.Deployment(broken).deploy()
    desc = _replay(sfn, deployment, "denied")
    assert desc["status"] == "SUCCEEDED" and json.loads(desc["output"])["status"] == "error"
    assert any(
        "RolloutWorkflowStartEpisode" in d and "s3:PutObject" in d and "/runs/iam/state/" in d for d in iam.DENIALS
    ), iam.DENIALS
    iam.DENIALS.clear()


def test_the_fargate_container_is_checked_as_its_task_role_in_its_own_process(aws, synth, sfn, s3):
    """The container runs as a subprocess (tests/aws/harness.py run_container): its calls are checked there, as
    the task role, and a denial reaches the test. With the task role's read of jobs/ removed, the job cannot
    even be fetched."""
    broken = dataclasses.replace(
        synth, template=_drop(synth.template, "CodeRunnerTaskTaskRoleDefaultPolicy", "s3:GetObject", "/jobs/*")
    )
    deployment = harness.Deployment(broken).deploy()
    long_task = TASK.model_copy(update={"timeout_s": 900.0})  # above the routing threshold: Fargate
    desc = _replay(sfn, deployment, "fargate", task=long_task.model_dump(mode="json"))
    assert desc["status"] == "SUCCEEDED" and json.loads(desc["output"])["status"] == "error"
    assert harness.CONTAINER_RUNS and harness.CONTAINER_RUNS[-1]["returncode"] == 1
    assert any("task role" in d and "s3:GetObject" in d and "/jobs/" in d for d in iam.DENIALS), iam.DENIALS
    iam.DENIALS.clear()
