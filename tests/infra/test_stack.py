"""Template assertions on the one shared synth: resources, properties, IAM scoping, alarms, dashboard."""

from __future__ import annotations

import json
import re

import pytest
from aws_cdk.assertions import Match

from stacks.config import load_settings
from tests.aws import harness

pytestmark = pytest.mark.xdist_group("cdk")

COMPONENTS = ["correctness", "asked_before_coding", "guessed_immediately", "loop_penalty"]


def _of_type(resources: dict, cfn_type: str) -> dict:
    return {k: v for k, v in resources.items() if v["Type"] == cfn_type}


def _statements(resources: dict, role_prefix: str) -> list[dict]:
    """Every policy statement attached to roles whose logical id starts with ``role_prefix``."""
    out = []
    for policy in _of_type(resources, "AWS::IAM::Policy").values():
        roles = [r.get("Ref", "") for r in policy["Properties"].get("Roles", [])]
        if any(r.startswith(role_prefix) for r in roles):
            out.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return out


def _resource_text(statement: dict) -> list[str]:
    resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
    return [json.dumps(r, sort_keys=True) for r in resources]


def _actions(statement: dict) -> list[str]:
    return statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]


# -- storage -------------------------------------------------------------------------------------


def test_records_bucket_is_encrypted_private_versioned_with_lifecycle(template):
    template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "BucketEncryption": {
                "ServerSideEncryptionConfiguration": [{"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
            },
            "PublicAccessBlockConfiguration": {
                "BlockPublicAcls": True,
                "BlockPublicPolicy": True,
                "IgnorePublicAcls": True,
                "RestrictPublicBuckets": True,
            },
            "VersioningConfiguration": {"Status": "Enabled"},
            "LoggingConfiguration": Match.object_like({"LogFilePrefix": "records/"}),
            "LifecycleConfiguration": {
                "Rules": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Id": "old-runs",
                                "Prefix": "runs/",
                                "ExpirationInDays": 365,
                                "Status": "Enabled",
                                "Transitions": [{"StorageClass": "STANDARD_IA", "TransitionInDays": 30}],
                            }
                        ),
                        Match.object_like({"Id": "job-handoffs", "Prefix": "jobs/", "ExpirationInDays": 7}),
                        Match.object_like(
                            {"Id": "old-versions", "NoncurrentVersionExpiration": {"NoncurrentDays": 30}}
                        ),
                    ]
                )
            },
        },
    )


def test_every_bucket_denies_plain_http(resources):
    buckets = _of_type(resources, "AWS::S3::Bucket")
    policies = _of_type(resources, "AWS::S3::BucketPolicy").values()
    protected = set()
    for policy in policies:
        for st in policy["Properties"]["PolicyDocument"]["Statement"]:
            if st["Effect"] == "Deny" and st.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false":
                protected.add(policy["Properties"]["Bucket"]["Ref"])
    assert protected == set(buckets), f"buckets without a TLS-only policy: {set(buckets) - protected}"


# -- single-turn reward ----------------------------------------------------------------------------


def test_single_turn_function_is_named_for_sagemaker_and_exported(synth, resources):
    functions = {
        k: v for k, v in _of_type(resources, "AWS::Lambda::Function").items() if k.startswith("SingleTurnReward")
    }
    assert len(functions) == 1
    ((logical, fn),) = functions.items()
    assert "SageMaker" in fn["Properties"]["FunctionName"]
    assert fn["Properties"]["Environment"]["Variables"]["REWARD_NAME"] == "gsm8k"
    assert fn["Properties"]["Handler"] == "handler.lambda_handler"
    outputs = synth.template["Outputs"]
    assert outputs["RewardLambdaName"]["Value"] == {"Ref": logical}
    assert outputs["RewardLambdaArn"]["Value"] == {"Fn::GetAtt": [logical, "Arn"]}


def test_single_turn_role_has_no_data_access(resources):
    for st in _statements(resources, "SingleTurnReward"):
        assert not any(a.startswith(("s3:", "sns:", "states:", "sqs:")) for a in _actions(st)), st


# -- code runner and network -----------------------------------------------------------------------


def test_sandbox_network_has_no_route_to_the_internet(template, resources):
    template.resource_count_is("AWS::EC2::NatGateway", 0)
    template.resource_count_is("AWS::EC2::InternetGateway", 0)
    for route in _of_type(resources, "AWS::EC2::Route").values():
        assert "GatewayId" not in route["Properties"] and "NatGatewayId" not in route["Properties"]
    services = []
    for endpoint in _of_type(resources, "AWS::EC2::VPCEndpoint").values():
        name = endpoint["Properties"]["ServiceName"]
        services.append(json.dumps(name))
    joined = " ".join(services)
    assert len(services) == 4
    for needed in (".s3", "ecr.api", "ecr.dkr", ".logs"):
        assert needed in joined, f"missing VPC endpoint for {needed}"
    template.has_resource_properties("AWS::EC2::FlowLog", {"ResourceType": "VPC"})


