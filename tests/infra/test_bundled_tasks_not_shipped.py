"""Task rows are never shipped with the code: the package copied into the Lambda layer and the runner
container holds no task file of any built-in environment (their answers and hidden tests arrive through S3)."""

from __future__ import annotations

import pytest

from rewardpipe.references import BUILTIN_ENVIRONMENTS, resolve_environment
from stacks import packaging


def test_no_built_in_environments_task_file_is_copied_with_the_package(tmp_path):
    packaging.copy_package(tmp_path)
    shipped = {path.relative_to(tmp_path).as_posix() for path in tmp_path.rglob("*") if path.is_file()}
    assert not [name for name in shipped if name.endswith(".jsonl")], sorted(n for n in shipped if "jsonl" in n)
    assert "rewardpipe/envs/wordle/data/words.txt" in shipped  # what the environment itself needs at run time
    for name in BUILTIN_ENVIRONMENTS:
        bundled = __import__(type(resolve_environment(name)).__module__.rpartition(".")[0], fromlist=["x"])
        tasks = getattr(bundled, "BUNDLED_TASKS", None)
        if tasks is None:
            pytest.fail(f"built-in environment '{name}' names no BUNDLED_TASKS")
        assert tasks.is_file() and not any(n.endswith("/" + tasks.name) for n in shipped), name
