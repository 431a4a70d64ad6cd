"""Storage: the S3 bucket that holds tasks, Fargate job hand-offs, scored records and monitor verdicts."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_s3 as s3

from constructs import Construct
from stacks.config import StorageSettings

# Key layout (rewardpipe.store owns runs/; rewardpipe.aws owns tasks/ and jobs/).
RUNS_PREFIX = "runs/"
TASKS_PREFIX = "tasks/"
JOBS_PREFIX = "jobs/"
# Tasks a rollout was started with inline (rewardpipe.aws.rollout.inline_task_key): per run, like its records.
INLINE_TASKS_PREFIX = f"{TASKS_PREFIX}inline/"


class Storage(Construct):
    """Encrypted, TLS-only, private, versioned bucket with lifecycle rules, plus its access-log bucket.

    Versioning is on so an overwritten or deleted record can be recovered (records are keyed by
    rollout, so a re-score overwrites); old versions expire after ``noncurrent_version_days`` to keep
    the cost of that bounded.
    """

    def __init__(self, scope: Construct, construct_id: str, *, settings: StorageSettings) -> None:
        super().__init__(scope, construct_id)
        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            # ACLs off (Security Hub S3.12): S3 delivers the access logs under the bucket policy aws-cdk writes
            # for logging.s3.amazonaws.com (@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy), not an ACL grant.
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            removal_policy=RemovalPolicy.RETAIN,
            lifecycle_rules=[s3.LifecycleRule(id="expire-access-logs", expiration=Duration.days(90))],
        )
        self.bucket = s3.Bucket(
            self,
            "Records",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            versioned=True,
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix="records/",
            removal_policy=RemovalPolicy.RETAIN,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="old-runs",
                    prefix=RUNS_PREFIX,
                    transitions=[
                        s3.Transition(
                            storage_class=s3.StorageClass.INFREQUENT_ACCESS,
                            transition_after=Duration.days(settings.transition_to_ia_days),
                        )
                    ],
                    expiration=Duration.days(settings.expire_runs_days),
                ),
                # A run's inline tasks (hidden tests included) go with its records; tasks/ itself (task sets an
                # operator uploads) is kept.
                s3.LifecycleRule(
                    id="inline-tasks",
                    prefix=INLINE_TASKS_PREFIX,
                    expiration=Duration.days(settings.expire_runs_days),
                ),
                s3.LifecycleRule(
                    id="job-handoffs",
                    prefix=JOBS_PREFIX,
                    expiration=Duration.days(settings.job_objects_days),
                ),
                s3.LifecycleRule(
                    id="old-versions",
                    noncurrent_version_expiration=Duration.days(settings.noncurrent_version_days),
                    abort_incomplete_multipart_upload_after=Duration.days(7),
                    # Expiring a current version in a versioned bucket leaves a delete marker; once the version
                    # behind it expires too, the marker alone would stay for good (one per job hand-off, run
                    # record and inline task), slowing every listing of its prefix.
                    expired_object_delete_marker=True,
                ),
            ],
        )
