"""Where scored records live: a local directory (the default) or an S3 bucket, with one key layout.

Layout (Hive-style, so Athena/Glue/pandas can partition on it)::

    runs/<run_id>/step=<n>/group=<group_id>/<rollout_id>.json    one Record per object
    runs/<run_id>/alarms/step=<n>/<component>-<kind>.json         written by rewardpipe.monitoring.sinks
    runs/<run_id>/monitor/state.json                              hysteresis state (rewardpipe.monitoring.state)
    runs/<run_id>/transcripts/step=<n>/group=<g>/<rollout_id>.json one RolloutTranscript per rollout

    runs/<run_id>/manifest.json                                   what the run id stands for (RunManifest)
    runs/<run_id>/finished/step=<n>.json                          step n's records are all written (see below)

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

**The layout is not trusted.** Every reader (``monitor``, ``report``, ``show``, ``--resume``, the fast
readers) goes through the same rules, here:

* a step folder is ``step=<n>`` with ``n`` written as :func:`step_prefix` writes it (no sign, no leading
  zero, at most ``MAX_STEP``); any other ``step=...`` folder (``step=01`` beside ``step=1``) is a stray,
  reported and never read, so no step is counted twice;
* a local store never follows a symbolic link below its root, reading or writing: every folder is opened
  one component at a time with ``O_NOFOLLOW`` (a link is a stray when listed, an :class:`UnsafePath`
  when written through), and a file is opened with ``O_NOFOLLOW | O_NONBLOCK`` and used only if ``fstat``
  says it is a regular file (a FIFO, a socket or a device is reported, never waited on);
* an object that is there but cannot be read as a file (a folder, a FIFO, a link, no permission) is an
  :class:`UnreadableObject`: reported and skipped by the record readers, never taken for an absent one.

**When is a step finished?** ``run`` writes ``runs/<run>/finished/step=<n>.json`` once every record of
step ``n`` is in the store (a step some of whose records were spilled is not finished until ``--resume``
stores them), and the manifest's ``finished_at`` when the whole run ends with nothing missing.
:meth:`Store.run_progress` reads them: a run whose manifest has ``finished_at`` (or that has no manifest:
records written by the AWS pipeline or by hand, which say nothing either way) is finished; a run whose
manifest has no ``finished_at`` is still being written (or was interrupted), and only its steps with a
completion marker are finished. ``monitor`` and ``report`` judge finished steps only.

**S3 faults.** Every S3 error is classified (:func:`classify_s3_error`): a missing key, a throttling or
server error, a connection or read failure (a dropped connection, a read timeout, a body cut short: every
botocore connection/read error, and the urllib3/http.client ones a body read may raise), or a
permanent one (denied, no bucket, no credentials). The first three are retried within bounds
(:class:`S3Limits`: connect/read timeouts, attempts and a deadline per call, set by ``REWARDPIPE_S3_*``
variables), then end in a :class:`StoreError` naming what failed; after a call has used up its attempts
on connection failures, later calls make one attempt each (and, after timeouts, none for a cool-down)
until S3 answers again, instead of spending every call's whole budget on an endpoint that does not answer.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import os
import random
import re
import shutil
import stat
import string
import threading
import time
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from pydantic import ValidationError

from rewardpipe.models import MAX_STEP, Record, field_error

if TYPE_CHECKING:  # pragma: no cover
    from rewardpipe.transcripts import RolloutTranscript

RUNS_PREFIX = "runs/"
MAX_SEGMENT = 240  # encoded id length; leaves room for ".json" / "group=" within a 255-byte file name
HASH_MARK = "%~"  # never produced by quote(): there '%' always starts a two-hex-digit escape
CASE_MARK = "%~u"  # the case tail of an id with upper-case letters ('u' is not a hex digit: never a digest)
_DIGEST_CHARS = 32  # 128 bits of SHA-256
MANIFEST_NAME = "manifest.json"
FINISHED_FOLDER = "finished"
_STEP_RE = re.compile(r"^step=(\d+)$")
_GROUP_RE = re.compile(r"^group=(.+)$")

_MISSING: Any = object()


class StoreError(Exception):
    """The store itself cannot be used (bad location, missing bucket, access denied, unsafe key)."""


class UnsafePath(StoreError):
    """A path below a local store's root goes through a symbolic link, or a file stands where a folder
    must be: the store refuses to read or write through it (it never follows a link out of itself)."""


class StoreFull(StoreError):
    """The local store's disk is full (ENOSPC) or its quota used up (EDQUOT)."""


