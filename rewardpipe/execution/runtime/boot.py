"""Entry point of a fork server: ``python -I -B boot.py CONFIG_JSON SOCKET_FD``.

Registers ``rewardpipe`` and ``rewardpipe.execution`` as bare namespace packages so that importing
the runtime does not run their ``__init__`` modules (which need pydantic, absent from the sandbox's
interpreter when it is not the venv's).
"""

import gc

# Start-up makes a great many objects that all stay alive (module imports): the collector would find nothing
# and costs a tenth of the imports' CPU. zygote.Zygote turns it back on before anything is forked from here.
gc.disable()

import contextlib  # noqa: E402
import ctypes  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import types  # noqa: E402

# First of all: where the fork server runs as the uid of the model's code (a scorer that is not root), a
# process of that uid could open its /proc/<pid>/mem while it is dumpable and keep the handle (see
# forkservers._DumpableStarts). Its oom_score_adj is opened before, while it still can be (zygote._detect).
OOM_SCORE_ADJ_FD: "int | None" = None
with contextlib.suppress(OSError):
    OOM_SCORE_ADJ_FD = os.open("/proc/self/oom_score_adj", os.O_RDWR | os.O_CLOEXEC)
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0

_runtime_dir = os.path.dirname(os.path.abspath(__file__))
_execution_dir = os.path.dirname(_runtime_dir)
_package_dir = os.path.dirname(_execution_dir)
for _name, _path in (("rewardpipe", _package_dir), ("rewardpipe.execution", _execution_dir)):
    _module = types.ModuleType(_name)
    _module.__path__ = [_path]
    sys.modules[_name] = _module

from rewardpipe.execution.runtime import zygote  # noqa: E402

if __name__ == "__main__":
    _status = zygote.main(sys.argv, OOM_SCORE_ADJ_FD)  # (it has closed and removed everything it made)
    # Out without the interpreter's finalization: it only tears down the modules and objects every child was
    # forked from, which the exit frees anyway, and the scorer waits for this exit (about 10 ms a fork server).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_status)
