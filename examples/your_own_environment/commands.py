"""What the examples of this folder share: `rewardpipe` run as a user runs it, from this folder, with the folder on
PYTHONPATH (so `animals_env:ENVIRONMENT` imports; once the package is installed, `--env animals` works too)."""

import os
import shlex
import subprocess
import sys
from pathlib import Path

REWARDPIPE = Path(sys.executable).with_name("rewardpipe")  # the CLI installed beside this interpreter
HERE = Path(__file__).resolve().parent


def rewardpipe(command, check=True, echo=True):
    """Print the command line, run it, print what it wrote (stdout and stderr, unless ``echo`` is False);
    returns the finished process."""
    print(f"$ PYTHONPATH=. rewardpipe {command}")
    path = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "COLUMNS": "88"}
    done = subprocess.run([REWARDPIPE, *shlex.split(command)], cwd=HERE, env=env, capture_output=True, text=True)
    if echo:
        print(done.stdout + done.stderr, end="")
    if check and done.returncode != 0:
        raise SystemExit(f"rewardpipe {command} exited {done.returncode}")
    return done
