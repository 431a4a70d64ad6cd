"""Command-line paths grouped by directory, so pytest 9.1 keeps every subdirectory's conftest fixtures.

pytest 9.1 binds a ``conftest.py``'s fixtures to the one directory node that first collects its folder. Paths given
out of tree order (``tests/cli/a.py tests/b.py tests/cli/c.py``) collect ``tests/cli`` a second time, as a new node
that never gets them: every test of ``c.py`` needing the ``cli`` fixture failed with "fixture 'cli' not found",
and an autouse fixture (``tests/core``'s ``_no_ambient_api_key``) was silently not applied
(pytest-dev/pytest#14971, #15071). Each directory's paths made adjacent, in the order they first appear, avoid it.
"""

from __future__ import annotations

import os
from pathlib import Path


def grouped(args: list[str]) -> list[str]:
    """``args`` (paths or node ids) reordered depth-first: the paths under one directory together, directories and
    files in the order they first appear (an argument that is not a path keeps its place among the first)."""
    rank: dict[tuple[str, ...], int] = {}
    keys = []
    for arg in args:
        parts = Path(os.path.abspath(arg.split("::", 1)[0])).parts
        key = []
        for depth in range(1, len(parts) + 1):
            key.append(rank.setdefault(parts[:depth], len(rank)))
        keys.append(tuple(key))
    order = sorted(range(len(args)), key=keys.__getitem__)  # stable: one file's node ids keep their order
    return [args[i] for i in order]
