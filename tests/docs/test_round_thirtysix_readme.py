"""Round thirty-six: the README's example of ``rewardpipe score`` showed ``r1 scored {...} 1.2`` lines, which is what
the library example ``score.py`` prints, not what the command prints. The console block is now run as written."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_readmes_score_console_block_is_what_the_command_prints(tmp_path):
    readme = (ROOT / "README.md").read_text()
    (block,) = [b for b in re.findall(r"```console\n(.*?)```", readme, re.S) if "rewardpipe score" in b]
    command, *shown = block.strip().splitlines()
    assert command.startswith("$ PYTHONPATH=. rewardpipe score ")
    words = shlex.split(command[2:].split("|")[0])[1:]  # without the environment assignment
    example = ROOT / "examples" / "your_own_reward"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(example), str(ROOT)])}
    words = [str(tmp_path / "store") if w == "store" else w for w in words]
    printed = subprocess.run(
        [sys.executable, "-m", "rewardpipe", *words[1:]], cwd=example, env=env, capture_output=True, text=True
    )
    assert printed.returncode == 0, printed.stderr
    lines = printed.stdout.splitlines()
    if "| head -1" in command:
        lines = lines[:1]
    assert shown == lines
