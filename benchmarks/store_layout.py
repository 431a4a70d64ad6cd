"""Benchmark: what a local store's layout rules cost when a run is listed and read (issue 22 item 1).

    .venv/bin/python benchmarks/store_layout.py                 # 100,000 records
    .venv/bin/python benchmarks/store_layout.py --records 20000
    .venv/bin/python benchmarks/store_layout.py --records 20000 --dir /dev/shm   # the system calls only

A store of N records in its own layout (``runs/<run>/step=<n>/group=<g>/<rollout>.json``, groups of 8,
the generator of benchmarks/monitor.py) is listed and every file read, two ways, in this process:

* **rewardpipe**: what `monitor` does now (``LocalStore._list_checked`` then ``LocalStore.read_many``):
  every folder opened one component at a time with ``O_NOFOLLOW``, each file with ``O_NOFOLLOW |
  O_NONBLOCK`` and checked with ``fstat``, links and special files reported as strays;
* **baseline**: what it did before: ``os.walk``-style listing by path (``os.scandir``) and a plain
  ``open`` + ``read`` of each path, with none of those checks.

It prints both times (best of ``--repeat``, the two taken in turn), their ratio and the load average:
the checks must not make a 200,000-record `monitor` noticeably slower.

Writes are compared the same way (``--writes`` objects, the records' own keys and bytes, into a fresh
folder each time): ``LocalStore._write`` (every folder opened from the root with ``O_NOFOLLOW``, so no
link takes a write out of the store) against main's path-based write of before the merge (``os.open`` of
the temporary file by path, ``os.makedirs`` when its folder is missing, ``os.replace``), which follows a
linked folder.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor import best_time, synthetic  # noqa: E402

from rewardpipe.store import LocalStore, record_key, step_prefix  # noqa: E402

_TEMPORARY = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC


def write_store(root: Path, records: int) -> LocalStore:
    store = LocalStore(root)
    for i, record in enumerate(synthetic(records, 8)):
        store.put_record(record.model_copy(update={"step": i // 20_000}))
    return store


def checked(store: LocalStore, run: str) -> int:
    keys = [key for n in store.list_steps(run) for key in store._list_checked(step_prefix(run, n), lambda bad: None)]
    return sum(map(len, store.read_many(keys)))


def plain(root: str, run: str) -> int:
    """The listing and reads of before: paths all the way, no type or link check."""

    def files(path: str):
        with os.scandir(path) as entries:
            listed = sorted(entries, key=lambda e: e.name)
        for entry in listed:
            if entry.is_dir():
                yield from files(entry.path)
            else:
                yield entry.path

    total = 0
    for step in sorted(os.listdir(f"{root}/runs/{run}")):
        for path in files(f"{root}/runs/{run}/{step}"):
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                total += len(os.read(fd, 1 << 16))  # as the fast reader read a record file before
            finally:
                os.close(fd)
    return total


def checked_writes(root: str, objects: list[tuple[str, bytes]]) -> None:
    store = LocalStore(root)
    for key, data in objects:
        store._write(key, data)


def path_writes(root: str, objects: list[tuple[str, bytes]]) -> None:
    """main's LocalStore._write before the merge: by path, the folder made only when missing."""
    for key, data in objects:
        path = os.path.join(root, *key.split("/"))
        folder = os.path.dirname(path)
        tmp = os.path.join(folder, f".w{os.getpid()}-{threading.get_ident()}.tmp")
        try:
            fd = os.open(tmp, _TEMPORARY, 0o600)
        except FileNotFoundError:
            os.makedirs(folder, exist_ok=True)
            fd = os.open(tmp, _TEMPORARY, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, path)


def timed_writes(write, tmp: str, objects: list[tuple[str, bytes]]) -> float:
    root = os.path.join(tmp, "writes")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    start = time.perf_counter()
    write(root, objects)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--writes", type=int, default=20_000)
    parser.add_argument(
        "--dir",
        default=None,
        help="where the stores go (default: the temporary folder); on a "
        "disk other processes keep busy the journal's waits hide the system calls: --dir /dev/shm",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rewardpipe-store-layout-", dir=args.dir) as tmp:
        store = write_store(Path(tmp), args.records)
        assert checked(store, "bench") == plain(tmp, "bench")  # the same bytes, both ways
        ours = before = float("inf")
        for _ in range(args.repeat):  # interleaved: a machine whose load moves moves both the same way
            ours = min(ours, best_time(lambda: checked(store, "bench"), 1))
            before = min(before, best_time(lambda: plain(tmp, "bench"), 1))
        objects = [(record_key(r), r.to_json().encode()) for r in synthetic(args.writes, 8, seed=1)]
        written = by_path = float("inf")
        for _ in range(args.repeat):
            written = min(written, timed_writes(checked_writes, tmp, objects))
            by_path = min(by_path, timed_writes(path_writes, tmp, objects))
    load = os.getloadavg()
    print(
        f"{args.records:,} records, Python {platform.python_version()}, {os.cpu_count()} cores, "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {time.strftime('%d %b %H:%M %Z')}"
    )
    print(f"  listed and read with the layout rules: {ours:.2f} s")
    print(f"  plain paths, no checks (before):       {before:.2f} s")
    print(f"  ratio: {ours / before:.2f}x")
    print(f"{args.writes:,} objects written")
    print(f"  folders opened from the root, no link followed: {written:.2f} s")
    print(f"  by path (main before the merge):               {by_path:.2f} s")
    print(f"  ratio: {written / by_path:.2f}x")


if __name__ == "__main__":
    main()
