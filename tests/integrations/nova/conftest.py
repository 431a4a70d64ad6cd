"""The AWS harness fixtures (moto account, synthesized stack deployed into it) for the Nova bridge tests."""

from tests.aws.conftest import _restore_dumpable, aws, deployment, s3, sfn, synth  # noqa: F401