def test_sandbox_security_group_allows_nothing_in_and_only_https_to_the_endpoints(resources):
    groups = {k: v for k, v in _of_type(resources, "AWS::EC2::SecurityGroup").items() if "SandboxSg" in k}
    ((logical, sg),) = groups.items()
    assert "SecurityGroupIngress" not in sg["Properties"]
    # Inline: only the match-nothing placeholder, so EC2 does not add its default allow-all egress.
    assert sg["Properties"]["SecurityGroupEgress"] == [
        {
            "CidrIp": "255.255.255.255/32",
            "Description": "Disallow all traffic",
            "IpProtocol": "icmp",
            "FromPort": 252,
            "ToPort": 86,
        }
    ]
    egress = [
        e["Properties"]
        for e in _of_type(resources, "AWS::EC2::SecurityGroupEgress").values()
        if e["Properties"]["GroupId"] == {"Fn::GetAtt": [logical, "GroupId"]}
    ]
    assert sorted((e["FromPort"], e["ToPort"], e["IpProtocol"]) for e in egress) == [(443, 443, "tcp")] * 2
    assert not any("CidrIp" in e or "CidrIpv6" in e for e in egress)  # no 0.0.0.0/0, not even on 443
    (to_group,) = [e for e in egress if "DestinationSecurityGroupId" in e]
    assert to_group["DestinationSecurityGroupId"]["Fn::GetAtt"][0].startswith("NetworkEndpointSg")
    (to_s3,) = [e for e in egress if "DestinationPrefixListId" in e]
    lookup = resources[to_s3["DestinationPrefixListId"]["Fn::GetAtt"][0]]
    assert lookup["Type"] == "Custom::AWS" and "describeManagedPrefixLists" in json.dumps(lookup["Properties"])
    assert "com.amazonaws." in json.dumps(lookup["Properties"]) and ".s3" in json.dumps(lookup["Properties"])
    for ingress in _of_type(resources, "AWS::EC2::SecurityGroupIngress").values():
        assert ingress["Properties"]["SourceSecurityGroupId"] == {"Fn::GetAtt": [logical, "GroupId"]}


def test_model_code_runs_only_inside_the_isolated_vpc(resources):
    for logical, fn in _of_type(resources, "AWS::Lambda::Function").items():
        in_vpc = "VpcConfig" in fn["Properties"]
        assert in_vpc == logical.startswith(("CodeRunner", "SingleTurnReward")), logical


def test_fargate_task_is_hardened_and_its_role_limited_to_job_objects(template, resources):
    template.has_resource_properties(
        "AWS::ECS::TaskDefinition",
        {
            "RequiresCompatibilities": ["FARGATE"],
            "NetworkMode": "awsvpc",
            "ContainerDefinitions": [
                Match.object_like(
                    {
                        "Name": "runner",
                        "ReadonlyRootFilesystem": True,
                        "Memory": 2048,
                        "MountPoints": [{"ContainerPath": "/scratch", "ReadOnly": False, "SourceVolume": "scratch"}],
                    }
                )
            ],
        },
    )
    task_role_statements = _statements(resources, "CodeRunnerTaskTaskRole")
    assert task_role_statements, "the task role has no policy"
    for st in task_role_statements:
        assert set(_actions(st)) <= {"s3:GetObject", "s3:PutObject", "s3:ListBucket"}, st
        if "s3:ListBucket" in _actions(st):
            assert st["Condition"]["StringLike"] == {"s3:prefix": ["jobs/*"]}, st
        else:
            assert all("/jobs/*" in text for text in _resource_text(st)), st


def test_no_role_gets_bucket_wide_or_wildcard_s3(resources):
    for logical, policy in _of_type(resources, "AWS::IAM::Policy").items():
        for st in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = _actions(st)
            assert not any(a in ("s3:*", "*") or a.startswith("s3:Delete") for a in actions), (logical, st)
            if any(a in ("s3:GetObject", "s3:PutObject") for a in actions):
                for text in _resource_text(st):
                    assert re.search(r'/(tasks|jobs|runs)/\*"', text), (logical, text)


