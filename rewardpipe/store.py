"""Where scored records live: a local directory (the default) or an S3 bucket, with one key layout.

Layout (Hive-style, so Athena/Glue/pandas can partition on it)::

    runs/<run_id>/step=<n>/group=<group_id>/<rollout_id>.json    one Record per object
    runs/<run_id>/alarms/step=<n>/<component>-<kind>.json         written by rewardpipe.monitoring.sinks
    runs/<run_id>/monitor/state.json                              hysteresis state (rewardpipe.monitoring.state)
    runs/<run_id>/transcripts/step=<n>/group=<g>/<rollout_id>.json one RolloutTranscript per rollout

    runs/<run_id>/manifest.json                                   what the run id stands for (RunManifest)

Keys are a pure function of (run_id, step, group_id, rollout_id), so scoring the same rollout twice
overwrites the object instead of adding a second one. Ids are percent-encoded (``quote`` with no safe
characters beyond ``A-Z a-z 0-9 _ . - ~``; an id made only of dots has its dots encoded too), so an id
containing ``/``, ``..``, ``=`` or ``%`` can never leave its own path segment, and ``decode_id`` gives
the original back. A group or rollout id whose encoding is longer than :data:`MAX_SEGMENT` is stored
under its encoded prefix plus ``%~`` and a SHA-256 digest of the whole id: ``quote`` never writes ``%~``,
so such a key cannot collide with the key of a shorter id, and the record itself keeps the full id.

Keys stay distinct on case-insensitive file systems (macOS's APFS, Windows' NTFS), where ``Roll-A.json``
and ``roll-a.json`` are one file. An encoded id is ASCII, and every non-ASCII character is a ``%XX``
escape with upper-case hex digits, so ids can only collide there through the case of their ASCII
letters. An id with an upper-case ASCII letter therefore gets a case tail: ``%~u`` and the case of its
letters as a bit mask in lower-case hex (``Task-1`` is stored as ``Task-1%~u8``, ``task-1`` as
``task-1``). The tail fixes which letters are upper case, and ``quote`` never writes ``%~``, so two ids
whose keys are equal up to letter case are the same id. Keys written before the tail existed (the same
key without it) are still read: :meth:`Store.iter_records` accepts a record at either form, reading
the tailed one when a rollout is stored under both, and a resume recognises either as stored.

Windows also drops a final ``.`` from a name and opens a device for ``con``, ``nul.txt`` and the like:
:func:`encode_id` escapes that dot and the first letter of such a name (``x.`` -> ``x%2E``, ``con`` ->
``%63on``), letters ``quote`` never escapes, so the escaped forms collide with nothing.

Run ids are never hashed and get none of these (runs are listed by their directory name, which stays as
readable as the run id): a store refuses a new run id that differs from a stored one only in letter
case or Unicode normalisation (:meth:`Store.run_id_clash`), and the CLI one Windows cannot use as a
folder name.

The S3 store retries throttling, server and connection errors with exponential backoff before giving
up with a :class:`StoreError`; a listing is retried page by page, so a retry never repeats a key.

A corrupt or misplaced object never stops :meth:`Store.iter_records`: it is skipped, appended to
``store.bad_objects`` (a list of :class:`BadObject`, reset at the start of each iteration) and handed
to the optional ``on_bad`` callback.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import re
import shutil
import string
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from pydantic import ValidationError

from rewardpipe.models import Record, field_error

if TYPE_CHECKING:  # pragma: no cover
    from rewardpipe.transcripts import RolloutTranscript

RUNS_PREFIX = "runs/"
MAX_SEGMENT = 240  # encoded id length; leaves room for ".json" / "group=" within a 255-byte file name
HASH_MARK = "%~"  # never produced by quote(): there '%' always starts a two-hex-digit escape
CASE_MARK = "%~u"  # the case tail of an id with upper-case letters ('u' is not a hex digit: never a digest)
_DIGEST_CHARS = 32  # 128 bits of SHA-256
MANIFEST_NAME = "manifest.json"
_STEP_RE = re.compile(r"^step=(\d+)$")
_GROUP_RE = re.compile(r"^group=(.+)$")

_MISSING: Any = object()


class StoreError(Exception):
    """The store itself cannot be used (bad location, missing bucket, access denied, unsafe key)."""


@dataclass(frozen=True)
class BadObject:
    """An object under a run that could not be read as a Record; ``reason`` says why."""

    key: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"key": self.key, "reason": self.reason}


# --------------------------------------------------------------------------------------------------
# Key layout


def encode_id(value: str, *, allow_hash: bool = True, portable: bool = True) -> str:
    """Encode an id as one safe path segment; reversible with :func:`decode_id` unless it was too long,
    in which case (``allow_hash``) it is cut and given a digest suffix; otherwise ValueError.

    ``portable`` (the default) makes the segment a file name of its own on every file system: the case
    tail (no two ids share a key on a case-insensitive one), and the Windows rules (a final ``.`` and the
    first letter of a device name such as ``con`` or ``nul.txt`` are escaped: Windows drops the one and
    opens a device for the other). ``portable=False`` gives the key written before those rules (still
    read, see :func:`legacy_record_key`) and the run folder name."""
    if not isinstance(value, str) or value == "":
        raise ValueError(f"ids must be non-empty strings, got {value!r}")
    quoted = quote(value, safe="", errors="surrogatepass")
    if set(quoted) == {"."}:  # "." and ".." would mean "here" / "parent" on a filesystem
        quoted = quoted.replace(".", "%2E")
    if portable:
        if quoted.endswith("."):
            quoted = quoted[:-1] + "%2E"
        if windows_device_name(quoted):
            quoted = f"%{ord(quoted[0]):02X}{quoted[1:]}"
    encoded = quoted + (_case_tail(quoted) if portable else "")
    if len(encoded) <= MAX_SEGMENT:
        return encoded
    encoded = quoted  # a hashed segment needs no tail: the digest of the exact id tells case variants apart
    if not allow_hash:
        raise ValueError(
            f"id {value[:40]!r}... is too long for a store key: {len(encoded)} characters once encoded, "
            f"at most {MAX_SEGMENT} (file names are limited to 255 bytes)"
        )
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST_CHARS]
    head = encoded[: MAX_SEGMENT - len(HASH_MARK) - len(digest)]
    partial_escape = head.rfind("%", len(head) - 2)  # never cut a %XX escape in two
    if partial_escape != -1:
        head = head[:partial_escape]
    return f"{head}{HASH_MARK}{digest}"


_ESCAPE_RE = re.compile(r"%[0-9A-F]{2}")
_CASE_TAIL_RE = re.compile(re.escape(CASE_MARK) + r"[0-9a-f]+")


def _case_tail(quoted: str) -> str:
    """``%~u`` and the mask of upper-case letters among the literal ASCII letters of ``quoted`` (first
    letter in the highest bit, four letters per lower-case hex digit, trailing zero digits dropped), or ""
    when no letter is upper case. Escapes are skipped: ``quote`` writes their hex digits in one case."""
    literal = _ESCAPE_RE.sub("", quoted) if "%" in quoted else quoted  # ASCII only: quote escaped the rest
    if literal.islower() or not any(c.isupper() for c in literal):
        return ""
    bits = "".join("1" if c.isupper() else "0" for c in literal if c.isalpha())
    bits += "0" * (-len(bits) % 4)
    mask = "".join(f"{int(bits[i : i + 4], 2):x}" for i in range(0, len(bits), 4)).rstrip("0")
    return f"{CASE_MARK}{mask}"


#: Names Windows gives to devices, whatever their case and whatever follows a first dot (``nul.tar.gz``).
WINDOWS_DEVICE_NAMES = frozenset({"con", "prn", "aux", "nul", *(f"{p}{n}" for p in ("com", "lpt") for n in range(10))})


def windows_device_name(name: str) -> bool:
    """True when a file or folder called ``name`` would be a device on Windows, not a file."""
    return len(name) >= 3 and name.split(".", 1)[0].lower() in WINDOWS_DEVICE_NAMES


def without_case_tails(key: str) -> str:
    """``key`` with its case tails removed (what :func:`decode_id` reads an id from)."""
    return _CASE_TAIL_RE.sub("", key) if CASE_MARK in key else key


_ROLLOUT_TAIL_RE = re.compile(r"^(?P<head>.*/)group=(?P<group>[^/]+)/(?P<rollout>[^/]+)\.json$")
_DIGEST_RE = re.compile(re.escape(HASH_MARK) + rf"[0-9a-f]{{{_DIGEST_CHARS}}}$")


def legacy_key(key: str) -> str:
    """A record's or a transcript's key as written before the portable rules of :func:`encode_id` (the
    same key for most ids); keys of old stores are still read. A hashed segment is kept as it is."""
    match = _ROLLOUT_TAIL_RE.match(key)
    if match is None:
        return key

    def legacy(segment: str) -> str:
        return segment if _DIGEST_RE.search(segment) else encode_id(decode_id(segment), portable=False)

    return f"{match['head']}group={legacy(match['group'])}/{legacy(match['rollout'])}.json"


def decode_id(segment: str) -> str:
    """The id a segment encodes (for a hash-suffixed segment: its prefix and digest, not the whole id)."""
    segment = without_case_tails(segment)
    try:
        return unquote(segment, errors="surrogatepass")
    except UnicodeDecodeError:  # a hashed segment may end inside a multi-byte character
        return unquote(segment, errors="replace")


def run_folder(run_id: str) -> str:
    """The folder name of a run: percent-encoded, never cut, no case tail (see the module docstring)."""
    return encode_id(run_id, allow_hash=False, portable=False)


def run_prefix(run_id: str) -> str:
    return f"{RUNS_PREFIX}{run_folder(run_id)}/"


def fold_run_id(run_id: str) -> str:
    """What two run ids are compared by: the same folder on a case-insensitive file system (the ASCII
    letters of a folder name in either case) or the same text to a reader (NFC)."""
    return unicodedata.normalize("NFC", run_id).translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def manifest_key(run_id: str) -> str:
    return f"{run_prefix(run_id)}{MANIFEST_NAME}"


def step_prefix(run_id: str, step: int) -> str:
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a non-negative integer, got {step!r}")
    return f"{run_prefix(run_id)}step={step}/"


def rollout_key(run_id: str, step: int, group_id: str, rollout_id: str, *, portable: bool = True) -> str:
    """``runs/<run_id>/step=<n>/group=<g>/<rollout_id>.json`` with every id encoded (``portable=False``:
    the key written before the portable rules of :func:`encode_id`)."""
    return (
        f"{step_prefix(run_id, step)}group={encode_id(group_id, portable=portable)}/"
        f"{encode_id(rollout_id, portable=portable)}.json"
    )


def record_key(record: Record) -> str:
    return rollout_key(record.run_id, record.step, record.group_id, record.rollout_id)


def legacy_record_key(record: Record) -> str:
    """Where a record was stored before ids had a case tail (the same as :func:`record_key` for an id
    without upper-case letters)."""
    return rollout_key(record.run_id, record.step, record.group_id, record.rollout_id, portable=False)


def transcript_key(run_id: str, step: int, group_id: str, rollout_id: str) -> str:
    """``runs/<run>/transcripts/step=<n>/group=<g>/<rollout>.json``: beside the records, outside the
    ``step=<n>/`` folders that :meth:`Store.iter_records` lists."""
    step_part = step_prefix(run_id, step)[len(run_prefix(run_id)) :]
    return f"{run_prefix(run_id)}transcripts/{step_part}group={encode_id(group_id)}/{encode_id(rollout_id)}.json"


def parse_record_key(key: str) -> tuple[str, int, str, str] | None:
    """The (run_id, step, group_id, rollout_id) a record key stands for, or None if it is not one."""
    parts = key.split("/")
    if len(parts) != 5 or parts[0] != RUNS_PREFIX.rstrip("/") or not parts[4].endswith(".json"):
        return None
    step_match = _STEP_RE.match(parts[2])
    group_match = _GROUP_RE.match(parts[3])
    rollout = parts[4][: -len(".json")]
    if not step_match or not group_match or not parts[1] or not rollout:
        return None
    return decode_id(parts[1]), int(step_match.group(1)), decode_id(group_match.group(1)), decode_id(rollout)


def check_key(key: str) -> str:
    """Reject keys that could escape the store root or alias another key."""
    if not isinstance(key, str) or not key:
        raise StoreError(f"store key must be a non-empty string, got {key!r}")
    if key.startswith("/") or "\\" in key or "\x00" in key:
        raise StoreError(f"unsafe store key {key!r}: must be relative, with '/' separators and no NUL")
    if any(part in ("", ".", "..") for part in key.split("/")):
        raise StoreError(f"unsafe store key {key!r}: empty, '.' or '..' path segment")
    return key


# --------------------------------------------------------------------------------------------------
# The common interface


class Store:
    """Operations shared by every backend; subclasses supply the five primitives at the bottom."""

    location: str
    page_size = 1000  # objects per list call (S3's maximum); tests lower it to exercise pagination

    def __init__(self) -> None:
        self.bad_objects: list[BadObject] = []

    # -- records ---------------------------------------------------------------------------------

    def put_record(self, record: Record) -> str:
        key = record_key(record)
        self._write(key, record.to_json().encode("utf-8"))
        return key

    def iter_records(
        self,
        run_id: str,
        step: int | None = None,
        *,
        on_bad: Callable[[BadObject], None] | None = None,
    ) -> Iterator[Record]:
        """Yield every record of a run (or of one step), in step order then key order.

        Objects that are not valid records, or whose contents disagree with their key (a file
        copied to the wrong place), are skipped and reported through ``bad_objects``/``on_bad``.
        """
        self.bad_objects = []
        steps = [step] if step is not None else self.list_steps(run_id)
        for n in steps:
            # A record at its key of before the portable rules is read too, once the step's listing has
            # shown that the same rollout is not also stored at its current key (it is never counted twice).
            current: set[str] = set()
            legacy: list[tuple[str, Record]] = []
            for key in self._list(step_prefix(run_id, n)):  # both backends list in key order
                parsed = parse_record_key(key)
                if parsed is None:
                    self._report_bad(key, "not a record key (expected group=<g>/<rollout_id>.json)", on_bad)
                    continue
                try:
                    raw = self._read(key)
                except KeyError:  # deleted between list and read
                    continue
                try:
                    record = Record.model_validate_json(raw)
                except ValidationError as exc:
                    self._report_bad(key, _short_validation_error(exc), on_bad)
                    continue
                expected = record_key(record)
                if expected == key:
                    current.add(key)
                    yield record
                elif legacy_record_key(record) == key:
                    legacy.append((key, record))
                else:
                    self._report_bad(
                        key,
                        f"record says run_id={record.run_id!r} step={record.step} group_id={record.group_id!r} "
                        f"rollout_id={record.rollout_id!r}, which belongs at {expected}",
                        on_bad,
                    )
            for key, record in legacy:
                if record_key(record) in current:
                    self._report_bad(
                        key,
                        f"the same rollout is also stored at {record_key(record)}, which is "
                        f"the one read (this is its key of an older rewardpipe)",
                        on_bad,
                    )
                else:
                    yield record

    def _report_bad(self, key: str, reason: str, on_bad: Callable[[BadObject], None] | None) -> None:
        bad = BadObject(key, reason)
        self.bad_objects.append(bad)
        if on_bad is not None:
            on_bad(bad)

    def stored_rollout_keys(self, run_id: str) -> set[str]:
        """Every key stored under the run, plus the current :func:`rollout_key` of each record stored at
        its key of before the portable rules: ``rollout_key(...) in stored_rollout_keys(run)`` says whether
        a rollout already has a record, whichever rewardpipe wrote it (``--resume`` skips it)."""
        keys = set(self.list_keys(run_prefix(run_id)))
        for key in list(keys):
            parsed = parse_record_key(key)
            if parsed is None or any(_DIGEST_RE.search(part.removesuffix(".json")) for part in key.split("/")):
                continue  # a hashed segment does not give its id back
            _, step, group_id, rollout_id = parsed
            keys.add(rollout_key(run_id, step, group_id, rollout_id))
        return keys

    def run_id_clash(self, run_id: str) -> str | None:
        """A stored run id that differs from ``run_id`` only in letter case or Unicode normalisation (on a
        case-insensitive file system the two would share one folder; to a reader they look the same)."""
        folded = fold_run_id(run_id)
        return next((other for other in self.list_runs() if other != run_id and fold_run_id(other) == folded), None)

    def lock_run(self, run_id: str) -> Any:  # noqa: ARG002 - the Store interface's signature (LocalStore locks the run)
        """Hold ``run_id`` for this process until the returned handle is closed; StoreError if another
        process holds it. Only a local store can: S3 has no lock (one writer per run id is up to the user)."""
        return None

    def run_has_records(self, run_id: str) -> bool:
        """True when at least one object is stored under one of the run's ``step=<n>/`` prefixes."""
        return any(next(iter(self._list(step_prefix(run_id, n))), None) is not None for n in self.list_steps(run_id))

    def delete_run(self, run_id: str) -> None:
        """Delete everything under ``runs/<run_id>/`` (``run --overwrite``)."""
        self._delete_prefix(run_prefix(run_id))

    def list_runs(self) -> list[str]:
        return sorted(decode_id(name) for name in self._list_dirs(RUNS_PREFIX))

    def list_steps(self, run_id: str) -> list[int]:
        steps = []
        for name in self._list_dirs(run_prefix(run_id)):
            match = _STEP_RE.match(name)
            if match:
                steps.append(int(match.group(1)))
        return sorted(steps)

    # -- transcripts (the evidence behind each record) ------------------------------------------------

    def put_transcript(self, transcript: RolloutTranscript) -> str:
        key = transcript_key(transcript.run_id, transcript.step, transcript.group_id, transcript.rollout_id)
        return self.put_json(key, transcript.to_json_dict())

    def get_transcript(self, key: str) -> RolloutTranscript:
        """The transcript at ``key`` (relative to the store root); KeyError when absent, StoreError if unreadable."""
        from rewardpipe.transcripts import RolloutTranscript

        try:
            raw = self.get_json(key)
        except KeyError:
            if legacy_key(key) == key:
                raise
            raw = self.get_json(legacy_key(key))  # a transcript stored before the portable key rules
        try:
            return RolloutTranscript.model_validate(raw)
        except ValidationError as exc:
            raise StoreError(f"{self.location}/{key}: {_short_validation_error(exc, 'transcript')}") from None

    def find_transcripts(self, run_id: str, rollout_id: str, step: int | None = None) -> list[str]:
        """Keys of the transcripts of ``rollout_id`` in a run (one per step it was used in), sorted."""
        prefix = f"{run_prefix(run_id)}transcripts/"
        if step is not None:
            prefix += step_prefix(run_id, step)[len(run_prefix(run_id)) :]
        from rewardpipe.models import same_text

        listed = self.list_keys(prefix)
        names = (f"/{encode_id(rollout_id)}.json", f"/{encode_id(rollout_id, portable=False)}.json")
        found = [key for key in listed if key.endswith(names)]
        if not found:  # the id as typed may be another Unicode normalisation of the stored one
            wanted = same_text(rollout_id)
            found = [
                key
                for key in listed
                if key.endswith(".json") and same_text(decode_id(key.rsplit("/", 1)[1][: -len(".json")])) == wanted
            ]
        # a transcript stored at its current key and at its key of before the case tail is one transcript
        current = {legacy_key(key) for key in found if legacy_key(key) != key}
        return [key for key in found if key not in current]

    # -- arbitrary JSON (alarms, monitor state, manifests) ------------------------------------------

    def put_json(self, key: str, obj: Any) -> str:
        data = json.dumps(obj, sort_keys=True, allow_nan=False).encode("utf-8")
        self._write(check_key(key), data)
        return key

    def put_bytes(self, key: str, data: bytes) -> str:
        """Write raw bytes (e.g. a JSONL export) at ``key``."""
        self._write(check_key(key), data)
        return key

    def get_json(self, key: str, default: Any = _MISSING) -> Any:
        """The parsed object at ``key``; ``default`` (or KeyError) when absent, StoreError if not JSON."""
        try:
            raw = self._read(check_key(key))
        except KeyError:
            if default is _MISSING:
                raise KeyError(f"no object at {self.location}/{key}") from None
            return default
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise StoreError(f"{self.location}/{key} is not valid JSON: {exc}") from None

    def get_bytes(self, key: str) -> bytes:
        """The raw bytes at ``key`` (KeyError when absent), e.g. to keep a corrupt object aside."""
        return self._read(check_key(key))

    def list_keys(self, prefix: str = "") -> list[str]:
        """Every key below ``prefix`` (recursively), sorted."""
        if prefix:
            check_key(prefix.rstrip("/"))
        return sorted(self._list(prefix))

    # -- primitives -------------------------------------------------------------------------------

    def _write(self, key: str, data: bytes) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _read(self, key: str) -> bytes:  # pragma: no cover - abstract
        """The object's bytes; KeyError when it does not exist."""
        raise NotImplementedError

    def _list(self, prefix: str) -> Iterator[str]:  # pragma: no cover - abstract
        """Every key below ``prefix`` (which ends in '/' or is empty), recursively."""
        raise NotImplementedError

    def _list_dirs(self, prefix: str) -> list[str]:  # pragma: no cover - abstract
        """The immediate child "directory" names below ``prefix`` (ending in '/')."""
        raise NotImplementedError

    def _delete_prefix(self, prefix: str) -> None:  # pragma: no cover - abstract
        """Delete every key below ``prefix`` (which ends in '/')."""
        raise NotImplementedError


