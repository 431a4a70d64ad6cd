"""Round thirty-eight, the test suite on a loaded machine: the AWS harness's code cache under concurrent runs.

The harness unpacks each Lambda function's zip once per content under this host's /tmp, where the suite's other
xdist process (and another checkout's run) unpack the same code at the same time. A check for the directory followed
by making and filling it let a second process import from a directory still empty (or fail making it).
"""

from __future__ import annotations

import io
import multiprocessing
import secrets
import shutil
import tempfile
import zipfile
from pathlib import Path

from tests.aws import harness

FILES = 300  # enough that unpacking takes a while, so that the processes below overlap it


def _code() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for n in range(FILES):
            zf.writestr(f"pkg/module_{n}.py", f"VALUE = {n}\n" * 50)
        zf.writestr("handler.py", "def handler(event, context):\n    return 'whole'\n")
    return buffer.getvalue()


def _unpack_and_count(code: bytes, digest: str, start, answers) -> None:
    start.wait()
    try:
        target = harness._extracted(code, digest)
        answers.put(sum(1 for _ in target.rglob("*.py")))
    except Exception as exc:  # noqa: BLE001 - what the process met is the answer
        answers.put(repr(exc))


def test_processes_unpacking_the_same_code_at_once_each_find_it_whole():
    code, digest = _code(), f"test-{secrets.token_hex(8)}"  # (a content of this test's own: never cached before)
    cache = Path(tempfile.gettempdir()) / "rewardpipe-lambda-code"
    context = multiprocessing.get_context("fork")
    start, answers = context.Barrier(4), context.Queue()
    processes = [context.Process(target=_unpack_and_count, args=(code, digest, start, answers)) for _ in range(4)]
    try:
        for process in processes:
            process.start()
        seen = [answers.get(timeout=120) for _ in processes]
        assert seen == [FILES + 1] * len(processes), seen
        assert [p.name for p in cache.glob(f".{digest}-*")] == []  # no half-made directory left behind
    finally:
        for process in processes:
            process.join(120)
        shutil.rmtree(cache / digest, ignore_errors=True)