@pytest.mark.parametrize(
    "prefix, allowed",
    [
        (
            "RolloutWorkflowStartEpisode",
            {
                ("s3:GetObject", "tasks"),
                ("s3:PutObject", "tasks"),
                ("s3:GetObject", "runs"),
                ("s3:PutObject", "runs"),
                ("s3:PutObject", "jobs"),
            },
        ),
        (
            "RolloutWorkflowConverse",
            {("s3:GetObject", "tasks"), ("s3:GetObject", "runs"), ("s3:PutObject", "runs"), ("s3:PutObject", "jobs")},
        ),
        (
            "RolloutWorkflowScore",
            {("s3:GetObject", "tasks"), ("s3:GetObject", "jobs"), ("s3:GetObject", "runs"), ("s3:PutObject", "runs")},
        ),
        ("RolloutWorkflowRecordError", {("s3:GetObject", "runs"), ("s3:PutObject", "runs")}),
        ("CodeRunnerFunction", set()),  # the job and its result travel in the invoke (rewardpipe.aws.jobs)
    ],
)
def test_each_function_reaches_only_its_own_prefixes(resources, prefix, allowed):
    granted = set()
    for st in _statements(resources, prefix):
        for action in _actions(st):
            if action == "s3:ListBucket":
                (listed,) = st["Condition"]["StringLike"]["s3:prefix"]
                granted.add((action, listed.rstrip("/*")))
            elif action.startswith("s3:"):
                for text in _resource_text(st):
                    granted.add((action, re.search(r"/(\w+)/\*", text).group(1)))
    # Every reader may list exactly the prefixes it reads, so a missing key reads as 404, not 403.
    readable = {p for a, p in allowed if a == "s3:GetObject"}
    assert granted == allowed | {("s3:ListBucket", p) for p in readable}


# -- rollout workflow --------------------------------------------------------------------------------


def test_state_machine_is_standard_with_logging_and_tracing(template):
    template.has_resource_properties(
        "AWS::StepFunctions::StateMachine",
        {
            "StateMachineType": "STANDARD",
            "TracingConfiguration": {"Enabled": True},
            "LoggingConfiguration": Match.object_like({"Level": "ALL", "IncludeExecutionData": False}),
        },
    )


def _definition(resources) -> dict:
    (sm,) = _of_type(resources, "AWS::StepFunctions::StateMachine").values()
    parts = sm["Properties"]["DefinitionString"]["Fn::Join"][1]
    text = "".join(p if isinstance(p, str) else "ARN" for p in parts)
    return json.loads(text)


def test_every_task_state_catches_into_the_error_record(resources):
    states = _definition(resources)["States"]
    tasks = {name: s for name, s in states.items() if s["Type"] == "Task"}
    assert {"StartEpisodeStep", "ConverseStep", "RunCodeFargate", "ScoreStep", "RecordErrorStep"} <= set(tasks)
    assert "RunCodeLambda" not in states  # Score runs a Lambda job with the job inline: no state reads it from S3
    for name, state in tasks.items():
        catchers = state.get("Catch", [])
        # The conversation states' loop exits come first (they are not failures); then everything else.
        exits = [c for c in catchers if c["ErrorEquals"] != ["States.ALL"]]
        assert catchers[len(exits)]["ErrorEquals"] == ["States.ALL"] and len(catchers) == len(exits) + 1, name
        target = {
            "RecordErrorStep": "RecordWriteFailed",
            "ConverseStep": "ConverseFailed",
            "StartEpisodeStep": "StartEpisodeFailed",
        }.get(name, "RecordErrorStep")
        assert catchers[len(exits)]["Next"] == target, name
        if name in ("StartEpisodeStep", "ConverseStep"):
            assert {c["ErrorEquals"][0]: c["Next"] for c in exits} == {
                "Rollout.Finished": "Finished",
                "Rollout.RunCode": "ResumeWithJob",
            }, name
        else:
            assert not exits, name
        transient = {"Lambda.ServiceException", "ECS.AmazonECSException", "SQS.SdkClientException"}
        assert any(transient & set(r["ErrorEquals"]) for r in state.get("Retry", [])), f"{name} has no transient retry"


def test_long_jobs_go_to_fargate_with_the_job_passed_through_s3(resources):
    states = _definition(resources)["States"]
    fargate = states["RunCodeFargate"]
    assert fargate["Resource"].endswith(":states:::ecs:runTask.sync")
    env = fargate["Parameters"]["Overrides"]["ContainerOverrides"][0]["Environment"]
    assert {e["Name"]: e["Value.$"] for e in env} == {
        "JOB_KEY": "$.execution.job_key",
        "RESULT_KEY": "$.execution.result_key",
    }
    network = fargate["Parameters"]["NetworkConfiguration"]["AwsvpcConfiguration"]
    assert network.get("AssignPublicIp", "DISABLED") == "DISABLED"  # absent means DISABLED
    assert len(network["Subnets"]) == 2 and len(network["SecurityGroups"]) == 1
    choices = {c["And"][1]["StringEquals"]: c["Next"] for c in states["RouteJob"]["Choices"]}
    assert choices["run_lambda"] == "ScoreStep" and choices["run_fargate"] == "RunCodeFargate"
    assert choices["score"] == "ScoreStep"