def _short_validation_error(exc: ValidationError, what: str = "record") -> str:
    first = exc.errors()[0]
    if first["type"] == "json_invalid":
        return f"not valid JSON ({first['msg']})"
    more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"not a valid {what}: {field_error(first)}{more}"


# --------------------------------------------------------------------------------------------------
# Local directory


def _files_below(path: str, rel: str) -> Iterator[str]:
    """The keys of the files below ``path`` (``rel`` names it in the store): a folder's files in name order,
    less the temporary files of writes in progress, then each subfolder in name order, depth first. A
    symlinked folder is not entered and a folder that cannot be read is skipped, as ``os.walk`` does; by
    ``os.scandir`` itself, since a 200k-record run is listed on every monitor and a stat per folder and
    pathlib arithmetic per file cost more than reading the files."""
    try:
        with os.scandir(path) as entries:
            listed = list(entries)
    except OSError:
        return
    files, folders = [], []
    for entry in listed:
        try:
            is_dir = entry.is_dir()
        except OSError:
            is_dir = False
        if not is_dir:
            files.append(entry.name)
        elif not _is_symlink(entry):
            folders.append(entry.name)
    for name in sorted(files):
        if not (name.startswith(".") and name.endswith(".tmp")):
            yield f"{rel}/{name}" if rel else name
    for name in sorted(folders):
        yield from _files_below(f"{path}/{name}", f"{rel}/{name}" if rel else name)