class UnreadableObject(StoreError):
    """An object is there but cannot be read as a file: a folder, a FIFO, a socket, a device, a symbolic
    link, or a file this process may not read. ``key`` and ``reason`` say which and why."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key, self.reason = key, reason


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


# Characters of a run id: a run id is a folder name and is never hashed (see the module docstring).
MAX_RUN_ID = 128


def run_id_problem(run_id: Any, label: str = "run_id") -> str | None:
    """Why ``run_id`` cannot name a run in a store (``label`` names the setting in the message), or None: the
    rule ``--run-id`` and the trainer callbacks share. 1 to :data:`MAX_RUN_ID` characters of text, no control,
    format or line-separator character, a folder name within the store's key budget once percent-encoded, and
    one Windows keeps (no final ``.``, no device name)."""
    from rewardpipe.models import id_problem

    if not isinstance(run_id, str):
        return f"{label} must be text, got {type(run_id).__name__}"
    if not run_id or len(run_id) > MAX_RUN_ID:
        return f"{label} must be 1 to {MAX_RUN_ID} characters, got {len(run_id)}"
    problem = id_problem(run_id)
    if problem is not None:
        return f"{label} {problem}"
    try:
        folder = run_folder(run_id)
    except ValueError as exc:
        return f"{label}: {exc}"
    if folder.endswith(".") or windows_device_name(folder):  # the folder would not be one on Windows
        return (
            f"{label} {run_id!r} cannot name a folder on Windows (a final '.' is dropped there, and "
            f"{folder.split('.')[0]!r} is a device name): choose another"
        )
    return None


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
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
        raise ValueError(f"step must be an integer from 0 to {MAX_STEP}, got {step!r}")
    return f"{run_prefix(run_id)}step={step}/"


def step_folder_number(name: str) -> int | None:
    """The step a folder name stands for when it is exactly what :func:`step_prefix` writes (``step=7``);
    None for anything else (``step=07``, ``step=+7``, a step beyond MAX_STEP, ``group=...``)."""
    match = _STEP_RE.match(name)
    if match is None:
        return None
    digits = match.group(1)
    if digits != str(int(digits)) or int(digits) > MAX_STEP:
        return None
    return int(digits)


def finished_key(run_id: str, step: int) -> str:
    """``runs/<run>/finished/step=<n>.json``: written once every record of step n is written (see the
    module docstring, "When is a step finished?")."""
    step_prefix(run_id, step)  # the same bounds as a step folder
    return f"{run_prefix(run_id)}{FINISHED_FOLDER}/step={step}.json"


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


_TRANSCRIPT_KEY = re.compile(r"runs/[^/]+/transcripts/step=\d+/group=[^/]+/[^/]+\.json")


def is_transcript_key(key: str) -> bool:
    """True when ``key`` has the shape of a :func:`transcript_key` (relative to a store's root)."""
    return _TRANSCRIPT_KEY.fullmatch(key) is not None


def transcript_key(run_id: str, step: int, group_id: str, rollout_id: str) -> str:
    """``runs/<run>/transcripts/step=<n>/group=<g>/<rollout>.json``: beside the records, outside the
    ``step=<n>/`` folders that :meth:`Store.iter_records` lists."""
    step_part = step_prefix(run_id, step)[len(run_prefix(run_id)) :]
    return f"{run_prefix(run_id)}transcripts/{step_part}group={encode_id(group_id)}/{encode_id(rollout_id)}.json"


#: S3's object key limit: "The object key name is a sequence of Unicode characters with UTF-8 encoding of up to
#: 1,024 bytes long." A longer key is refused (``KeyTooLongError``).
#: https://docs.aws.amazon.com/AmazonS3/latest/userguide/object-keys.html
S3_KEY_LIMIT = 1024


def longest_keys() -> dict[str, str]:
    """Every layout's key (below the store's root) at its longest, by layout name: ids at their documented
    limits (a run folder of :data:`MAX_SEGMENT` characters, the longest run id a store takes; group, rollout
    and component names of :data:`rewardpipe.models.MAX_ID_LENGTH`, cut with a digest to MAX_SEGMENT; step
    :data:`MAX_STEP`; the longest alarm kind; an AWS execution attempt of 80 characters and a state object
    name of 100). Encoded segments are ASCII, so characters are bytes."""
    from typing import get_args

    from rewardpipe.aws.jobs import job_keys
    from rewardpipe.aws.monitoring import LEGACY_STATE, verdict_key
    from rewardpipe.aws.state import attempt_prefix, inputs_prefix
    from rewardpipe.models import MAX_ID_LENGTH
    from rewardpipe.monitoring.alarms import Alarm, AlarmKind, alarm_key, delivery_key
    from rewardpipe.monitoring.state import state_key
    from rewardpipe.monitoring.triage import triage_key

    run, long_id, step = "R" * MAX_SEGMENT, "I" * MAX_ID_LENGTH, MAX_STEP
    kind = max(get_args(AlarmKind), key=len)
    alarm = Alarm(kind=kind, component=long_id, step=step, cause="", message="", run_id=run)
    attempt, name = "A" * 80, "N" * 100
    return {
        "record": rollout_key(run, step, long_id, long_id),
        "record (before the portable rules)": rollout_key(run, step, long_id, long_id, portable=False),
        "transcript": transcript_key(run, step, long_id, long_id),
        "manifest": manifest_key(run),
        "step finished": finished_key(run, step),
        "alarm": alarm_key(run, step, long_id, kind),
        "alarm delivery": max((delivery_key(run, alarm, sink) for sink in ("sns", "store")), key=len),
        "monitor state": state_key(run),
        "monitor state set aside": f"{run_prefix(run)}monitor/state.corrupt-{'0' * 22}Z.json",
        "triage": triage_key(run),
        "AWS check verdict": verdict_key(run, step),
        "AWS check state (legacy)": f"{run_prefix(run)}monitor/{LEGACY_STATE}",
        "AWS episode state": attempt_prefix(run, attempt) + name,
        "AWS execution input": inputs_prefix(run, attempt) + name,
        "AWS code-runner job": max(job_keys(run, long_id, "a" * 32), key=len),
    }


@functools.cache
def longest_key_bytes() -> int:
    """Bytes of the longest key any layout builds below a store's root (:func:`longest_keys`). A constant of this
    code, worked out once: building every layout's longest key takes ~2.5 ms, which each S3 store opened with a
    prefix (a Lambda's every invocation) paid again."""
    return max(len(key.encode("utf-8")) for key in longest_keys().values())


def check_s3_prefix(prefix: str) -> str:
    """``prefix`` if every key the store builds fits S3's :data:`S3_KEY_LIMIT` below it, else StoreError naming
    the setting and the budget: a too-long prefix fails when the store is opened, not at the record whose ids
    happen to be long enough."""
    if not prefix:
        return prefix
    longest = longest_key_bytes()
    budget = S3_KEY_LIMIT - longest - 1  # the "/" between the prefix and the key
    size = len(prefix.encode("utf-8", "surrogatepass"))
    if size > budget:
        raise StoreError(
            f"S3 store prefix {prefix[:60]!r}{'...' if len(prefix) > 60 else ''} is {size} bytes (UTF-8); at most "
            f"{budget} fit: S3 keys are at most {S3_KEY_LIMIT} bytes and the store's longest key below its prefix "
            f"is {longest} bytes (a transcript with ids at their limits). Use a shorter prefix in s3://bucket/prefix"
        )
    return prefix


def parse_record_key(key: str) -> tuple[str, int, str, str] | None:
    """The (run_id, step, group_id, rollout_id) a record key stands for, or None if it is not one."""
    parts = key.split("/")
    if len(parts) != 5 or parts[0] != RUNS_PREFIX.rstrip("/") or not parts[4].endswith(".json"):
        return None
    step = step_folder_number(parts[2])
    group_match = _GROUP_RE.match(parts[3])
    rollout = parts[4][: -len(".json")]
    if step is None or not group_match or not parts[1] or not rollout:
        return None
    return decode_id(parts[1]), step, decode_id(group_match.group(1)), decode_id(rollout)


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


def location_path(location: str, key: str) -> str:
    """Where the object ``key`` is in the store at ``location`` (a directory or ``s3://bucket/prefix``), as
    every message and alarm names it; :meth:`Store.path_of` for a store at hand."""
    return f"{location.rstrip('/')}/{key}"


class Store:
    """Operations shared by every backend; subclasses supply the five primitives at the bottom."""

    location: str
    page_size = 1000  # objects per list call (S3's maximum); tests lower it to exercise pagination

    def __init__(self) -> None:
        self.bad_objects: list[BadObject] = []

    def path_of(self, key: str) -> str:
        """Where ``key`` is: the store's location plus the key (a file path, or an ``s3://`` URL)."""
        return location_path(self.location, key)

    def key_of(self, path: str) -> str | None:
        """:meth:`path_of` reversed: the key ``path`` names under this store's location, else None."""
        prefix = self.path_of("")
        return path[len(prefix) :] if path.startswith(prefix) else None

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
        steps: Iterable[int] | None = None,
        listed: Iterable[str] | None = None,
    ) -> Iterator[Record]:
        """Yield every record of a run (or of one step, or of ``steps``), in step order then key order.

        Objects that are not valid records, whose contents disagree with their key (a file copied to
        the wrong place), or that cannot be read as files (see the module docstring), and stray folders
        (``step=01``, a link) are skipped and reported through ``bad_objects``/``on_bad``. A failure of the
        store itself (S3 unreachable after its retries) is raised: a step is never judged half-read.

        ``listed``: the keys of ``step``, as :meth:`list_keys` just listed them for the caller (one step only), read
        instead of listing the step again.
        """
        self.bad_objects = []
        report = lambda bad: self._report_bad(bad.key, bad.reason, on_bad)  # noqa: E731
        if listed is not None and step is None:
            raise ValueError("listed keys are those of one step: give its step")
        if step is not None:
            chosen = [step]
        else:
            stored = self.list_steps(run_id, on_stray=report)
            chosen = stored if steps is None else sorted(set(steps) & set(stored))
        for n in chosen:
            # A record at its key of before the portable rules is read too, once the step's listing has
            # shown that the same rollout is not also stored at its current key (it is never counted twice).
            current: set[str] = set()
            legacy: list[tuple[str, Record]] = []
            keys = self._list_checked(step_prefix(run_id, n), report) if listed is None else sorted(listed)
            for key in keys:  # both backends list in key order
                parsed = parse_record_key(key)
                if parsed is None:
                    self._report_bad(key, "not a record key (expected group=<g>/<rollout_id>.json)", on_bad)
                    continue
                try:
                    raw = self._read(key)
                except KeyError:  # deleted between list and read
                    continue
                except UnreadableObject as exc:
                    self._report_bad(key, exc.reason, on_bad)
                    continue
                try:
                    record = Record.model_validate_json(raw)
                    expected = record_key(record)
                except ValidationError as exc:
                    self._report_bad(key, _short_validation_error(exc), on_bad)
                    continue
                except ValueError as exc:  # ids no key can hold (record_key refuses them)
                    self._report_bad(key, f"not a valid record: {exc}", on_bad)
                    continue
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

    def unsafe_folders(self, run_id: str) -> list[BadObject]:
        """The run's step folders a write would have to go through a link to reach (a local store: a
        symbolic link named ``step=<n>``); ``run`` refuses to start on such a run rather than spill it all."""
        found: list[BadObject] = []
        self.list_steps(run_id, on_stray=found.append)
        return [bad for bad in found if step_folder_number(bad.key.rstrip("/").rsplit("/", 1)[-1]) is not None]

    def delete_run(self, run_id: str) -> None:
        """Delete everything under ``runs/<run_id>/`` (``run --overwrite``)."""
        self._delete_prefix(run_prefix(run_id))

    def list_runs(self) -> list[str]:
        return sorted(decode_id(name) for name in self._list_dirs(RUNS_PREFIX))

    def list_steps(self, run_id: str, *, on_stray: Callable[[BadObject], None] | None = None) -> list[int]:
        """The run's step folders, by number. Only a folder named exactly as :func:`step_prefix` names it
        counts: a ``step=01`` beside ``step=1`` (or a link named ``step=1``) is handed to ``on_stray``."""
        prefix = run_prefix(run_id)
        steps = set()
        for name in self._dirs_checked(prefix, on_stray):
            number = step_folder_number(name)
            if number is not None:
                steps.add(number)
            elif on_stray is not None and name.startswith("step="):
                on_stray(
                    BadObject(
                        f"{prefix}{name}/",
                        f"not a step folder of rewardpipe's layout (a step folder is "
                        f"step=<n>, n without leading zeros, at most {MAX_STEP}); "
                        f"ignored, its objects are not read",
                    )
                )
        return sorted(steps)

    # -- which steps are finished (see the module docstring) ------------------------------------------

    def mark_step_finished(self, run_id: str, step: int, *, stored: int) -> str:
        """Record that every record of ``step`` is in the store (``stored`` of them written by this writer; a
        resume writes the ones an interrupted writer did not)."""
        return self.put_json(finished_key(run_id, step), {"step": step, "stored": stored})

    def run_progress(self, run_id: str) -> RunProgress:
        """Which of the run's stored steps are finished, from its manifest and completion markers."""
        steps = self.list_steps(run_id)
        try:
            manifest = self.get_json(manifest_key(run_id), default=None)
        except StoreError as exc:  # an unreadable manifest says nothing either way
            return RunProgress(steps, list(steps), False, f"manifest unreadable ({exc}); every step counted")
        if not isinstance(manifest, dict):
            return RunProgress(steps, list(steps), False, "no manifest")
        if manifest.get("finished_at"):
            return RunProgress(steps, list(steps), False, "finished")
        marked = set()
        for key in self._list_checked(f"{run_prefix(run_id)}{FINISHED_FOLDER}/", None):
            number = step_folder_number(key.rsplit("/", 1)[-1].removesuffix(".json"))
            if number is not None and key.endswith(".json"):
                marked.add(number)
        return RunProgress(steps, [n for n in steps if n in marked], True, "in progress")

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
            raise StoreError(f"{self.path_of(key)}: {_short_validation_error(exc, 'transcript')}") from None

    def find_transcripts(self, run_id: str, rollout_id: str, step: int | None = None) -> list[str]:
        """Keys of the transcripts of ``rollout_id`` in a run (one per step it was used in), sorted."""
        prefix = f"{run_prefix(run_id)}transcripts/"
        if step is not None:
            prefix += step_prefix(run_id, step)[len(run_prefix(run_id)) :]
        from rewardpipe.models import same_text

        check_key(prefix.rstrip("/"))
        strays: list[BadObject] = []
        listed = sorted(self._list_checked(prefix, strays.append))
        names = (f"/{encode_id(rollout_id)}.json", f"/{encode_id(rollout_id, portable=False)}.json")
        found = [key for key in listed if key.endswith(names)]
        unreadable = [bad for bad in strays if bad.key.endswith(names)]
        if not found and unreadable:  # its name is there, but not as a file: say what stands there
            raise UnreadableObject(unreadable[0].key, unreadable[0].reason)
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
                raise KeyError(f"no object at {self.path_of(key)}") from None
            return default
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise StoreError(f"{self.path_of(key)} is not valid JSON: {exc}") from None

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

    # Listing with the layout checked: a backend whose listing can meet things that are not objects (a
    # local store: links, FIFOs, sockets, devices) reports them to ``on_stray`` instead of listing them.

    def _list_checked(self, prefix: str, on_stray: Callable[[BadObject], None] | None) -> Iterator[str]:  # noqa: ARG002 - a backend that lists only objects meets nothing to report
        return self._list(prefix)

    def _dirs_checked(self, prefix: str, on_stray: Callable[[BadObject], None] | None) -> list[str]:  # noqa: ARG002 - a backend that lists only objects meets nothing to report
        return self._list_dirs(prefix)