def test_conversation_states_wait_for_their_task_token_and_loop_without_a_choice(resources):
    from rewardpipe.aws.rollout import FINISHED, RUN_CODE

    states = _definition(resources)["States"]
    start, converse = states["StartEpisodeStep"], states["ConverseStep"]
    for state in (start, converse):
        assert state["Resource"].endswith(":states:::lambda:invoke.waitForTaskToken")
        assert state["Parameters"]["Payload"]["task_token.$"] == "$$.Task.Token"
        assert state["TimeoutSeconds"] == 3600  # the trainer's turn
    # A trainer reply (or a resume) re-enters Converse directly: one transition per trainer turn.
    assert start["Next"] == "ConverseStep" and converse["Next"] == "ConverseStep"
    assert not any(s["Type"] == "Choice" and "ConverseStep" in json.dumps(s) for s in states.values())
    # Converse's input is only the reply: the ids come from the execution, retries are recognised by entry.
    payload = converse["Parameters"]["Payload"]
    assert payload["run.$"] == "$$.Execution.Input.run" and payload["attempt.$"] == "$$.Execution.Name"
    assert payload["entered.$"] == "$$.State.EnteredTime" and payload["retry_count.$"] == "$$.State.RetryCount"
    assert payload["reply.$"] == "$"
    # The handlers use the same error names the Catches route.
    assert {FINISHED, RUN_CODE} == {c["ErrorEquals"][0] for c in converse["Catch"][:2]}
    assert states["Finished"]["Parameters"] == {"output.$": "States.StringToJson($.Cause)"}
    assert states["Finished"].get("End") is True and states["Finished"]["OutputPath"] == "$.output"
    assert states["ResumeWithJob"]["Next"] == "RouteJob"


# The states whose input is a reference of bounded size (a StateRef, at most 200 KB: rewardpipe.aws.state).
BOUNDED_INPUT_STATES = {"RunCodeFargate", "ScoreStep"}


def test_no_catch_grows_an_input_that_may_be_near_256_kib(resources):
    """Step Functions fails a state whose output, or whose input after Parameters, is over 256 KiB with
    States.DataLimitExceeded, "a terminal error that can't be caught by the States.ALL error type"
    ("Handling errors in Step Functions workflows"): the execution then ends without a record. A Catch
    whose ResultPath adds the error (a cause of up to 32 KiB) to the state's input is therefore allowed
    only where that input is a bounded reference; StartEpisode (the raw execution input) and Converse (a
    trainer's reply), each up to 256 KiB, keep only the error, and nothing copies the execution input."""
    states = _definition(resources)["States"]
    for name, state in states.items():
        for catcher in state.get("Catch", []):
            if catcher.get("ResultPath", "$") != "$":
                assert name in BOUNDED_INPUT_STATES, (name, catcher)
    for name, failed in (("StartEpisodeStep", "StartEpisodeFailed"), ("ConverseStep", "ConverseFailed")):
        (catch_all,) = [c for c in states[name]["Catch"] if c["ErrorEquals"] == ["States.ALL"]]
        assert catch_all.get("ResultPath", "$") == "$" and catch_all["Next"] == failed
        assert states[failed]["Type"] == "Pass" and states[failed]["Next"] == "RecordErrorStep"
        assert states[failed]["Parameters"]["failed"] == {f"{name}.$": "$"}  # the error, under the state's name
    assert states["ConverseFailed"]["Parameters"]["run.$"] == "$$.Execution.Input.run"  # a validated id
    # RecordError finds a failed first state's rollout from the execution itself.
    assert states["RecordErrorStep"]["Parameters"]["execution.$"] == "$$.Execution.Id"
    assert '"$$.Execution.Input"' not in json.dumps(states)  # nothing copies the whole execution input


