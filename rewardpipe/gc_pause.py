"""Pausing the cyclic garbage collector for a bulk pass (scoring a batch, reading a run's records)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector for a bulk pass. Reading a million records, or scoring a batch,
    allocates millions of small tuples and dicts, and each automatic collection re-walks every live object:
    with it on, the pass is several times slower (benchmarks/report.py, benchmarks/trl_overhead.py). Nothing
    here creates reference cycles, and the collector is restored (and any cycles collected later as usual)
    when the pass ends."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
