"""Network: an isolated VPC for everything that runs model code. No internet route at all.

Subnets are PRIVATE_ISOLATED (no NAT, no internet gateway). The only ways out are VPC endpoints:
an S3 gateway endpoint (job hand-off objects and ECR image layers) and interface endpoints for ECR
(API and registry, to pull the runner image) and CloudWatch Logs (the container's awslogs driver).

Model code in Fargate or Lambda cannot be put in its own network namespace, so the network it can
reach is made useless to it instead:

* endpoint policies: the S3 endpoint serves only this stack's ``jobs/`` objects and the ECR layer
  bucket; the interface endpoints serve only principals of this account (so credentials an attacker
  embeds in model code cannot write to the attacker's own bucket or log group);
* Route 53 Resolver DNS Firewall: names outside the partition's AWS domain (``amazonaws.com``, or
  ``amazonaws.com.cn`` in the China regions) get NXDOMAIN, which closes DNS tunnelling through the VPC
  resolver (security groups do not filter DNS).

What differs between partitions (the DNS suffix; the ECR endpoints' service names in China) is looked up
from ``AWS::Partition`` in a mapping (stacks/partitions.py): the stack stays environment-agnostic, and a
partition it was not built for fails at that lookup instead of deploying a firewall that blocks AWS itself.
"""

from __future__ import annotations

from typing import cast

from aws_cdk import Aws, CfnMapping, Fn, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_route53resolver as resolver
from aws_cdk import custom_resources as cr

from constructs import Construct
from stacks.constructs.common import LOG_RETENTION, limit_trust_to_this_account
from stacks.partitions import dns_mapping

# CDK's own "disallow all traffic" rule: ICMP type 252 code 86 to 255.255.255.255/32 matches nothing.
NO_TRAFFIC_RULE = {
    "CidrIp": "255.255.255.255/32",
    "Description": "Disallow all traffic",
    "IpProtocol": "icmp",
    "FromPort": 252,
    "ToPort": 86,
}