def test_record_error_may_read_back_only_this_state_machines_executions(resources):
    (sm,) = _of_type(resources, "AWS::StepFunctions::StateMachine").values()
    name = sm["Properties"]["StateMachineName"]
    (describe,) = [
        st for st in _statements(resources, "RolloutWorkflowRecordError") if "states:DescribeExecution" in _actions(st)
    ]
    assert _actions(describe) == ["states:DescribeExecution"]
    assert _resource_text(describe) == [
        json.dumps(
            {
                "Fn::Join": [
                    "",
                    [
                        "arn:",
                        {"Ref": "AWS::Partition"},
                        ":states:",
                        {"Ref": "AWS::Region"},
                        ":",
                        {"Ref": "AWS::AccountId"},
                        f":execution:{name}:*",
                    ],
                ]
            },
            sort_keys=True,
        )
    ]


def test_conversation_functions_may_complete_their_task_tokens_and_nothing_more(resources):
    for prefix in ("RolloutWorkflowStartEpisode", "RolloutWorkflowConverse"):
        statements = _statements(resources, prefix)
        token = [st for st in statements if "states:SendTaskFailure" in _actions(st)]
        assert len(token) == 1 and set(_actions(token[0])) == {"states:SendTaskSuccess", "states:SendTaskFailure"}
        assert token[0]["Resource"] == "*"  # see test_task_token_actions_are_granted_on_all_resources_and_alone
        assert any("sqs:SendMessage" in _actions(st) for st in statements)
        invoke = [st for st in statements if "lambda:InvokeFunction" in _actions(st)]
        assert invoke and all("CodeRunnerFunction" in json.dumps(st["Resource"]) for st in invoke)


def test_conversation_functions_get_the_conversation_memory(resources):
    memory = {k: fn["Properties"].get("MemorySize") for k, fn in _of_type(resources, "AWS::Lambda::Function").items()}
    assert [
        v for k, v in memory.items() if k.startswith(("RolloutWorkflowStartEpisode", "RolloutWorkflowConverse"))
    ] == [256, 256]


def test_routing_threshold_and_turn_limit_come_from_context(resources):
    env = next(
        fn["Properties"]["Environment"]["Variables"]
        for k, fn in _of_type(resources, "AWS::Lambda::Function").items()
        if k.startswith("RolloutWorkflowConverse")
    )
    assert env["ROUTING_THRESHOLD_S"] == "600"
    assert env["MAX_TURNS"] == "6"
    assert json.loads(env["REWARD_WEIGHTS"]) == {
        "correctness": 1.0,
        "asked_before_coding": 0.6,
        "guessed_immediately": 0.4,
        "loop_penalty": 0.2,
    }


# -- monitoring ------------------------------------------------------------------------------------


def _assert_counts_checked_steps(alarm: dict, *, threshold: int) -> None:
    """A streak alarm: the check emits the streak once per newly checked step, so one datapoint decides
    and no datapoints (training paused) change nothing; it notifies the topic of both transitions."""
    assert alarm["Namespace"] == "RewardPipe"
    assert alarm["Threshold"] == threshold and alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert alarm["EvaluationPeriods"] == 1 and alarm.get("DatapointsToAlarm", 1) == 1
    assert alarm["TreatMissingData"] == "ignore"
    assert len(alarm["AlarmActions"]) == 1 and alarm["AlarmActions"][0]["Ref"].startswith("MonitoringAlarms")
    assert alarm["OKActions"] == alarm["AlarmActions"]


