"""Find, run and check the examples under ``examples/`` (the code the guides and the README include).

An example is a ``.py`` file under ``examples/`` with an ``if __name__ == "__main__":`` block (modules it
imports, such as a user's reward package, have none). It runs as a user would run it: ``python FILE`` in
a fresh interpreter, from its own folder, with the repository's interpreter. Header comments say what it
needs, and an example whose needs are not met is skipped with the reason:

    # requires: trl, transformers          (importable distributions; the trainer's own venv has them)
    # requires-api: rewardpipe:component   (a name the code base must export; the example waits for it)

When ``<example>.out`` exists beside it, the example must print exactly that (the guides include this file
as the example's output). ``make docs-gen`` rewrites the ``.out`` files from fresh runs.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TIMEOUT_S = 300
REQUIRES = re.compile(r"^# requires: (.+)$", re.M)
REQUIRES_API = re.compile(r"^# requires-api: (.+)$", re.M)
MAIN_BLOCK = re.compile(r"^if __name__ == ['\"]__main__['\"]:", re.M)
# The environment as the process started, before any test ran: a test that leaves a variable behind (a deployed
# function's REWARD_WEIGHTS, say) must not change what an example, run as from a fresh shell, prints.
STARTING_ENV = dict(os.environ)


@dataclass(frozen=True)
class Example:
    path: Path

    @property
    def name(self) -> str:
        return str(self.path.relative_to(EXAMPLES))

    @property
    def expected_output(self) -> Path:
        return self.path.with_suffix(".out")

    def source(self) -> str:
        return self.path.read_text(encoding="utf-8")

    def requirements(self) -> list[str]:
        return [name.strip() for line in REQUIRES.findall(self.source()) for name in line.split(",") if name.strip()]

    def required_api(self) -> list[str]:
        return [ref.strip() for line in REQUIRES_API.findall(self.source()) for ref in line.split(",") if ref.strip()]

    def missing(self) -> str | None:
        """Why this example cannot run in this interpreter, or None."""
        absent = [name for name in self.requirements() if importlib.util.find_spec(name) is None]
        if absent:
            return (
                f"{', '.join(absent)} not installed in this venv (the integration's own tests run in its "
                f"venv: make test-trl / test-verl / test-verifiers)"
            )
        for reference in self.required_api():
            module, _, attr = reference.partition(":")
            try:
                found = importlib.import_module(module)
            except ImportError:
                return f"{module} is not in this code base yet"
            if attr and not hasattr(found, attr):
                return f"{reference} is not in this code base yet (the public API v1 of issue 17)"
        return None

    def run(self) -> subprocess.CompletedProcess[str]:
        env = {
            **STARTING_ENV,
            "PYTHONPATH": os.pathsep.join([str(self.path.parent), str(ROOT)]),
            "PYTHONHASHSEED": "0",
            "NO_COLOR": "1",
            "COLUMNS": "120",
        }
        return subprocess.run(
            [sys.executable, self.path.name],
            cwd=self.path.parent,
            env=env,
            text=True,
            capture_output=True,
            timeout=TIMEOUT_S,
        )


def discover() -> list[Example]:
    return [
        Example(path)
        for path in sorted(EXAMPLES.rglob("*.py"))
        if "__pycache__" not in path.parts and MAIN_BLOCK.search(path.read_text(encoding="utf-8"))
    ]


def write_outputs() -> list[str]:
    """Run every example that can run here and write what it printed to its ``.out``; returns what changed."""
    written = []
    for example in discover():
        if example.missing() is not None:
            continue
        result = example.run()
        if result.returncode != 0:
            raise SystemExit(f"{example.name} failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
        target = example.expected_output
        if not target.exists() or target.read_text(encoding="utf-8") != result.stdout:
            target.write_text(result.stdout, encoding="utf-8")
            written.append(str(target.relative_to(ROOT)))
    return written
