"""Round thirty, infrastructure: what the Nova bridge does that its roles must allow on the real service (moto
enforces no IAM).

An answer claims its rollout with a conditional create under ``nova/answers/`` before it writes and sends, and
releases the claim (``DeleteObject``) when the write or the send fails, so that the retry answers at once. The
functions that answer (intake, responder, sweeper) could delete only under ``nova/due/``: on AWS the release was
refused, and the rollout waited for the claim to go stale (a minute) before the next sweep answered it."""

from __future__ import annotations

import pytest

from tests.aws import harness
from tests.infra.test_round_twentysix_infra import _decide, _model

pytestmark = pytest.mark.xdist_group("cdk")

ANSWERING = ("Intake", "Responder", "Sweeper")


def _bridge_functions(model) -> dict[str, str]:
    functions = model.of_type("AWS::Lambda::Function")
    found = {}
    for role in ANSWERING:
        (logical,) = [name for name in functions if name.startswith("NovaBridge") and role in name]
        found[role] = logical
    return found


def test_the_functions_that_answer_may_release_an_answers_claim():
    model = _model(harness.synthesized(harness.NOVA_BRIDGE_CONTEXT).template)
    (bucket,) = [name for name in model.of_type("AWS::S3::Bucket") if name.startswith("StorageRecords")]
    claim = f"{bucket}-arn/nova/answers/rp-0123-abc.json"
    for role, function in _bridge_functions(model).items():
        assert _decide(model, function, "s3:DeleteObject", claim), role
        assert _decide(model, function, "s3:PutObject", claim), role  # the claim itself (a conditional create)
        # ... and no more than the bridge's bookkeeping: the run's records stay beyond its reach.
        assert not _decide(model, function, "s3:DeleteObject", f"{bucket}-arn/runs/r/records/x.json"), role
