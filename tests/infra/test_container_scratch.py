"""The Fargate entry point as Fargate runs it, without a Docker engine: a non-root uid (the image's USER),
a read-only /tmp and /var/tmp (the task's read-only root filesystem), and a scratch volume that is either
root-owned 0755 (what Fargate gives a bind volume the image did not prepare) or owned by the runtime uid
(what the Dockerfile's mkdir + chown + VOLUME gives). A private mount namespace (``unshare -m``) makes the
read-only mounts without touching the host's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_UID = 10001  # the Dockerfile's USER
SYSTEM_PYTHON = "/usr/bin/python3.11"  # world-readable, unlike the venv's base interpreter under /root

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare") or not os.access(SYSTEM_PYTHON, os.X_OK),
    reason="needs root (to switch uid and mount) and a system Python 3.11",
)

PROBE = r"""
import io, json, os, sys
os.setgroups([]); os.setgid(UID); os.setuid(UID)
sys.path[:0] = PATHS
import entry
from rewardpipe.execution.result import ExecutionJob

class MemoryS3:
    def __init__(self, objects): self.objects = objects
    def get_object(self, Bucket, Key): return {"Body": io.BytesIO(self.objects[Key])}
    def put_object(self, Bucket, Key, Body, **kw): self.objects[Key] = Body if isinstance(Body, bytes) else Body.encode()

job = ExecutionJob(code="def add(a, b):\n    return a + b\n", entry_point="add",
                   tests="import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n        self.assertEqual(add(1, 2), 3)\n")
s3 = MemoryS3({"jobs/j.json": job.model_dump_json().encode()})
code = entry.main({"BUCKET": "b", "JOB_KEY": "jobs/j.json", "RESULT_KEY": "jobs/r.json", "TMPDIR": SCRATCH}, s3_client=s3)
result = json.loads(s3.objects["jobs/r.json"]) if "jobs/r.json" in s3.objects else None
print(json.dumps({"exit": code, "status": result and result["status"]}))
"""


def _run_entry_point(scratch: Path) -> tuple[dict, str]:
    import pydantic

    # The code and its libraries are bind-mounted under a private /mnt first, so the read-only /tmp below
    # hides nothing the probe needs even when the checkout or the venv lives under /tmp, and the runtime
    # uid reaches them even when they sit under a directory it cannot traverse (e.g. /root).
    site = Path(pydantic.__file__).resolve().parents[1]
    paths = ["/mnt/rp-code/containers/code_runner", "/mnt/rp-code", "/mnt/rp-site"]
    probe = (
        PROBE.replace("UID", str(RUNTIME_UID))
        .replace("PATHS", json.dumps(paths))
        .replace("SCRATCH", json.dumps(str(scratch)))
    )
    script = (
        "mount -t tmpfs -o mode=0755 tmpfs /mnt && mkdir /mnt/rp-code /mnt/rp-site "
        '&& mount --bind "$CODE" /mnt/rp-code && mount --bind "$SITE" /mnt/rp-site '
        "&& mount -t tmpfs -o ro,mode=1777 tmpfs /tmp && mount -t tmpfs -o ro,mode=1777 tmpfs /var/tmp "
        f'&& cd / && exec {SYSTEM_PYTHON} -I -c "$PROBE"'
    )
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        env={"PATH": "/usr/bin:/bin", "PROBE": probe, "CODE": str(ROOT), "SITE": str(site)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


@pytest.fixture
def scratch():
    # Outside /tmp, which the probe's namespace replaces with a read-only mount.
    path = Path(tempfile.mkdtemp(prefix="rewardpipe-scratch-", dir="/dev/shm"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_a_root_owned_scratch_volume_fails_the_job_with_a_message_saying_so(scratch):
    os.chown(scratch, 0, 0)
    os.chmod(scratch, 0o755)  # what Fargate makes of a bind volume the image did not prepare
    outcome, stderr = _run_entry_point(scratch)
    assert outcome == {"exit": 2, "status": None}  # no result written: the state machine records executor_crash
    assert f"not writable by uid {RUNTIME_UID}" in stderr and "owner uid 0" in stderr and "0755" in stderr


def test_a_scratch_volume_owned_by_the_runtime_user_runs_the_job(scratch):
    os.chown(scratch, RUNTIME_UID, RUNTIME_UID)
    os.chmod(scratch, 0o700)  # what the Dockerfile's mkdir + chown + VOLUME gives the task
    outcome, stderr = _run_entry_point(scratch)
    assert outcome == {"exit": 0, "status": "passed"}, stderr[-3000:]