def _is_symlink(entry: os.DirEntry) -> bool:
    try:
        return entry.is_symlink()
    except OSError:
        return False


# A temporary file of this process and thread, left over or not; never through a link someone put in its place.
_TEMPORARY_FILE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class LocalStore(Store):
    """A directory on disk. Writes go to a temporary file in the target directory, then ``os.replace``,
    so a reader never sees a half-written object and a crash leaves at worst a stray ``.tmp`` file
    (ignored by listings)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        super().__init__()
        self.root = Path(root)
        self.location = str(self.root)
        self._root = os.fspath(self.root)
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(f"store location {self.root} exists and is not a directory")

    def __repr__(self) -> str:
        return f"LocalStore({self.location!r})"

    def lock_run(self, run_id: str) -> Any:
        """An exclusive ``flock`` on ``runs/.<run>.lock``: two processes writing one run id would mix their
        records. The kernel drops the lock when the process ends, however it ends (kill -9 included), so a
        crashed run never blocks its ``--resume``."""
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX
            return None
        path = self.root / "runs" / f".{run_folder(run_id)}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = path.open("a+b")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            raise StoreError(
                f"run '{run_id}' is being written by another rewardpipe process right now (it holds "
                f"{path}): wait for it to end, or use another --run-id"
            ) from None
        return handle

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*key.split("/"))

    def _write(self, key: str, data: bytes) -> None:
        # Two files a rollout (its record and its transcript) at a thousand rollouts a second: the fewest
        # system calls that keep a write atomic. The temporary file is named for this process and thread, which
        # write one file at a time (no other writer can hold that name; one left by a crashed process of the
        # same id is overwritten), and the folder is made only when it is missing.
        path = os.path.join(self._root, *key.split("/"))
        folder = os.path.dirname(path)
        tmp = os.path.join(folder, f".w{os.getpid()}-{threading.get_ident()}.tmp")  # (a key may be NAME_MAX long)
        try:
            fd = os.open(tmp, _TEMPORARY_FILE, 0o600)
        except FileNotFoundError:
            os.makedirs(folder, exist_ok=True)
            fd = os.open(tmp, _TEMPORARY_FILE, 0o600)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def _read(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise KeyError(key) from None

    def _list(self, prefix: str) -> Iterator[str]:
        rel = prefix.rstrip("/")
        yield from _files_below(os.fspath(self._path(rel) if rel else self.root), rel)

    def _list_dirs(self, prefix: str) -> list[str]:
        base = self._path(prefix.rstrip("/"))
        if not base.is_dir():
            return []
        return sorted(entry.name for entry in base.iterdir() if entry.is_dir())

    def _delete_prefix(self, prefix: str) -> None:
        base = self._path(check_key(prefix.rstrip("/")))
        if base.is_dir():
            shutil.rmtree(base)


# --------------------------------------------------------------------------------------------------
# S3


class S3Store(Store):
    """An S3 bucket (optionally under a prefix). ``client`` defaults to ``boto3.client("s3")``.

    Every call is retried (``attempts`` in all, exponential backoff from ``backoff_s`` with full jitter)
    when S3 answers with a throttling or server error or the connection fails; a missing bucket or
    denied access fails at once, since waiting cannot fix it.
    """

    attempts = 5
    backoff_s = 0.2
    # S3's retryable answers: throttling (503 SlowDown), server errors and timeouts.
    RETRYABLE_CODES = frozenset(
        {
            "SlowDown",
            "Throttling",
            "ThrottlingException",
            "RequestTimeout",
            "RequestTimeTooSkewed",
            "InternalError",
            "ServiceUnavailable",
            "500",
            "502",
            "503",
            "504",
        }
    )

    def __init__(
        self, bucket: str, prefix: str = "", client: Any = None, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        super().__init__()
        if not bucket or "/" in bucket:
            raise StoreError(f"invalid S3 bucket name {bucket!r}")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        if self.prefix:
            check_key(self.prefix)
        if client is None:
            import boto3

            client = boto3.client("s3")
        self.client = client
        self.sleep = sleep
        self.location = f"s3://{bucket}/{self.prefix}".rstrip("/")

    def __repr__(self) -> str:
        return f"S3Store({self.location!r})"

    def _full(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _strip(self, full_key: str) -> str:
        return full_key[len(self.prefix) + 1 :] if self.prefix else full_key

    @staticmethod
    def _code(exc: Exception) -> str:
        return str(getattr(exc, "response", {}).get("Error", {}).get("Code", type(exc).__name__))

    def _client_error(self, exc: Exception, action: str) -> StoreError:
        code = self._code(exc)
        if code == "NoSuchBucket":
            return StoreError(f"S3 bucket {self.bucket!r} does not exist ({self.location})")
        if code in ("AccessDenied", "403"):
            return StoreError(f"access denied to {self.location} while trying to {action}")
        return StoreError(f"S3 error {code} on {self.location} while trying to {action}: {exc}")

    def _call(self, action: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        """``fn(**kwargs)`` with retries; NoSuchKey is passed through as KeyError, the rest as StoreError."""
        from botocore.exceptions import BotoCoreError, ClientError

        for attempt in range(1, self.attempts + 1):
            try:
                return fn(**kwargs)
            except ClientError as exc:
                code = self._code(exc)
                if code in ("NoSuchKey", "404"):
                    raise KeyError(action) from None
                if code not in self.RETRYABLE_CODES or attempt == self.attempts:
                    raise self._client_error(exc, action) from exc
            except BotoCoreError as exc:  # connection refused/reset, read timeout, DNS: all transient
                if attempt == self.attempts:
                    raise self._client_error(exc, action) from exc
            self.sleep(random.uniform(0, self.backoff_s * 2 ** (attempt - 1)))
        raise AssertionError("unreachable")

    def _write(self, key: str, data: bytes) -> None:
        self._call(
            f"write {key}",
            self.client.put_object,
            Bucket=self.bucket,
            Key=self._full(key),
            Body=data,
            ContentType="application/json",
        )

    def _read(self, key: str) -> bytes:
        def get() -> bytes:
            # The body is read inside the retried call: a connection dropped mid-body is retried too.
            return self.client.get_object(Bucket=self.bucket, Key=self._full(key))["Body"].read()

        try:
            return self._call(f"read {key}", get)
        except KeyError:
            raise KeyError(key) from None

    def _pages(self, prefix: str, delimiter: str | None) -> Iterator[dict[str, Any]]:
        """list_objects_v2 pages, each page retried on its own (a retry never yields a key twice)."""
        full_prefix = self._full(prefix) if prefix else (f"{self.prefix}/" if self.prefix else "")
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": full_prefix, "MaxKeys": self.page_size}
        if delimiter:
            kwargs["Delimiter"] = delimiter
        while True:
            page = self._call(f"list {prefix or '/'}", self.client.list_objects_v2, **kwargs)
            yield page
            if not page.get("IsTruncated"):
                return
            kwargs["ContinuationToken"] = page["NextContinuationToken"]

    def _list(self, prefix: str) -> Iterator[str]:
        for page in self._pages(prefix, None):
            for item in page.get("Contents", []):
                yield self._strip(item["Key"])

    def _list_dirs(self, prefix: str) -> list[str]:
        names = []
        for page in self._pages(prefix, "/"):
            for item in page.get("CommonPrefixes", []):
                names.append(self._strip(item["Prefix"])[len(prefix) :].rstrip("/"))
        return sorted(n for n in names if n)

    def _delete_prefix(self, prefix: str) -> None:
        keys = [self._full(key) for key in self._list(check_key(prefix.rstrip("/")) + "/")]
        for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1000 keys
            batch = [{"Key": key} for key in keys[start : start + 1000]]
            response = self._call(
                f"delete {prefix}",
                self.client.delete_objects,
                Bucket=self.bucket,
                Delete={"Objects": batch, "Quiet": True},
            )
            failed = response.get("Errors") or []
            if failed:  # DeleteObjects reports per-key failures in a 200 response
                first = failed[0]
                raise StoreError(
                    f"could not delete {len(failed)} object(s) under {self.location}/{prefix}, "
                    f"e.g. {first.get('Key')}: {first.get('Code')} {first.get('Message', '')}".rstrip()
                )


# --------------------------------------------------------------------------------------------------


def open_store(location: str | os.PathLike[str], client: Any = None) -> Store:
    """``s3://bucket[/prefix]`` gives an :class:`S3Store`; anything else is a local directory."""
    text = os.fspath(location)
    if not text.strip():  # an unset variable (`--out "$STORE"`) must not mean "here"
        raise StoreError(f"empty store location {text!r}: give a directory or s3://bucket/prefix")
    if text.startswith("s3://"):
        rest = text[len("s3://") :]
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise StoreError(f"S3 location {text!r} has no bucket name (expected s3://bucket[/prefix])")
        return S3Store(bucket, prefix, client=client)
    if "://" in text:
        raise StoreError(f"unsupported store location {text!r}: use a directory or s3://bucket/prefix")
    return LocalStore(text)
