"""Keep the credentials of the process that runs untrusted code away from its children.

The execution layer already starts the model's code with a clean environment (no AWS variables).
What remains is the parent's own memory and environment, readable through /proc/<pid>/ by any
process of the same uid. Marking the parent non-dumpable makes those files root-owned, so a child
running as the same user can no longer read them.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3
# Variables that let a process obtain AWS credentials, in Lambda and in ECS/Fargate.
CREDENTIAL_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
)


@functools.lru_cache(maxsize=1)
def _libc():
    """The C library's symbols, looked up once per process.

    ``CDLL(None)`` is the interpreter's own symbol table, which holds libc's (Python links it); it avoids
    ``ctypes.util.find_library``, whose import pulls in subprocess, shutil and the compression modules and
    which runs ``ldconfig -p`` in a child process each time it is called.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl  # noqa: B018 - an interpreter linked statically against another libc may not export it
        return libc
    except (OSError, AttributeError):
        pass
    from ctypes.util import find_library

    try:
        return ctypes.CDLL(find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


def make_non_dumpable() -> bool:
    """prctl(PR_SET_DUMPABLE, 0); True when it took effect (Linux only)."""
    libc = _libc()
    if libc is None:
        return False
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        return False
    return libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0


def is_dumpable() -> bool | None:
    libc = _libc()
    return None if libc is None else bool(libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0))


def scrub_credentials(environ: os._Environ[str] | dict[str, str] = os.environ) -> list[str]:
    """Remove credential variables from ``environ`` (call after every AWS client is built)."""
    removed = [name for name in CREDENTIAL_VARIABLES if name in environ]
    for name in removed:
        del environ[name]
    return removed
