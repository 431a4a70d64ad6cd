"""verl's rollout dump (``trainer.rollout_data_dir``) as rewardpipe records, so the within-group monitor watches a
verl run: ``rewardpipe verl import DUMP --out STORE`` then ``rewardpipe monitor STORE`` / ``rewardpipe report``.

verl 0.9.1 writes one ``<step>.jsonl`` per training step into ``trainer.rollout_data_dir``, a line per rollout with
``input`` (the decoded prompt), ``output`` (the decoded response), ``gts``, ``score`` (the reward verl trains on)
and ``step``. What else a line holds depends on the trainer:

* the legacy trainer (``trainer.use_v1=false``, ``RayPPOTrainer``) adds every ``reward_extra_info`` key, so each
  component :func:`rewardpipe.integrations.verl.compute_score` returns and its ``reward_error``, but no group id:
  the rollouts of one group share their prompt, so a group is the rollouts of one ``input`` text at one step;
* the v1 trainer (verl 0.9.1's default) adds only ``uid``, a key ``{uid}_{session}_{index}`` whose first part is
  the GRPO group (the prompt's uid verl's advantage groups by), and none of the reward's extra info: only the
  aggregate (``score``) can be judged from it.

Every numeric key other than verl's own is a component; ``reward_error`` = 1 (rewardpipe's flag for a sample that
could not be scored, which verl trained on as ``error_reward``) makes the line an error record, never a score.
A line that is not a JSON object with a numeric ``score`` is named and skipped (one bad line never costs the rest).

Every field of a line is the trainer's, the model's or the reward's (the reward's extra info replaces any column of
verl's own it shares a name with, ``step`` included), and the dump directory is whatever is on disk: a line is
read to at most :data:`MAX_DUMP_LINE_BYTES`, a line of a ``<step>.jsonl`` file is filed in that step whatever its
``step`` says, a key is a component only under a component's name, a transcript's text is cut as the other
trainer integrations cut theirs, and no symbolic link in the dump is followed.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from rewardpipe.models import (
    MAX_ID_LENGTH,
    MAX_STEP,
    TRAINER_TRANSCRIPT_MESSAGE_CHARS,
    InputFileError,
    cut_text,
    id_problem,
    is_score,
    open_input,
    score_problem,
)

#: The keys verl writes itself (and a line's rollout-id column): never a component.
VERL_DUMP_KEYS = frozenset({"input", "output", "gts", "score", "step", "uid", "request_id", "reward"})
#: rewardpipe's per-sample flag (:func:`rewardpipe.integrations.verl.compute_score`).
ERROR_FLAG = "reward_error"
#: verl's dump file of one step: ``<global_steps>.jsonl``.
STEP_FILE = re.compile(r"([0-9]+)\.jsonl")  # ASCII digits (\d is every script's)
#: verl 0.9.1's v1 key of a rollout: ``{uid}_{session_id}_{index}``.
_V1_KEY = re.compile(r"(.+)_([0-9]+)_([0-9]+)")
#: The longest dump line read, in bytes (its newline included). verl's line holds the decoded prompt and response
#: and the ground truth (a code task's test cases can take megabytes); a longer one is named and skipped without
#: being held.
MAX_DUMP_LINE_BYTES = 32 << 20
#: The most components a step file gives its records (the columnar monitor's limit of names): past it, every record
#: of the step carried every key any line had.
MAX_DUMP_COMPONENTS = 256


@dataclass
class DumpRead:
    """What :func:`read_rollout_dump` made of a dump: the records and transcripts (plain dicts in
    :class:`rewardpipe.models.Record` / ``RolloutTranscript`` shape), the lines it skipped (``file:line: why``),
    whether any line carried a group id (``uid``) and whether any was grouped by its prompt, and the components."""

    records: list[dict[str, Any]] = field(default_factory=list)
    transcripts: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    grouped_by_uid: bool = False
    components: dict[str, None] = field(default_factory=dict)  # the numeric keys read, first seen first
    #: :func:`import_rollout_dump`: rollouts written, their steps, and the steps left as the store held them
    count: int = 0
    steps: set[int] = field(default_factory=set)
    already_stored: list[int] = field(default_factory=list)
    grouped_by_prompt: bool = False  # any line grouped by its prompt (a dump of both trainers' steps has both)
    #: each record's output index in its session (verl's ``{uid}_{session}_{index}``; 0 without one)
    output_indices: list[int] = field(default_factory=list, repr=False)
    #: :func:`import_rollout_dump`: what failed in keeping the run's manifest and step marks (a line each)
    failures: list[str] = field(default_factory=list)
    #: :func:`import_rollout_dump` with ``live``: the step stored but not marked finished (verl may be writing it)
    left_unfinished: list[int] = field(default_factory=list)


def file_step(file: Path) -> int | None:
    """The step a dump file's name gives (``<step>.jsonl``), or None."""
    match = STEP_FILE.fullmatch(file.name)
    return None if match is None else int(match.group(1))