def test_one_dead_component_alarm_per_component_counting_checked_steps(resources, synth):
    alarms = [
        a["Properties"]
        for a in _of_type(resources, "AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("MetricName") == "DeadStreak"
    ]
    by_component = {next(d["Value"] for d in a["Dimensions"] if d["Name"] == "component"): a for a in alarms}
    assert sorted(by_component) == sorted(COMPONENTS)
    for alarm in by_component.values():
        _assert_counts_checked_steps(alarm, threshold=3)  # alarms.dead_steps consecutive dead checked steps
    assert not [
        a
        for a in _of_type(resources, "AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("MetricName") == "ZeroVarianceGroupFraction"
    ]


def test_error_rate_alarm_counts_checked_steps_not_minutes(resources):
    """Like the dead-component alarms: ErrorStreak (consecutive checked steps with an error rate of at least
    alarms.error_rate) is emitted once per newly checked step, so one datapoint decides, steps far apart
    still alarm and a pause in training (no datapoints) sends no false "OK"."""
    (alarm,) = [
        a["Properties"]
        for a in _of_type(resources, "AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("AlarmName") == "RewardPipe-error-rate"
    ]
    assert alarm["MetricName"] == "ErrorStreak"
    assert alarm["Dimensions"] == [{"Name": "service", "Value": "rewardpipe"}]  # the longest streak of the active runs
    _assert_counts_checked_steps(alarm, threshold=3)  # alarms.error_steps
    assert not [
        a
        for a in _of_type(resources, "AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("MetricName") == "ErrorRate"
    ]


def test_the_check_and_the_alarms_take_their_thresholds_from_one_setting(synth, tmp_path):
    """alarms.* feeds both the variance check's environment and the alarm thresholds, and a variable the
    check does not get falls back to the same default the stack has: they cannot disagree."""
    from aws_cdk.assertions import Template

    from app import build_app
    from rewardpipe.aws.settings import Settings
    from rewardpipe.monitoring import AlarmPolicy

    policy = {"zero_variance_fraction": 0.8, "dead_steps": 5, "error_rate": 0.2, "error_steps": 4}
    _, stack = build_app(
        context={"rewardpipe": {"stack_name": "RewardPipePolicy", "alarms": policy}}, outdir=str(tmp_path)
    )
    resources = Template.from_stack(stack).to_json()["Resources"]
    (check_env,) = [
        fn["Properties"]["Environment"]["Variables"]
        for fn in _of_type(resources, "AWS::Lambda::Function").values()
        if "ALARM_TOPIC_ARN" in fn["Properties"].get("Environment", {}).get("Variables", {})
    ]
    assert Settings.from_env(check_env).alarm_policy == AlarmPolicy(**policy)
    alarms = {
        a["Properties"]["AlarmName"]: a["Properties"] for a in _of_type(resources, "AWS::CloudWatch::Alarm").values()
    }
    assert alarms["RewardPipePolicy-error-rate"]["Threshold"] == policy["error_steps"]
    assert {a["Threshold"] for name, a in alarms.items() if "dead-component" in name} == {policy["dead_steps"]}
    # The defaults: the stack's, the check's without any variable, and the policy's are one.
    stack_default = load_settings({}).alarms
    assert (
        Settings().alarm_policy
        == Settings.from_env({}).alarm_policy
        == AlarmPolicy(**{name: getattr(stack_default, name) for name in AlarmPolicy.model_fields})
    )


def test_failed_execution_alarm_notifies_the_topic(template):
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "Metrics": Match.array_with(
                [
                    Match.object_like({"Expression": "FILL(failed, 0) + FILL(timedOut, 0)"}),
                    Match.object_like(
                        {
                            "Id": "failed",
                            "MetricStat": Match.object_like(
                                {
                                    "Metric": Match.object_like(
                                        {"MetricName": "ExecutionsFailed", "Namespace": "AWS/States"}
                                    )
                                }
                            ),
                        }
                    ),
                    Match.object_like(
                        {
                            "Id": "timedOut",
                            "MetricStat": Match.object_like(
                                {
                                    "Metric": Match.object_like(
                                        {"MetricName": "ExecutionsTimedOut", "Namespace": "AWS/States"}
                                    )
                                }
                            ),
                        }
                    ),
                ]
            ),
            "AlarmActions": [{"Ref": Match.string_like_regexp("^MonitoringAlarms")}],
        },
    )


def test_alarm_topic_is_encrypted_with_a_key_cloudwatch_may_use(template, resources):
    template.has_resource_properties("AWS::SNS::Topic", {"KmsMasterKeyId": Match.any_value()})
    (key,) = _of_type(resources, "AWS::KMS::Key").values()
    assert key["Properties"]["EnableKeyRotation"] is True
    principals = [st.get("Principal", {}).get("Service") for st in key["Properties"]["KeyPolicy"]["Statement"]]
    assert "cloudwatch.amazonaws.com" in principals


def test_no_email_subscription_unless_configured(template):
    template.resource_count_is("AWS::SNS::Subscription", 0)


def test_dashboard_shows_variance_zero_fraction_errors_and_latency(resources):
    (dashboard,) = _of_type(resources, "AWS::CloudWatch::Dashboard").values()
    body = dashboard["Properties"]["DashboardBody"]
    text = body if isinstance(body, str) else json.dumps(body)
    for title in (
        "Within-group std by component",
        "Zero-variance group fraction by component",
        "Error rate",
        "Execution latency",
    ):
        assert title in text
    for component in COMPONENTS:
        assert text.count(f'\\"component\\",\\"{component}\\"') >= 3 or text.count(f'"component","{component}"') >= 3


def test_variance_check_runs_on_a_schedule_and_can_publish(template, resources):
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Handler": "handler.lambda_handler",
            "Environment": {
                "Variables": Match.object_like(
                    {"ZERO_VARIANCE_FRACTION": "0.9", "DEAD_STEPS": "3", "ALARM_TOPIC_ARN": Match.any_value()}
                )
            },
        },
    )
    template.has_resource_properties(
        "AWS::Events::Rule", {"ScheduleExpression": "rate(15 minutes)", "State": "ENABLED"}
    )
    actions = [a for st in _statements(resources, "MonitoringVarianceCheck") for a in _actions(st)]
    assert "sns:Publish" in actions and "s3:ListBucket" in actions
    listing = next(st for st in _statements(resources, "MonitoringVarianceCheck") if "s3:ListBucket" in _actions(st))
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["runs/*"]}}