@dataclass(frozen=True)
class RunProgress:
    """What :meth:`Store.run_progress` found: the stored steps, the finished ones among them, whether the
    run is still being written (or was interrupted), and why."""

    steps: list[int]
    finished: list[int]
    in_progress: bool
    reason: str

    @property
    def unfinished(self) -> list[int]:
        done = set(self.finished)
        return [n for n in self.steps if n not in done]


def _short_validation_error(exc: ValidationError, what: str = "record") -> str:
    first = exc.errors()[0]
    if first["type"] == "json_invalid":
        return f"not valid JSON ({first['msg']})"
    more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"not a valid {what}: {field_error(first)}{more}"


# --------------------------------------------------------------------------------------------------
# Local directory


# Every folder below the root is opened one component at a time without following a link (``O_NOFOLLOW``
# with ``O_DIRECTORY``), and every file with ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO opens at once instead of
# waiting for a writer) and then checked with ``fstat``. A "folder handle" is a descriptor where the
# platform has ``dir_fd`` support (Linux, macOS), else a path whose every component was checked with
# ``lstat`` (the same rules, without the protection against a swap between check and use).
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_FD_WALK = bool(_O_NOFOLLOW and _O_DIRECTORY) and os.open in os.supports_dir_fd and os.scandir in os.supports_fd
_FOLDER_FLAGS = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC
# A temporary file of this process and thread, left over or not; never through a link someone put in its place.
_TEMPORARY_FILE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _O_NOFOLLOW | _O_CLOEXEC