def dump_files(path: str | Path, skipped: list[str] | None = None) -> list[Path]:
    """The dump's step files in step order: ``path`` itself when it is a file, else its ``<step>.jsonl`` files.
    A path that does not exist, or a directory with no such file, is a ValueError naming it. A step file that is a
    symbolic link (it could name any file on the machine), or that names a step another file already names as verl
    does (``01.jsonl`` beside ``1.jsonl``), is left out and named in ``skipped``."""
    path = Path(path)
    if path.is_file():
        return [path]
    if path.exists() and not path.is_dir():  # a pipe, a device: the import reads each file twice (its end first)
        raise ValueError(
            f"{path} is not a regular file or a directory: give trainer.rollout_data_dir or one <step>.jsonl"
        )
    if not path.is_dir():
        raise ValueError(f"verl rollout dump not found: {path} (give trainer.rollout_data_dir or one <step>.jsonl)")
    by_step: dict[int, list[Path]] = {}
    links = 0
    for entry in path.iterdir():
        step = file_step(entry)
        if step is None:
            continue
        if entry.is_symlink():
            links += 1
            if skipped is not None:
                skipped.append(f"{entry}: a symbolic link: not followed (a dump's step files are verl's own)")
        elif entry.is_file():
            by_step.setdefault(step, []).append(entry)
    files = []
    for step, named in sorted(by_step.items()):
        # verl writes str(step): that name is the step's; another spelling of it is a stray, never a second copy
        named.sort(key=lambda p: (p.name != f"{step}.jsonl", p.name))
        files.append(named[0])
        for stray in named[1:]:
            if skipped is not None:
                skipped.append(f"{stray}: names step {step} as {named[0].name} does: not imported")
    if not files:
        linked = f" ({links} symbolic link(s) not followed)" if links else ""
        raise ValueError(f"{path} holds no <step>.jsonl file{linked}: is it verl's trainer.rollout_data_dir?")
    return files