def test_stack_is_environment_agnostic(synth):
    assert synth.stack.environment == "aws://unknown-account/unknown-region"
    text = json.dumps(synth.template)
    assert "dummy1a" not in text and "123456789012" not in text


# -- settings validation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, fragment",
    [
        ({"execution_routing_threshold_s": 880}, "execution_routing_threshold_s=880"),
        ({"reward_weights": {"corectness": 1}}, "corectness"),
        ({"reward_name": "nope"}, "unknown reward 'nope'"),
        # The error-rate alarm's M of N periods are gone: an old cdk.json is told what replaced them.
        ({"alarms": {"datapoints_to_alarm": 3, "evaluation_periods": 5}}, "set alarms.error_steps"),
        ({"alarms": {"error_steps": 0}}, "rewardpipe.alarms.error_steps"),
        ({"alarms": {"email": "not-an-address"}}, "rewardpipe.alarms.email"),
        ({"lambda": {"code_runner_timeout_s": 901}}, "rewardpipe.lambda.code_runner_timeout_s"),
        ({"fargate": {"cpu": 300}}, "fargate.cpu"),
        ({"group_sise": 8}, "rewardpipe.group_sise"),
        ("{not json", "not valid JSON"),
    ],
)
def test_bad_settings_fail_with_a_message_naming_the_setting(raw, fragment):
    from stacks.config import SettingsError

    with pytest.raises(SettingsError) as info:
        load_settings(raw)
    assert fragment in str(info.value)


def _alarm_windows(template: dict) -> list[tuple[str, int, int]]:
    """(alarm, period in seconds, evaluation periods) of every alarm; a math alarm by each metric's period."""
    out = []
    for logical, alarm in template["Resources"].items():
        if alarm["Type"] != "AWS::CloudWatch::Alarm":
            continue
        props = alarm["Properties"]
        periods = (
            [props["Period"]]
            if "Period" in props
            else [m["MetricStat"]["Period"] for m in props["Metrics"] if "MetricStat" in m]
            + [m["Period"] for m in props["Metrics"] if "Period" in m]
        )
        out.extend((logical, int(period), int(props["EvaluationPeriods"])) for period in periods)
    return out


@pytest.mark.parametrize(
    "context",
    [
        "",
        harness.NOVA_BRIDGE_CONTEXT,
        json.dumps({"rewardpipe": {"monitor_schedule_minutes": 1440, "alarms": {"period_minutes": 1440}}}),
    ],
    ids=["default", "nova-bridge", "longest-settings"],
)
def test_every_alarm_window_is_one_cloudwatch_accepts(context):
    """PutMetricAlarm (EvaluationPeriods): period × evaluation periods at most 604,800 s, and at most
    86,400 s when the period is under 3,600 s; a period is 10, 20, 30 or a multiple of 60 seconds."""
    windows = _alarm_windows(harness.synthesized(context).template)
    assert len(windows) >= 10
    for logical, period, evaluations in windows:
        assert period in (10, 20, 30) or period % 60 == 0, (logical, period)
        assert period * evaluations <= (86_400 if period < 3_600 else 604_800), (logical, period, evaluations)


def test_settings_from_a_cli_json_string():
    settings = load_settings('{"group_size": 16, "alarms": {"email": "ops@example.com"}}')
    assert settings.group_size == 16 and settings.alarms.email == "ops@example.com"


def test_context_changes_the_alarms_the_subscription_and_the_routing(synth, tmp_path):
    """A second synth with other settings (the jsii runtime is warm by now, so it is cheap)."""
    from aws_cdk.assertions import Template

    from app import build_app
    from rewardpipe.rewards import get_reward

    settings = {
        "stack_name": "RewardPipeAlt",
        "reward_name": "code_correctness",
        "execution_routing_threshold_s": 120,
        "alarms": {"email": "ops@example.com", "zero_variance_fraction": 0.8, "dead_steps": 5},
    }
    _, stack = build_app(context={"rewardpipe": settings}, outdir=str(tmp_path))
    alt = Template.from_stack(stack)
    alt.has_resource_properties("AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "ops@example.com"})
    alarms = alt.find_resources("AWS::CloudWatch::Alarm", {"Properties": {"MetricName": "DeadStreak"}})
    components = sorted(
        next(d["Value"] for d in a["Properties"]["Dimensions"] if d["Name"] == "component") for a in alarms.values()
    )
    assert components == sorted(get_reward("code_correctness").component_names)
    assert {a["Properties"]["Threshold"] for a in alarms.values()} == {5}
    alt.has_resource_properties(
        "AWS::Lambda::Function",
        {"Environment": {"Variables": Match.object_like({"ZERO_VARIANCE_FRACTION": "0.8", "DEAD_STEPS": "5"})}},
    )
    alt.has_resource_properties("AWS::Lambda::Function", {"FunctionName": "RewardPipeAlt-SageMaker-reward"})
    alt.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Environment": {
                "Variables": Match.object_like({"ROUTING_THRESHOLD_S": "120", "REWARD_NAME": "code_correctness"})
            }
        },
    )


