"""Entry point of a fork server: ``python -I -B boot.py CONFIG_JSON SOCKET_FD``.

Registers ``rewardpipe`` and ``rewardpipe.execution`` as bare namespace packages so that importing
the runtime does not run their ``__init__`` modules (which need pydantic, absent from the sandbox's
interpreter when it is not the venv's).
"""

import os
import sys
import types

_runtime_dir = os.path.dirname(os.path.abspath(__file__))
_execution_dir = os.path.dirname(_runtime_dir)
_package_dir = os.path.dirname(_execution_dir)
for _name, _path in (("rewardpipe", _package_dir), ("rewardpipe.execution", _execution_dir)):
    _module = types.ModuleType(_name)
    _module.__path__ = [_path]
    sys.modules[_name] = _module

from rewardpipe.execution.runtime import zygote  # noqa: E402

if __name__ == "__main__":
    sys.exit(zygote.main(sys.argv))