def _number(value: Any) -> float | None:
    """A component's value: a finite number, else None (verl writes NaN as ``NaN``, a missing key as null)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer past a float's range (json reads 10**400 written out as an int)
        return None
    return number if math.isfinite(number) else None


def _component(value: Any) -> float | None:
    """A component's value: :func:`_number`, and a bool as 1.0 / 0.0 (verl's DAPO scorer returns ``acc`` as one)."""
    return float(value) if isinstance(value, bool) else _number(value)


def _identity(line: Mapping[str, Any], fallback: str) -> tuple[str, str, int, bool]:
    """``(group, rollout, output index, grouped by uid)`` of a line. With v1's ``{uid}_{session}_{index}`` key the
    group is the uid and the rollout the session (an agent loop's session can dump several outputs, its last one the
    rollout verl trains on); a plain uid is the group and ``fallback`` the rollout. Without a uid the group is a digest
    of the prompt text (every rollout of one prompt was decoded from the same prompt tokens). The uid is at most
    MAX_ID_LENGTH characters (checked before), so its index is an integer int() reads."""
    uid = line.get("uid")
    if isinstance(uid, str) and uid:
        match = _V1_KEY.fullmatch(uid)
        if match:
            return match.group(1), f"{match.group(1)}_{match.group(2)}", int(match.group(3)), True
        return uid, fallback, 0, True
    text = line["input"]  # a line with neither is refused before (its group cannot be told)
    return "p" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16], fallback, 0, False


def _uid_problem(line: Mapping[str, Any]) -> str | None:
    """Why the line's uid cannot give the group and rollout ids (parts of it), or None: what every other input
    refuses (:data:`rewardpipe.models.InputId`: a terminal escape, a bidi override or a lone surrogate would be
    printed escaped, so `show` could never be given the id, and two ids could print alike), or longer than any id.
    Checked on the uid itself before its index part is read as an integer (5,000 digits are none int() reads)."""
    uid = line.get("uid")
    if not (isinstance(uid, str) and uid):
        return None  # (grouped by its prompt)
    problem = id_problem(uid) or (
        f"is {len(uid)} characters long, at most {MAX_ID_LENGTH}" if len(uid) > MAX_ID_LENGTH else None
    )
    return None if problem is None else f"uid {uid[:60]!a} {problem}"


def _fallback_rollout(file: Path, lineno: int) -> str:
    """A rollout id for a line without a uid: the step file's name and the line, or a digest of a name that is no id
    (a single file given by its path can be named anything)."""
    stem = file.stem
    if id_problem(stem) is not None or len(stem) > 200:
        stem = "f" + hashlib.sha256(file.name.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return f"{stem}-l{lineno}"


def _flagged(line: Mapping[str, Any]) -> bool:
    """Whether rewardpipe's flag marks the line unscorable (``reward_error`` 1, or ``true``): an error record."""
    return _component(line.get(ERROR_FLAG)) not in (None, 0.0)


def _has_text(line: Mapping[str, Any], key: str) -> bool:
    value = line.get(key)
    return isinstance(value, str) and value != ""


def _being_written(fh: IO[bytes]) -> bool:
    """Whether verl's dump thread is still writing the file (it writes line by line, each ending in a newline)."""
    if fh.seek(0, 2) == 0:
        return False
    fh.seek(-1, 2)
    written = fh.read(1) == b"\n"
    fh.seek(0)
    return not written


def _lines(fh: IO[bytes]) -> Iterator[tuple[int, Any, str | None]]:
    """``(line number, parsed JSON or None, why it is unreadable or None)`` for each non-empty line; a line past
    :data:`MAX_DUMP_LINE_BYTES` is passed over in bounded reads, never held."""
    bound = MAX_DUMP_LINE_BYTES
    lineno = 0
    while raw := fh.readline(bound + 1):
        lineno += 1
        if len(raw) > bound:
            while raw and not raw.endswith(b"\n"):
                raw = fh.readline(1 << 20)
            yield lineno, None, f"more than {bound:,} bytes long: not read"
            continue
        if not raw.strip():
            continue
        try:
            yield lineno, json.loads(raw), None
        except (ValueError, RecursionError) as exc:  # not UTF-8 or not JSON (a line cut by a crash)
            yield lineno, None, f"not a JSON line ({type(exc).__name__})"


def read_rollout_dump(path: str | Path, run_id: str = "verl", weights: Mapping[str, float] | None = None) -> DumpRead:
    """Records and transcripts of verl's rollout dump at ``path`` (``trainer.rollout_data_dir`` or one of its
    files). ``weights``: the reward's component weights (default 1.0 each; verl's dump does not carry them), which
    the advantage shares read. Steps come from each file's name (else each line's ``step``)."""
    out = DumpRead()
    given = Path(path).is_file()
    for file in dump_files(path, out.skipped):
        _read_file(file, run_id, weights, out, follow=given)
    return out


@dataclass
class _Rollout:
    """What a record and its transcript take of one dump line (the line itself, its ground truth and every key
    that is no component, is not held)."""

    lineno: int
    step: int
    group_id: str
    rollout_id: str
    index: int
    by_uid: bool
    score: float | None  # None only for a flagged row (an error record)
    flagged: bool
    values: dict[str, float | None]
    prompt: str
    response: str