def test_state_machine_role_invokes_only_the_workflow_functions(resources):
    # The code runner is invoked by the functions that hold the job (conversation states, Score), never by the
    # state machine, which has only a reference.
    ours = {k for k in _of_type(resources, "AWS::Lambda::Function") if k.startswith("RolloutWorkflow")}
    invoked = set()
    for st in _statements(resources, "RolloutWorkflowStateMachineRole"):
        if "lambda:InvokeFunction" in _actions(st):
            for resource in st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]:
                text = json.dumps(resource)
                match = re.search(r'"Fn::GetAtt": \["(\w+)", "Arn"\]', text)
                assert match, f"invoke permission on something other than a function of this stack: {text}"
                invoked.add(match.group(1))
    assert invoked == ours
    actions = {a for st in _statements(resources, "RolloutWorkflowStateMachineRole") for a in _actions(st)}
    assert not any(a.startswith("s3:") for a in actions)  # data moves only through the functions
    assert {"ecs:RunTask", "iam:PassRole"} <= actions  # turn requests are sent by the conversation functions


def test_endpoints_serve_only_this_stack_and_dns_leaves_only_for_aws(synth, resources):
    endpoints = _of_type(resources, "AWS::EC2::VPCEndpoint")
    gateway = [
        e["Properties"] for e in endpoints.values() if e["Properties"].get("VpcEndpointType", "Gateway") == "Gateway"
    ]
    (s3,) = gateway
    statements = s3["PolicyDocument"]["Statement"]
    resources_allowed = sorted(
        json.dumps(r)
        for st in statements
        for r in (st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]])
    )
    assert len(resources_allowed) == 3
    assert any("starport-layer-bucket/*" in r for r in resources_allowed)
    assert any("/jobs/*" in r and "StorageRecords" in r for r in resources_allowed)
    # The bucket itself only for listing jobs/ (so a missing job object reads as 404, not 403).
    (listing,) = [
        st
        for st in statements
        if "/" not in json.dumps(st["Resource"]).split("Arn")[-1] and "starport" not in json.dumps(st["Resource"])
    ]
    assert listing["Action"] == "s3:ListBucket" and listing["Condition"] == {"StringLike": {"s3:prefix": ["jobs/*"]}}
    for endpoint in endpoints.values():
        props = endpoint["Properties"]
        if props.get("VpcEndpointType") == "Interface":
            (st,) = props["PolicyDocument"]["Statement"]
            assert st["Condition"] == {"StringEquals": {"aws:PrincipalAccount": {"Ref": "AWS::AccountId"}}}
    (group,) = _of_type(resources, "AWS::Route53Resolver::FirewallRuleGroup").values()
    rules = sorted(group["Properties"]["FirewallRules"], key=lambda r: r["Priority"])
    assert [(r["Action"], r.get("BlockResponse")) for r in rules] == [("ALLOW", None), ("BLOCK", "NXDOMAIN")]
    from stacks.names import render

    commercial = {"AWS::Partition": "aws", "AWS::Region": "us-east-1"}  # the other partitions: test_resource_names.py
    lists = {
        k: [render(d, synth.template, commercial) for d in v["Properties"]["Domains"]]
        for k, v in _of_type(resources, "AWS::Route53Resolver::FirewallDomainList").items()
    }
    assert rules[0]["FirewallDomainListId"]["Fn::GetAtt"][0] in {
        k for k, d in lists.items() if d == ["amazonaws.com", "*.amazonaws.com"]
    }
    assert rules[1]["FirewallDomainListId"]["Fn::GetAtt"][0] in {k for k, d in lists.items() if d == ["*"]}
    (association,) = _of_type(resources, "AWS::Route53Resolver::FirewallRuleGroupAssociation").values()
    assert association["Properties"]["VpcId"]["Ref"].startswith("NetworkVpc")