Handle = Any  # int (a folder descriptor) or str (a checked path)


def _at(handle: Handle, name: str) -> str:
    return name if isinstance(handle, int) else os.path.join(handle, name)


def _dir_fd(handle: Handle) -> int | None:
    return handle if isinstance(handle, int) else None


def _close(handle: Handle) -> None:
    if isinstance(handle, int):
        os.close(handle)


def _kind(mode: int) -> str:
    """What a file mode says an entry is, in words."""
    for test, name in (
        (stat.S_ISLNK, "symbolic link"),
        (stat.S_ISDIR, "folder"),
        (stat.S_ISFIFO, "FIFO (named pipe)"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISREG, "file"),
    ):
        if test(mode):
            return name
    return "special file"


def _entry_kind(handle: Handle, name: str) -> str | None:
    """What ``name`` in the folder is (``lstat``: a link is a link), or None if nothing is there."""
    try:
        return _kind(os.lstat(_at(handle, name), dir_fd=_dir_fd(handle)).st_mode)
    except OSError:
        return None


_LINKS = "a store never follows a link, reading or writing"


class LocalStore(Store):
    """A directory on disk. Writes go to a temporary file in the target directory, then ``os.replace``,
    so a reader never sees a half-written object and a crash leaves at worst a stray ``.tmp`` file
    (ignored by listings). Nothing below the root is trusted (see the module docstring): no link is
    followed, only regular files are read, and a full disk is a :class:`StoreFull` naming the root."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        super().__init__()
        self.root = Path(root)
        self.location = str(self.root)
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(f"store location {self.root} exists and is not a directory")

    def __repr__(self) -> str:
        return f"LocalStore({self.location!r})"

    # -- folders, opened without following links ---------------------------------------------------

    def _open_root(self, create: bool) -> Handle:
        """The root itself may be a link: the user named it."""
        if not _FD_WALK:
            if not self.root.is_dir():
                if not create:
                    raise KeyError(self.location)
                self.root.mkdir(parents=True, exist_ok=True)
            return os.fspath(self.root)
        try:
            return os.open(self.root, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
        except FileNotFoundError:
            if not create:
                raise KeyError(self.location) from None
        self.root.mkdir(parents=True, exist_ok=True)
        return os.open(self.root, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)

    def _child_folder(self, handle: Handle, name: str, where: str, create: bool) -> Handle:
        """The folder ``name`` inside ``handle``: KeyError when absent (unless ``create``), UnsafePath when
        it is a link or not a folder."""
        for attempt in (1, 2):
            if _FD_WALK:
                try:
                    return os.open(name, _FOLDER_FLAGS, dir_fd=handle)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                        raise
                    raise self._unsafe(where, _entry_kind(handle, name) or "file") from None
            else:
                kind = _entry_kind(handle, name)
                if kind == "folder":
                    return _at(handle, name)
                if kind is not None:
                    raise self._unsafe(where, kind)
            if not create or attempt == 2:
                raise KeyError(where)
            # made meanwhile (or a link made meanwhile: the second attempt says which)
            with contextlib.suppress(FileExistsError):
                os.mkdir(_at(handle, name), 0o777, dir_fd=_dir_fd(handle))
        raise AssertionError("unreachable")

    def _unsafe(self, where: str, kind: str) -> UnsafePath:
        if kind == "symbolic link":
            return UnsafePath(
                f"{self.path_of(where)} is a symbolic link: {_LINKS} (remove the link, or use another store location)"
            )
        return UnsafePath(f"{self.path_of(where)} is a {kind} where the store needs a folder")

    def _open_folder(self, parts: list[str], *, create: bool = False) -> Handle:
        """A handle of ``root/parts[0]/.../parts[-1]``, every component checked (see above)."""
        handle = self._open_root(create)
        try:
            for depth, name in enumerate(parts):
                child = self._child_folder(handle, name, "/".join(parts[: depth + 1]), create)
                _close(handle)
                handle = child
        except BaseException:
            _close(handle)
            raise
        return handle

    # -- primitives ------------------------------------------------------------------------------

    def lock_run(self, run_id: str) -> Any:
        """An exclusive ``flock`` on ``runs/.<run>.lock``: two processes writing one run id would mix their
        records. The kernel drops the lock when the process ends, however it ends (kill -9 included), so a
        crashed run never blocks its ``--resume``."""
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX
            return None
        name = f".{run_folder(run_id)}.lock"
        try:
            runs = self._open_folder(["runs"], create=True)
        except OSError as exc:
            raise self._write_error(f"runs/{name}", exc) from None
        try:
            fd = os.open(
                _at(runs, name), os.O_RDWR | os.O_CREAT | _O_NOFOLLOW | _O_CLOEXEC, 0o666, dir_fd=_dir_fd(runs)
            )
        except OSError as exc:
            raise self._write_error(f"runs/{name}", exc) from None
        finally:
            _close(runs)
        handle = os.fdopen(fd, "a+b")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            raise StoreError(
                f"run '{run_id}' is being written by another rewardpipe process right now (it holds "
                f"{self.root / 'runs' / name}): wait for it to end, or use another --run-id"
            ) from None
        return handle

    def _write_error(self, key: str, exc: OSError) -> StoreError:
        where = self.path_of(key)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            what = "no space left on the device" if exc.errno == errno.ENOSPC else "the disk quota is used up"
            return StoreFull(f"cannot write {where}: {what} (store {self.location})")
        if exc.errno == errno.EROFS:
            return StoreError(f"cannot write {where}: the file system is read-only")
        if exc.errno in (errno.EACCES, errno.EPERM):
            return StoreError(f"cannot write {where}: permission denied")
        if exc.errno == errno.EISDIR:
            return StoreError(f"cannot write {where}: a folder stands where the file must be")
        return StoreError(f"cannot write {where}: {exc.strerror or exc}")

    def _write(self, key: str, data: bytes) -> None:
        # Every folder opened from the root without following a link (a link never takes a write out of the
        # store), and the temporary file named for this process and thread, which write one file at a time (no
        # other writer can hold that name; one left by a crashed process of the same id is overwritten, and a
        # link put in its place is refused: O_NOFOLLOW).
        *folders, name = key.split("/")
        try:
            handle = self._open_folder(folders, create=True)
        except OSError as exc:
            raise self._write_error(key, exc) from None
        try:
            tmp = f".w{os.getpid()}-{threading.get_ident()}.tmp"  # short: a key's name may be NAME_MAX long
            fd = os.open(_at(handle, tmp), _TEMPORARY_FILE, 0o600, dir_fd=_dir_fd(handle))
            try:
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                finally:
                    os.close(fd)  # a network file system may report a full disk only here
                os.replace(
                    _at(handle, tmp), _at(handle, name), src_dir_fd=_dir_fd(handle), dst_dir_fd=_dir_fd(handle)
                )  # replaces a link itself, never what it points at
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(_at(handle, tmp), dir_fd=_dir_fd(handle))
                raise
        except OSError as exc:
            raise self._write_error(key, exc) from None
        finally:
            _close(handle)

    def _read(self, key: str) -> bytes:
        *folders, name = key.split("/")
        try:
            handle = self._open_folder(folders)
        except KeyError:
            raise KeyError(key) from None
        except UnsafePath as exc:
            raise UnreadableObject(key, str(exc)) from None
        except OSError as exc:
            raise UnreadableObject(key, f"its folder cannot be opened: {exc.strerror or exc}") from None
        try:
            return self._read_in(handle, name, key)
        finally:
            _close(handle)

    def _read_in(self, handle: Handle, name: str, key: str) -> bytes:
        """The bytes of regular file ``name`` in an open folder (KeyError when absent, else UnreadableObject)."""
        try:
            fd = os.open(_at(handle, name), _FILE_FLAGS, dir_fd=_dir_fd(handle))
        except FileNotFoundError:
            raise KeyError(key) from None
        except OSError as exc:
            kind = _entry_kind(handle, name)
            if kind is not None and kind != "file":
                raise UnreadableObject(key, f"a {kind}, not a file: not read ({_LINKS})") from None
            raise UnreadableObject(key, f"cannot be opened: {exc.strerror or exc}") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):  # checked on what was opened: a swap after the listing changes nothing
                raise UnreadableObject(key, f"a {_kind(info.st_mode)}, not a file: not read")
            # one read of one byte more than fstat's size: a short read is the end (a file still growing is
            # read on until a read comes back short)
            want = info.st_size + 1
            chunks = [os.read(fd, want)]
            while len(chunks[-1]) == want:
                want = 1 << 20
                chunks.append(os.read(fd, want))
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        except OSError as exc:
            raise UnreadableObject(key, f"cannot be read: {exc.strerror or exc}") from None
        finally:
            os.close(fd)

    def read_many(self, keys: list[str]) -> list[bytes] | None:
        """Each key's bytes in order, by the rules of :meth:`_read` (each folder opened once), or None as soon
        as one is missing or unreadable (the fast readers then leave the store to the careful path)."""
        if not _FD_WALK:  # pragma: no cover - platforms without dir_fd: the plain reader, file by file
            try:
                return [self._read(key) for key in keys]
            except (KeyError, StoreError):
                return None
        chain: list[tuple[str, Handle]] = []  # the open folders from the root down to the current one
        out: list[bytes] = []
        append, open_, fstat, read, close, regular = out.append, os.open, os.fstat, os.read, os.close, stat.S_ISREG
        folder_of, handle = None, -1
        try:
            # _read_in's rules, inlined: a 200k-record monitor reads every file here, and a call per file shows
            for key in keys:
                folder, _, name = key.rpartition("/")
                if folder != folder_of:
                    folder_of, handle = folder, self._descend(chain, folder)
                fd = open_(name, _FILE_FLAGS, dir_fd=handle)
                try:
                    info = fstat(fd)
                    if not regular(info.st_mode):
                        return None
                    want = info.st_size + 1
                    data = read(fd, want)
                    if len(data) == want:  # grown since: the whole of it
                        data = self._read_in(handle, name, key)
                finally:
                    close(fd)
                append(data)
        except (KeyError, StoreError, OSError):
            return None
        finally:
            for _, opened in chain:
                _close(opened)
        return out

    def _descend(self, chain: list[tuple[str, Handle]], folder: str) -> Handle:
        """``folder``'s handle, reusing the open folders of ``chain`` that are its ancestors and closing the
        others: keys come in listing order, so only one branch is ever open (a run may have 25,000 group
        folders; a process, 1,024 descriptors)."""
        while chain and chain[-1][0] and folder != chain[-1][0] and not folder.startswith(chain[-1][0] + "/"):
            _close(chain.pop()[1])
        if not chain:
            chain.append(("", self._open_root(create=False)))
        while chain[-1][0] != folder:
            base = chain[-1][0]
            name = folder[len(base) + 1 if base else 0 :].split("/", 1)[0]
            path = f"{base}/{name}" if base else name
            chain.append((path, self._child_folder(chain[-1][1], name, path, False)))
        return chain[-1][1]

    def _list(self, prefix: str) -> Iterator[str]:
        return self._list_checked(prefix, None)

    def _list_checked(self, prefix: str, on_stray: Callable[[BadObject], None] | None) -> Iterator[str]:
        """The regular files below ``prefix``, in key order (a folder's files by name, then each subfolder,
        depth first), less the temporary files of writes in progress. Anything else (a link, a FIFO, a
        socket, a device, a folder that cannot be listed) goes to ``on_stray``; a link or a file where a
        folder of ``prefix`` itself should be is an UnsafePath (or, with ``on_stray``, reported there)."""
        rel = prefix.rstrip("/")
        try:
            handle = self._open_folder(rel.split("/") if rel else [])
        except KeyError:
            return
        except (UnsafePath, OSError) as exc:
            problem = (
                exc
                if isinstance(exc, StoreError)
                else StoreError(f"cannot list {self.path_of(rel)}: {exc.strerror or exc}")
            )
            if on_stray is None:
                raise problem from None
            on_stray(BadObject(prefix, str(problem)))
            return
        try:
            yield from self._files_below(handle, rel, on_stray)
        finally:
            _close(handle)

    def _files_below(self, handle: Handle, rel: str, on_stray: Callable[[BadObject], None] | None) -> Iterator[str]:
        # by os.scandir itself, on the open folder: a 200k-record run is listed on every monitor
        try:
            with os.scandir(handle) as entries:
                listed = list(entries)
        except OSError as exc:
            if on_stray is not None:
                on_stray(
                    BadObject(
                        f"{rel}/", f"this folder cannot be listed ({exc.strerror or exc}): its objects are not read"
                    )
                )
            return
        files, folders = [], []
        for entry in listed:
            try:
                if entry.is_file(follow_symlinks=False):  # (the type the listing gave: no stat per file)
                    name = entry.name
                    if not (name[0] == "." and name.endswith(".tmp")):
                        files.append(name)
                    continue
                if entry.is_dir(follow_symlinks=False):
                    folders.append(entry.name)
                    continue
                kind = _kind(entry.stat(follow_symlinks=False).st_mode)
            except OSError:  # gone since the listing
                continue
            if on_stray is not None:
                on_stray(
                    BadObject(
                        f"{rel}/{entry.name}" if rel else entry.name,
                        f"a {kind}, not a file or a folder: not read ({_LINKS})",
                    )
                )
        for name in sorted(files):
            yield f"{rel}/{name}" if rel else name
        for name in sorted(folders):
            where = f"{rel}/{name}" if rel else name
            try:
                child = self._child_folder(handle, name, where, create=False)
            except (KeyError, StoreError, OSError) as exc:  # gone, or swapped for a link, since the listing
                if on_stray is not None and not isinstance(exc, KeyError):
                    on_stray(BadObject(f"{where}/", str(exc)))
                continue
            try:
                yield from self._files_below(child, where, on_stray)
            finally:
                _close(child)

    def _list_dirs(self, prefix: str) -> list[str]:
        return self._dirs_checked(prefix, None)

    def _dirs_checked(self, prefix: str, on_stray: Callable[[BadObject], None] | None) -> list[str]:
        """The real folders directly below ``prefix``; a link among them goes to ``on_stray``."""
        rel = prefix.rstrip("/")
        try:
            handle = self._open_folder(rel.split("/") if rel else [])
        except KeyError:
            return []
        except OSError as exc:
            raise StoreError(f"cannot list {self.path_of(rel)}: {exc.strerror or exc}") from None
        try:
            with os.scandir(handle) as entries:
                listed = list(entries)
        except OSError as exc:
            raise StoreError(f"cannot list {self.path_of(rel)}: {exc.strerror or exc}") from None
        finally:
            _close(handle)
        names = []
        for entry in listed:
            try:
                if entry.is_dir(follow_symlinks=False):
                    names.append(entry.name)
                elif entry.is_symlink() and on_stray is not None:
                    on_stray(BadObject(f"{prefix}{entry.name}/", f"a symbolic link: not followed ({_LINKS})"))
            except OSError:
                continue
        return sorted(names)

    def _delete_prefix(self, prefix: str) -> None:
        *folders, name = check_key(prefix.rstrip("/")).split("/")
        try:
            handle = self._open_folder(folders)
        except KeyError:
            return
        try:
            kind = _entry_kind(handle, name)
            if kind == "folder":
                if isinstance(handle, int):
                    shutil.rmtree(name, dir_fd=handle)  # the fd-based walk: removes links, never follows them
                else:
                    shutil.rmtree(_at(handle, name))
            elif kind is not None:  # a link (or a file) where the run's folder was: remove it, not its target
                os.unlink(_at(handle, name), dir_fd=_dir_fd(handle))
        except OSError as exc:
            raise StoreError(f"cannot delete {self.path_of(prefix)}: {exc.strerror or exc}") from None
        finally:
            _close(handle)


# --------------------------------------------------------------------------------------------------
# S3


#: The environment variables that bound every S3 call a store makes (see :class:`S3Limits`).
S3_LIMIT_ENV = {
    "connect_timeout_s": "REWARDPIPE_S3_CONNECT_TIMEOUT",
    "read_timeout_s": "REWARDPIPE_S3_READ_TIMEOUT",
    "attempts": "REWARDPIPE_S3_ATTEMPTS",
    "deadline_s": "REWARDPIPE_S3_DEADLINE",
    "cooldown_s": "REWARDPIPE_S3_COOLDOWN",
}
_S3_LIMIT_BOUNDS = {
    "connect_timeout_s": (0.1, 300.0),
    "read_timeout_s": (0.1, 3600.0),
    "attempts": (1, 20),
    "deadline_s": (0.0, 3600.0),
    "cooldown_s": (0.0, 3600.0),
}


@dataclass(frozen=True)
class S3Limits:
    """How long one S3 call may take. botocore's defaults (60 s to connect, 60 s per read, its own retries
    under the store's) let a hung endpoint hold one call for about 15 minutes; here an attempt waits at
    most ``connect_timeout_s`` for the connection and ``read_timeout_s`` for each read of the answer,
    a call makes at most ``attempts`` attempts and starts none after ``deadline_s`` seconds, so the worst
    case of one call is about ``deadline_s + connect_timeout_s + read_timeout_s`` (85 s by default).
    After a call has spent its attempts on connection failures, every later call makes one attempt until
    S3 answers again; and if those failures were slow (timeouts: a hung endpoint), the store fails at once
    for ``cooldown_s`` seconds first, so a run spills in seconds what a hung endpoint would have held for
    hours. Each is set by its ``REWARDPIPE_S3_*`` variable (:data:`S3_LIMIT_ENV`)."""

    connect_timeout_s: float = 5.0
    read_timeout_s: float = 20.0
    attempts: int = 5
    deadline_s: float = 60.0
    cooldown_s: float = 30.0

    @classmethod
    def from_env(cls, env: Any = None) -> S3Limits:
        """The limits set in ``env`` (default ``os.environ``); a bad value is a StoreError naming it."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for name, variable in S3_LIMIT_ENV.items():
            raw = env.get(variable)
            if raw is None or not str(raw).strip():
                continue
            low, high = _S3_LIMIT_BOUNDS[name]
            try:
                value: float = int(raw) if name == "attempts" else float(raw)
            except ValueError:
                value = float("nan")
            if not low <= value <= high:  # NaN fails too
                kind = "a whole number" if name == "attempts" else "a number of seconds"
                raise StoreError(f"{variable} must be {kind} from {low:g} to {high:g}, got {raw!r}")
            values[name] = value
        return cls(**values)

    def client_config(self) -> Any:
        """The botocore configuration of a store's own client. botocore does not retry (the store does):
        the attempts are counted once, and a conditional write whose answer was lost reaches the caller,
        which can tell "applied" from "lost a race" (see rewardpipe.aws.monitoring)."""
        from botocore.config import Config

        return Config(
            connect_timeout=self.connect_timeout_s,
            read_timeout=self.read_timeout_s,
            retries={"mode": "standard", "total_max_attempts": 1},
            tcp_keepalive=True,
        )