class _FileReading:
    """One step file's lines as :class:`_Rollout` s, the components its keys name, and the lines it skipped."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self.name_step = file_step(file)
        self.components: dict[str, None] = {}  # every component of the file, in first-seen order
        self.rollouts: list[_Rollout] = []
        self.skipped: list[str] = []
        self.misnamed: dict[str, None] = {}  # numeric keys that are no component's name
        self.past_bound: dict[str, None] = {}  # numeric keys past MAX_DUMP_COMPONENTS

    def add(self, lineno: int, line: Any, problem: str | None) -> None:
        problem = problem or self._problem(line)
        if problem is None:
            problem = _uid_problem(line)
        step = None
        if problem is None:
            step, problem = self._step(line)
        if problem is not None:
            self.skipped.append(f"{self.file}:{lineno}: {problem}")
            return
        assert isinstance(line, dict) and step is not None
        # (the group and rollout ids are parts of a uid that is an id, or a digest, or the checked file name's)
        group_id, rollout_id, index, by_uid = _identity(line, _fallback_rollout(self.file, lineno))
        self.rollouts.append(
            _Rollout(
                lineno,
                step,
                group_id,
                rollout_id,
                index,
                by_uid,
                _number(line.get("score")),
                _flagged(line),
                self._values(line),
                _cut(line.get("input")),
                _cut(line.get("output")),
            )
        )

    @staticmethod
    def _problem(line: Any) -> str | None:
        if not isinstance(line, dict):
            return f"a JSON {type(line).__name__}, not an object"
        score = _number(line.get("score"))
        if _flagged(line):
            pass  # an error record whatever verl trained on: its score is no statistic's
        elif score is None:
            return "no finite numeric score (the reward verl trained on)"
        elif not is_score(score):
            return f"score {score_problem(score)}"
        if not _has_text(line, "uid") and not _has_text(line, "input"):
            # grouped by nothing, every such rollout of a step would be one group: a dead component looked alive
            return "neither a uid nor an input (the prompt's text): its group cannot be told"
        return None

    def _step(self, line: dict[str, Any]) -> tuple[int | None, str | None]:
        """``(the line's step, None)`` or ``(None, why it has none)``. A line of a file named ``<step>.jsonl`` is of
        that step: one claiming another is named, never filed there (it would replace that step's rollouts of the
        same uid, or join them) nor here (verl writes a step's lines into its own file; another step means a copied
        or hand-made file, or a reward's extra info named ``step``, which replaces verl's column)."""
        claimed = line.get("step")
        if isinstance(claimed, int) and not isinstance(claimed, bool) and claimed >= 0:
            step = claimed
        elif self.name_step is not None:
            step = self.name_step
        else:
            return None, "no step (a non-negative whole number) and the file is not named <step>.jsonl"
        if step > MAX_STEP:  # (the store refused it in pydantic's words, one message per rollout)
            return None, f"step {step} is past the largest a store holds ({MAX_STEP})"
        if self.name_step is not None and step != self.name_step:
            return None, (
                f"step {step} in the file of step {self.name_step}: not imported (verl writes a step into its own "
                f"file; a reward's extra info named 'step' replaces verl's)"
            )
        return step, None

    def _values(self, line: dict[str, Any]) -> dict[str, float | None]:
        """The line's components; a numeric key that is no component's name, or past the bound, is named once."""
        from rewardpipe.components import ComponentDefinitionError, check_name

        values: dict[str, float | None] = {}
        for key, value in line.items():
            if key in VERL_DUMP_KEYS or key == ERROR_FLAG:
                continue
            number = _component(value)
            if number is None:
                continue
            if key not in self.components:
                if key in self.misnamed or key in self.past_bound:
                    continue
                try:
                    check_name(key)
                except ComponentDefinitionError:
                    self.misnamed[key] = None
                    continue
                if len(self.components) >= MAX_DUMP_COMPONENTS:
                    self.past_bound[key] = None
                    continue
                self.components[key] = None
            values[key] = number
        return values

    def notes(self) -> list[str]:
        """What the file's lines had that was not taken, one line each."""
        from rewardpipe.components import RESERVED_NAMES

        notes = []
        named = list(self.misnamed)
        for key in named[:5]:
            why = (
                "the monitor's own name"
                if key in RESERVED_NAMES
                else "a component is named by 1 to 64 letters, digits, '_', '.' or '-', a letter or '_' first"
            )
            shown = f"{key[:60]!a}{'...' if len(key) > 60 else ''}"
            notes.append(f"{self.file}: key {shown} is no component name ({why}): not read")
        if len(named) > 5:
            notes.append(f"{self.file}: {len(named) - 5} more keys that are no component name: not read")
        if self.past_bound:
            total = len(self.components) + len(self.past_bound)
            notes.append(
                f"{self.file}: {total:,} numeric keys, more than the {MAX_DUMP_COMPONENTS} components a step "
                f"holds: the first {MAX_DUMP_COMPONENTS} read, the rest not"
            )
        return notes

    def kept(self) -> list[_Rollout]:
        """The rollouts of the file, one a rollout: a session's last output (the highest index) stands for it, as
        verl's trainer keeps it. A v1 key given twice (verl writes each once) keeps its first line, and in a step
        whose lines carry uids a line without one is left out (one trainer writes one shape; grouped by a digest of
        its prompt, it would join the group of a uid spelled as that digest): both named."""
        with_uid = {r.step for r in self.rollouts if r.by_uid}
        first_line: dict[tuple[int, str, str, int], int] = {}
        latest: dict[tuple[int, str, str], _Rollout] = {}
        for rollout in self.rollouts:
            where = f"{self.file}:{rollout.lineno}"
            if not rollout.by_uid and rollout.step in with_uid:
                self.skipped.append(
                    f"{where}: no uid, while other lines of step {rollout.step} have one: its group "
                    f"cannot be told apart from theirs"
                )
                continue
            key = (rollout.step, rollout.group_id, rollout.rollout_id)
            if rollout.by_uid:
                seen = first_line.setdefault((*key, rollout.index), rollout.lineno)
                if seen != rollout.lineno:
                    self.skipped.append(f"{where}: the same uid as line {seen} (verl writes each once): not read")
                    continue
            if key not in latest or rollout.index > latest[key].index:
                latest[key] = rollout
        return list(latest.values())


def _cut(value: Any) -> str:
    """A transcript's text of a dump field, cut as the trainer integrations cut theirs."""
    if isinstance(value, str):
        text = value
    elif value is None:
        text = ""
    else:
        try:
            text = json.dumps(value, default=str)
        except (ValueError, RecursionError):  # (json read it, but nested near its limit it need not write it back)
            text = f"<a JSON {type(value).__name__}>"
    return cut_text(text, TRAINER_TRANSCRIPT_MESSAGE_CHARS)


def _read_file(
    file: Path, run_id: str, weights: Mapping[str, float] | None, out: DumpRead, *, follow: bool = False
) -> None:
    """One step file's records and transcripts, appended to ``out`` (its components: the file's numeric keys that
    name components). A file that changed while it was read (verl rewrote it) is named and left for the next
    import: its lines would be two batches' rollouts."""
    reading = _FileReading(file)
    try:  # (a file found in the dump: no link followed, even one put there after the listing, no FIFO waited on)
        fh = open_input(file, follow_links=follow, pipes=False)
    except (OSError, InputFileError) as exc:
        why = "a symbolic link: not followed" if os.path.islink(file) else f"cannot be read ({exc})"
        out.skipped.append(f"{file}: {why}")
        return
    with fh:
        before = os.fstat(fh.fileno())
        if _being_written(fh):
            out.skipped.append(
                f"{file}: its last line has no newline, so verl is still writing it: not imported (a step judged "
                f"on part of its rollouts is not judged again); import again once it is written"
            )
            return
        for lineno, line, problem in _lines(fh):
            reading.add(lineno, line, problem)
        after = os.fstat(fh.fileno())
    if (before.st_size, before.st_mtime_ns, before.st_ctime_ns) != (
        after.st_size,
        after.st_mtime_ns,
        after.st_ctime_ns,
    ):
        out.skipped.append(f"{file}: changed while it was read (rewritten by verl?): not imported; import again")
        return
    kept = reading.kept()
    out.skipped += reading.skipped + reading.notes()
    components = reading.components
    weight_of = {name: float((weights or {}).get(name, 1.0)) for name in components}
    out.components.update(components)
    for rollout in kept:
        out.grouped_by_uid = out.grouped_by_uid or rollout.by_uid
        out.grouped_by_prompt = out.grouped_by_prompt or not rollout.by_uid
        values = {name: rollout.values.get(name) for name in components}
        ids = {
            "run_id": run_id,
            "step": rollout.step,
            "group_id": rollout.group_id,
            "rollout_id": rollout.rollout_id,
            "task_id": rollout.group_id,
        }
        flagged = rollout.flagged
        trained_on = "its score is no finite number" if rollout.score is None else f"verl trained on {rollout.score}"
        record = {
            **ids,
            "status": "error" if flagged else "scored",
            "error": (
                {"kind": "reward_error", "message": f"rewardpipe could not score it ({trained_on})"}
                if flagged
                else None
            ),
            "components": dict.fromkeys(components) if flagged else values,
            "weights": weight_of,
            "aggregate": None if flagged else rollout.score,
            "metrics": {},
        }
        out.records.append(record)
        out.output_indices.append(rollout.index)
        out.transcripts.append(
            {
                **ids,
                "verdict": {"status": "not_executed", "reason": "verl's rollout: no code run by rewardpipe"},
                "status": record["status"],
                "components": record["components"],
                "aggregate": record["aggregate"],
                "messages": [
                    {"role": "user", "content": rollout.prompt},
                    {"role": "assistant", "content": rollout.response},
                ],
            }
        )


def import_rollout_dump(
    path: str | Path,
    store: Any,
    run_id: str = "verl",
    weights: Mapping[str, float] | None = None,
    *,
    again: bool = False,
    live: bool = False,
) -> DumpRead:
    """Write the dump's records and transcripts into ``store`` (a :class:`rewardpipe.store.Store`) under ``run_id``,
    one step file at a time (a long run's dump is never held whole). A step the store already holds for the run is
    left as it is (``already_stored``), so importing a growing dump again adds its new steps; ``again`` writes
    every step again (the same keys). Either way a step the dump no longer holds whole (rewritten by a resumed run)
    is left as the run holds it and named. The run is held for the import (:meth:`rewardpipe.store.Store.lock_run`:
    a StoreError when another process writes it). Returns what was read, without the records (``count``,
    ``steps``).

    The run's manifest and step marks are kept as ``rewardpipe run`` keeps them
    (:class:`rewardpipe.integrations.progress.StoredProgress`): a step is marked finished once every rollout of it is
    stored, so ``monitor`` / ``report`` running during the import, or after it was killed half-way, name that step
    unfinished instead of judging part of its groups; the next import reads an unfinished step again and completes
    it. A run imported before without a manifest (every step counted) is left so.

    ``live`` (verl is still running): the newest step file is stored but not marked finished. verl writes its step
    files one at a time and in order (one dump thread), so a step file is whole once a later step's file exists, but
    the newest one may be caught mid-write ending in a newline (whole lines, not all of them), which nothing in the
    file tells; the next import reads it again and marks it once a later file exists, or when not ``live``."""
    from rewardpipe.store import run_id_problem

    problem = run_id_problem(run_id)
    if problem is not None:  # every rollout would be refused, one message each
        raise ValueError(problem)
    # One writer a run (as `rewardpipe run` holds it): two imports at once each judged a step new or grown from
    # what the run held when it looked, so two dumps' rollouts could both be written into one step.
    dump_files(path)  # (a path that is no dump is said before anything is written into the store: the lock file)
    lock = store.lock_run(run_id)
    try:
        return _import_locked(path, store, run_id, weights, again, live)
    finally:
        if lock is not None:
            lock.close()


def _import_locked(
    path: str | Path, store: Any, run_id: str, weights: Mapping[str, float] | None, again: bool, live: bool
) -> DumpRead:
    from rewardpipe.integrations.progress import StoredProgress

    held = set() if run_id not in store.list_runs() else set(store.list_steps(run_id))
    # (a store of your own without step marks: its steps say nothing either way, every one counted)
    marked = callable(getattr(store, "run_progress", None))
    unfinished = set(store.run_progress(run_id).unfinished) if held and marked else set()
    plan = _Held(held, again, unfinished)
    marks = _StepMarks(StoredProgress(store, run_id, "verl import"), weights or {}, bool(held))
    summary = DumpRead()
    given = Path(path).is_file()
    files = dump_files(path, summary.skipped)
    for file in files:
        named = file_step(file)
        if named is not None and plan.left_alone(named):
            summary.already_stored.append(named)  # (not read: its lines are the step's, and the run holds it)
            continue
        read = DumpRead()
        _read_file(file, run_id, weights, read, follow=given)
        steps: dict[int, list[int]] = {}  # step -> its rollouts' indices in read.records, first seen first
        for at, record in enumerate(read.records):
            steps.setdefault(record["step"], []).append(at)
        written = False
        for step, indices in steps.items():
            rollouts = [(read.records[i], read.transcripts[i], read.output_indices[i]) for i in indices]
            if plan.left_alone(step):
                summary.already_stored.append(step)
                continue
            if _rewritten(store, run_id, file, step, rollouts, plan, summary):
                continue
            summary.failures += marks.before_step()
            # (a store that fails a write raises out of the import: the step stays unmarked, so unfinished)
            imported, whole = _import_step(store, run_id, step, rollouts, plan, summary)
            written = imported or written
            if not whole:  # a rollout not stored (named in skipped): the next import reads the step again
                marks.cut_short(step, len(rollouts))
            elif live and file == files[-1]:  # verl may still be writing it: whole once a later step's file exists
                summary.left_unfinished.append(step)
                marks.cut_short(step, len(rollouts))
            else:
                summary.failures += marks.whole(step, len(rollouts))
        if written or not steps:  # a step left as the run holds it had its lines named when it was imported
            summary.skipped += read.skipped
            summary.grouped_by_uid = summary.grouped_by_uid or read.grouped_by_uid
            summary.grouped_by_prompt = summary.grouped_by_prompt or read.grouped_by_prompt
            summary.components.update(read.components)
    summary.failures += marks.end()
    return summary


@dataclass
class _StepMarks:
    """The run's manifest and step marks, kept by :class:`~rewardpipe.integrations.progress.StoredProgress` as the
    trainer integrations keep theirs; the manifest is written with the first step touched (a dump none of whose
    lines could be read leaves the store without a run). Each method returns the failures to report."""

    progress: Any
    weights: Mapping[str, float]
    held: bool  # the run held steps when the import started (without a manifest: every step counted, left so)
    started: bool = False

    def before_step(self) -> list[str]:
        """Before a step's rollouts are written: the manifest in progress, so the step is not counted yet."""
        failed = []
        if not self.started:
            self.started = True
            failed.append(self.progress.start(reward="verl", weights=self.weights, stored_steps=self.held))
        failed.append(self.progress.before_step())
        return [line for line in failed if line]

    def whole(self, step: int, rollouts: int) -> list[str]:
        """Every rollout the dump holds of ``step`` is stored: marked finished."""
        failed = self.progress.step_stored(step, rollouts, True)
        return [failed] if failed else []

    def cut_short(self, step: int, rollouts: int) -> None:
        """``step`` may not be whole: left unfinished (and the run in progress), to be marked by a later import."""
        self.progress.step_stored(step, rollouts, False)

    def end(self) -> list[str]:
        """The import done: the run finished again when every step of it is marked (one cut short may not be)."""
        failed = self.progress.finish() if self.started else None
        return [failed] if failed else []


@dataclass
class _Held:
    """The steps a run holds when an import starts, and what the import does with them."""

    stored: set[int]
    again: bool  # write the held steps again (the same keys), not only the new ones
    #: held steps not marked finished (an import or a trainer stopped half-way through them): read again, completed
    unfinished: set[int] = field(default_factory=set)
    # The newest step the run holds is read again: verl writes a step file line by line through a buffer flushed
    # between lines, so a file imported mid-write most often ended in a newline (whole lines, not all of them) and,
    # held by the run, was never completed. Its rollouts not stored yet are added; none: it is already stored.
    newest: int | None = field(init=False)

    def __post_init__(self) -> None:
        self.newest = max(self.stored, default=None)

    def left_alone(self, step: int) -> bool:
        """A held step that is not read at all: an older one than the newest, unless written again."""
        return step in self.stored and step != self.newest and step not in self.unfinished and not self.again


def _rewritten(
    store: Any,
    run_id: str,
    file: Path,
    step: int,
    rollouts: list[tuple[dict[str, Any], dict[str, Any], int]],
    plan: _Held,
    summary: DumpRead,
) -> bool:
    """Whether the run holds a rollout of ``step`` the file no longer has: then named and left as the run holds it.
    The step is judged by what it holds here, whatever file the lines came from (a copy of a step file under another
    name would add its rollouts again under other ids)."""
    from rewardpipe.store import rollout_key, step_prefix

    held = set(store.list_keys(step_prefix(run_id, step))) if step in plan.stored else set()
    if held <= {rollout_key(run_id, step, r["group_id"], r["rollout_id"]) for r, _, _ in rollouts}:
        return False
    # Not grown but rewritten (verl resumed from an earlier checkpoint writes the step again, other uids): added to
    # what the run holds, the step would be two batches' rollouts judged as one.
    summary.already_stored.append(step)
    summary.skipped.append(
        f"{file}: no longer holds every rollout run '{run_id}' has of step {step} (rewritten by a resumed run?): "
        f"left as the run holds it; import into another --run-id to judge the new one"
    )
    return True


def _import_step(
    store: Any,
    run_id: str,
    step: int,
    rollouts: list[tuple[dict[str, Any], dict[str, Any], int]],
    plan: _Held,
    summary: DumpRead,
) -> tuple[bool, bool]:
    """Write one step's rollouts of a file (record, transcript, output index) that :func:`_rewritten` let through: a
    new step whole; a held one (the newest, an unfinished one, or any with ``again``) given the rollouts it lacks
    (all of them again with ``again``). Returns whether the step was imported (a rollout written or refused) and
    whether every rollout of it is accounted for: a record that does not validate is stored as its error record (one
    bad sample never costs its step, nor leaves a hole in a step marked whole); one with no id to store it under is
    not, and its step is not whole."""
    from rewardpipe.integrations.progress import storable_record
    from rewardpipe.store import record_key, step_prefix

    held = set(store.list_keys(step_prefix(run_id, step))) if step in plan.stored else set()
    before, refused, updated, whole = summary.count, len(summary.skipped), False, True
    for record, transcript, index in rollouts:
        valid, problem = storable_record(record)
        if problem is not None:
            what = "stored as an error record" if valid is not None else "not stored"
            summary.skipped.append(f"step {step} rollout {str(record.get('rollout_id'))[:80]!r}: {what}: {problem}")
        if valid is None:
            whole = False
            continue
        try:  # a rollout the store refuses (an id no key holds) loses itself only; its step is not whole
            stored = record_key(valid) in held
            # Written by an earlier import from the same line, unless the session has dumped a later output since
            # (an agent loop's: the file was caught between two of them): its rollout is that one now.
            if stored and not plan.again and index == 0:
                continue
            # The transcript first: a record the store holds is skipped by the next import, so one written before a
            # failure that lost its transcript would never get it. One that does not validate loses itself only.
            evidence = _transcript(transcript, valid, summary)
            if evidence is not None:
                store.put_transcript(evidence)
            store.put_record(valid)
        except ValueError as exc:
            whole = False
            summary.skipped.append(f"step {step} rollout {valid.rollout_id[:80]!r}: not stored: {exc}")
            continue
        if stored and not plan.again:
            updated = True
            continue
        summary.count += 1
        summary.steps.add(step)
    if held and summary.count == before and len(summary.skipped) == refused and not updated:
        summary.already_stored.append(step)
        return False, whole
    return True, whole


def _transcript(transcript: dict[str, Any], record: Any, summary: DumpRead) -> Any:
    """The rollout's transcript as its stored ``record`` says it (an error record in place of one that did not
    validate: its status and components), or None, named in ``summary.skipped``, when it does not validate."""
    from rewardpipe.transcripts import RolloutTranscript

    said = {name: getattr(record, name) for name in ("task_id", "status", "components", "aggregate")}
    try:
        return RolloutTranscript.model_validate({**transcript, **said})
    except ValueError as exc:
        summary.skipped.append(f"step {record.step} rollout {record.rollout_id[:80]!r}: transcript not stored: {exc}")
        return None