class Network(Construct):
    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        flow_logs = logs.LogGroup(
            self, "FlowLogs", retention=logs.RetentionDays.ONE_MONTH, removal_policy=RemovalPolicy.DESTROY
        )
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            max_azs=2,
            nat_gateways=0,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="sandbox", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED, cidr_mask=24)
            ],
            flow_logs={
                "all": ec2.FlowLogOptions(
                    destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_logs),
                    traffic_type=ec2.FlowLogTrafficType.REJECT,
                )
            },
            restrict_default_security_group=True,
        )
        # The flow log's delivery role trusts the service for this account's flow logs only (Amazon VPC User
        # Guide, "IAM role for publishing flow logs to CloudWatch Logs").
        flow_log_role = cast(iam.IRole, self.vpc.node.find_child("all").node.find_child("IAMRole"))
        limit_trust_to_this_account(
            flow_log_role,
            "vpc-flow-logs.amazonaws.com",
            f"arn:{Aws.PARTITION}:ec2:{Aws.REGION}:{Aws.ACCOUNT_ID}:vpc-flow-log/*",
        )
        self.subnets = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)

        # The security group of every sandbox workload (runner Lambda, Fargate task, single-turn Lambda):
        # nothing inbound; outbound HTTPS to the interface endpoints' group and to S3's managed prefix list
        # (the gateway endpoint's destinations), and nowhere else, not even 0.0.0.0/0 with no route.
        self.sandbox_sg = ec2.SecurityGroup(
            self,
            "SandboxSg",
            vpc=self.vpc,
            allow_all_outbound=False,
            description="rewardpipe sandbox: no inbound, HTTPS out to VPC endpoints only",
        )
        endpoint_sg = ec2.SecurityGroup(
            self,
            "EndpointSg",
            vpc=self.vpc,
            allow_all_outbound=False,
            description="rewardpipe interface endpoints: HTTPS from the sandbox only",
        )
        endpoint_sg.add_ingress_rule(self.sandbox_sg, ec2.Port.tcp(443), "HTTPS from sandbox workloads")
        self.sandbox_sg.add_egress_rule(endpoint_sg, ec2.Port.tcp(443), "HTTPS to the interface endpoints")

        self.s3_endpoint = self.vpc.add_gateway_endpoint(
            "S3", service=ec2.GatewayVpcEndpointAwsService.S3, subnets=[self.subnets]
        )
        self.sandbox_sg.add_egress_rule(
            ec2.Peer.prefix_list(self._s3_prefix_list_id()),
            ec2.Port.tcp(443),
            "HTTPS to S3 through the gateway endpoint",
        )
        # Both rules are separate SecurityGroupEgress resources. A group declared without any inline egress
        # rule gets EC2's default allow-all egress, which separate rules do not remove, so keep CDK's
        # match-nothing placeholder inline: the group then allows exactly the two rules above.
        cfn_group = cast(ec2.CfnSecurityGroup, self.sandbox_sg.node.default_child)  # a SecurityGroup's L1 resource
        cfn_group.add_property_override("SecurityGroupEgress", [NO_TRAFFIC_RULE])
        # Fargate pulls image layers from ECR's S3 bucket through this endpoint.
        self.s3_endpoint.add_to_policy(
            iam.PolicyStatement(
                principals=[iam.AnyPrincipal()],
                actions=["s3:GetObject"],
                resources=[f"arn:{Aws.PARTITION}:s3:::prod-{Aws.REGION}-starport-layer-bucket/*"],
            )
        )
        self.partition_dns = CfnMapping(self, "PartitionDns", mapping=dns_mapping())
        self.interface_endpoints: list[ec2.InterfaceVpcEndpoint] = []
        for name, service in (
            ("EcrApi", self._partition_service("EcrEndpointPrefix", "ecr.api")),
            ("EcrDocker", self._partition_service("EcrEndpointPrefix", "ecr.dkr")),
            # CloudWatch Logs is com.amazonaws.<region>.logs in every supported partition.
            ("Logs", ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS),
        ):
            endpoint = self.vpc.add_interface_endpoint(
                name,
                service=service,
                subnets=self.subnets,
                security_groups=[endpoint_sg],
                private_dns_enabled=True,
                open=False,
            )
            endpoint.add_to_policy(
                iam.PolicyStatement(
                    principals=[iam.AnyPrincipal()],
                    actions=["*"],
                    resources=["*"],
                    conditions={"StringEquals": {"aws:PrincipalAccount": Aws.ACCOUNT_ID}},
                )
            )
            self.interface_endpoints.append(endpoint)
        self._endpoint_sg = endpoint_sg
        self.bedrock_endpoint: ec2.InterfaceVpcEndpoint | None = None
        self._dns_firewall()

    def allow_bedrock_model(self, model_arn: str) -> ec2.InterfaceVpcEndpoint:
        """A bedrock-runtime interface endpoint serving one model to this account's principals (the LLM judge of
        the single-turn reward Lambda, which has no other way out). Only when a Bedrock judge is configured: an
        interface endpoint is billed per hour and AZ. Model code in the sandbox reaches it without credentials."""
        if self.bedrock_endpoint is None:
            self.bedrock_endpoint = self.vpc.add_interface_endpoint(
                "BedrockRuntime",
                service=ec2.InterfaceVpcEndpointAwsService.BEDROCK_RUNTIME,
                subnets=self.subnets,
                security_groups=[self._endpoint_sg],
                private_dns_enabled=True,
                open=False,
            )
            self.interface_endpoints.append(self.bedrock_endpoint)
        self.bedrock_endpoint.add_to_policy(
            iam.PolicyStatement(
                principals=[iam.AnyPrincipal()],
                actions=["bedrock:InvokeModel"],
                resources=[model_arn],
                conditions={"StringEquals": {"aws:PrincipalAccount": Aws.ACCOUNT_ID}},
            )
        )
        return self.bedrock_endpoint

    def _partition_service(self, prefix_key: str, service: str) -> ec2.InterfaceVpcEndpointService:
        """An interface endpoint service named ``<partition's prefix>.<region>.<service>``: for an
        environment-agnostic stack CDK writes ``com.amazonaws.`` whatever the partition, which in the China
        regions names an ECR endpoint service that does not exist there."""
        prefix = self.partition_dns.find_in_map(Aws.PARTITION, prefix_key)
        return ec2.InterfaceVpcEndpointService(Fn.join(".", [prefix, Aws.REGION, service]), 443)

    def _s3_prefix_list_id(self) -> str:
        """The id of the region's AWS-managed S3 prefix list (com.amazonaws.<region>.s3).

        CloudFormation has no way to name it and a context lookup would tie the stack to one account and
        region, so a deploy-time SDK call reads it (DescribeManagedPrefixLists, read-only)."""
        lookup = cr.AwsCustomResource(
            self,
            "S3PrefixList",
            on_update=cr.AwsSdkCall(
                service="EC2",
                action="describeManagedPrefixLists",
                parameters={"Filters": [{"Name": "prefix-list-name", "Values": [f"com.amazonaws.{Aws.REGION}.s3"]}]},
                physical_resource_id=cr.PhysicalResourceId.of(f"s3-prefix-list-{Aws.REGION}"),
                output_paths=["PrefixLists.0.PrefixListId"],
            ),
            policy=cr.AwsCustomResourcePolicy.from_sdk_calls(resources=cr.AwsCustomResourcePolicy.ANY_RESOURCE),
            install_latest_aws_sdk=False,
            # Its handler's logs expire like every function's (aws-cdk's default group keeps them two years).
            log_group=logs.LogGroup(
                self, "S3PrefixListLogs", retention=LOG_RETENTION, removal_policy=RemovalPolicy.DESTROY
            ),
        )
        return lookup.get_response_field("PrefixLists.0.PrefixListId")

    def allow_bucket_prefix(self, bucket_arn: str, prefix: str) -> None:
        """Let the S3 endpoint serve one prefix of one bucket (read, write, and listing that prefix so a
        missing key reads as 404)."""
        self.s3_endpoint.add_to_policy(
            iam.PolicyStatement(
                principals=[iam.AnyPrincipal()],
                actions=["s3:GetObject", "s3:PutObject"],
                resources=[f"{bucket_arn}/{prefix}*"],
            )
        )
        self.s3_endpoint.add_to_policy(
            iam.PolicyStatement(
                principals=[iam.AnyPrincipal()],
                actions=["s3:ListBucket"],
                resources=[bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{prefix}*"]}},
            )
        )

    def _dns_firewall(self) -> None:
        # Named per stack and region, so two deployments in one account are told apart; the suffixes are short
        # because the names must fit in 64 characters with the longest region name (stacks/names.py).
        prefix = f"{Stack.of(self).stack_name}-{Aws.REGION}"
        suffix = self.partition_dns.find_in_map(Aws.PARTITION, "DnsSuffix")
        allowed = resolver.CfnFirewallDomainList(
            self, "AwsDomains", name=f"{prefix}-aws", domains=[suffix, Fn.join("", ["*.", suffix])]
        )
        everything = resolver.CfnFirewallDomainList(self, "AllDomains", name=f"{prefix}-any", domains=["*"])
        group = resolver.CfnFirewallRuleGroup(
            self,
            "DnsFirewall",
            name=f"{prefix}-dns",
            firewall_rules=[
                resolver.CfnFirewallRuleGroup.FirewallRuleProperty(
                    firewall_domain_list_id=allowed.attr_id, priority=100, action="ALLOW"
                ),
                resolver.CfnFirewallRuleGroup.FirewallRuleProperty(
                    firewall_domain_list_id=everything.attr_id, priority=200, action="BLOCK", block_response="NXDOMAIN"
                ),
            ],
        )
        resolver.CfnFirewallRuleGroupAssociation(
            self,
            "DnsFirewallAssociation",
            firewall_rule_group_id=group.attr_id,
            vpc_id=self.vpc.vpc_id,
            priority=101,
            name=f"{prefix}-dns",
        )