# What classify_s3_error answers.
S3_MISSING, S3_RETRY, S3_CONNECTION, S3_PERMANENT = "missing", "retry", "connection", "permanent"
# S3's retryable answers: throttling (503 SlowDown), server errors and timeouts.
S3_RETRYABLE_CODES = frozenset(
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


def s3_error_code(exc: BaseException) -> str:
    """The error code S3 answered with, or the exception's type name when there was no answer (a botocore
    connection error has no ``response``; a requests-style one has ``response = None``)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        error = response.get("Error")
        if not isinstance(error, dict):
            error = {}
        status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        return str(error.get("Code") or status or type(exc).__name__)
    return type(exc).__name__


def classify_s3_error(exc: BaseException) -> str:
    """:data:`S3_MISSING` (no such key), :data:`S3_RETRY` (throttling, a server error), :data:`S3_CONNECTION`
    (no answer, or an answer cut short: every botocore connection and read error, and the urllib3 and
    http.client errors a body read raises below botocore) or :data:`S3_PERMANENT` (denied, no bucket, no
    credentials, a bad parameter: waiting cannot fix it)."""
    import http.client

    from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError, IncompleteReadError
    from botocore.exceptions import ConnectionError as BotoConnectionError

    if isinstance(exc, ClientError):
        code = s3_error_code(exc)
        if code in ("NoSuchKey", "404", "NotFound"):
            return S3_MISSING
        # a named code decides; a bare status (a HEAD has no body to name it) is retried when it is a 5xx
        return S3_RETRY if code in S3_RETRYABLE_CODES or (code.isdigit() and int(code) >= 500) else S3_PERMANENT
    if isinstance(exc, (BotoConnectionError, HTTPClientError, IncompleteReadError)):
        return S3_CONNECTION  # refused, reset, closed early, timed out, proxy, TLS; a body read cut short
    if isinstance(exc, BotoCoreError):
        return S3_PERMANENT  # no credentials or region, a bad parameter: botocore's own refusals
    connection_errors: tuple[type[BaseException], ...] = (http.client.HTTPException, ConnectionError, TimeoutError)
    try:
        import urllib3.exceptions
    except ImportError:  # pragma: no cover - botocore depends on urllib3
        pass
    else:
        connection_errors += (urllib3.exceptions.HTTPError,)
    if isinstance(exc, connection_errors):
        return S3_CONNECTION
    return S3_PERMANENT


class StoreUnreachable(StoreError):
    """S3 did not answer (connection or read failures) within the store's :class:`S3Limits`."""


class S3Store(Store):
    """An S3 bucket (optionally under a prefix). ``client`` defaults to a boto3 S3 client bounded by
    ``limits`` (default :meth:`S3Limits.from_env`).

    Every call is retried (``attempts`` in all, exponential backoff from ``backoff_s`` with full jitter, no
    new attempt after the deadline) when S3 answers with a throttling or server error or the connection
    fails or is cut short (:func:`classify_s3_error`); a missing bucket, denied access or missing
    credentials fail at once, since waiting cannot fix them.
    """

    backoff_s = 0.2
    RETRYABLE_CODES = S3_RETRYABLE_CODES

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        client: Any = None,
        sleep: Callable[[float], None] = time.sleep,
        *,
        limits: S3Limits | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        if not bucket or "/" in bucket:
            raise StoreError(f"invalid S3 bucket name {bucket!r}")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        if self.prefix:
            check_s3_prefix(check_key(self.prefix))
        self.limits = limits or S3Limits.from_env()
        self.attempts = self.limits.attempts
        if client is None:
            import boto3

            client = boto3.client("s3", config=self.limits.client_config())
        self.client = client
        self.sleep = sleep
        self.clock = clock
        self.location = f"s3://{bucket}/{self.prefix}".rstrip("/")
        # The cool-down after a call's attempts all failed to reach S3 (see S3Limits).
        self._down_until: float | None = None
        self._down_reason = ""
        self._degraded = False
        self._down_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"S3Store({self.location!r})"

    def _full(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _strip(self, full_key: str) -> str:
        return full_key[len(self.prefix) + 1 :] if self.prefix else full_key

    @staticmethod
    def _code(exc: Exception) -> str:
        return s3_error_code(exc)

    def _client_error(self, exc: Exception, action: str) -> StoreError:
        code = self._code(exc)
        if code == "NoSuchBucket":
            return StoreError(f"S3 bucket {self.bucket!r} does not exist ({self.location})")
        if code in ("AccessDenied", "403"):
            return StoreError(f"access denied to {self.location} while trying to {action}")
        return StoreError(f"S3 error {code} on {self.location} while trying to {action}: {exc}")

    def _call(self, action: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        """``fn(**kwargs)`` within the store's limits; NoSuchKey is passed through as KeyError, the rest as
        StoreError (StoreUnreachable when S3 could not be reached)."""
        with self._down_lock:
            down_until, reason, degraded = self._down_until, self._down_reason, self._degraded
        started = self.clock()
        if down_until is not None and started < down_until:
            raise StoreUnreachable(
                f"S3 at {self.location} is not answering ({reason}); {action} not tried: the "
                f"store tries again in {down_until - started:.0f}s (REWARDPIPE_S3_COOLDOWN)"
            )
        attempts = 1 if degraded else self.attempts  # until S3 answers again, one attempt decides
        last: Exception | None = None
        kind = S3_PERMANENT
        attempt = 0
        for attempt in range(1, attempts + 1):
            try:
                result = fn(**kwargs)
            except Exception as exc:  # every failure is classified, none escapes unnamed
                kind, last = classify_s3_error(exc), exc
                if kind == S3_MISSING:
                    self._answered()
                    raise KeyError(action) from None
                if kind == S3_PERMANENT:
                    self._answered()
                    raise self._client_error(exc, action) from exc
            else:
                self._answered()
                return result
            elapsed = self.clock() - started
            if attempt == attempts or elapsed >= self.limits.deadline_s:
                break
            self.sleep(
                min(random.uniform(0, self.backoff_s * 2 ** (attempt - 1)), max(0.0, self.limits.deadline_s - elapsed))
            )
        assert last is not None
        elapsed = self.clock() - started
        tried = f"{attempt} attempt(s) in {elapsed:.1f}s"
        if kind == S3_CONNECTION:
            # Failures that cost time (timeouts: a hung endpoint) start a cool-down in which calls fail at
            # once; quick ones (refused, reset) only cut later calls to one attempt each. Any answer ends both.
            with self._down_lock:
                self._degraded = True
                slow = elapsed >= min(self.limits.connect_timeout_s, self.limits.deadline_s)
                self._down_until = self.clock() + self.limits.cooldown_s if slow and self.limits.cooldown_s else None
                self._down_reason = f"{type(last).__name__} after {tried}"
            raise StoreUnreachable(
                f"S3 at {self.location} could not be reached while trying to {action}: "
                f"{type(last).__name__}: {last} ({tried}; the limits are set by "
                f"{', '.join(S3_LIMIT_ENV.values())})"
            ) from last
        error = self._client_error(last, action)
        raise type(error)(f"{error} ({tried})") from last

    def _answered(self) -> None:
        if self._degraded:
            with self._down_lock:
                self._down_until, self._degraded = None, False

    def _write(self, key: str, data: bytes) -> None:
        full = self._full(key)
        if len(full.encode("utf-8", "surrogatepass")) > S3_KEY_LIMIT:  # a key no layout builds (see check_s3_prefix)
            raise StoreError(
                f"cannot write {self.path_of(key[:80])}...: the key is {len(full.encode('utf-8', 'surrogatepass'))} "
                f"bytes, over S3's {S3_KEY_LIMIT}-byte key limit"
            )
        self._call(
            f"write {key}",
            self.client.put_object,
            Bucket=self.bucket,
            Key=full,
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
                    f"could not delete {len(failed)} object(s) under {self.path_of(prefix)}, "
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
