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
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rewardpipe.models import MAX_ID_LENGTH, MAX_STEP, id_problem

#: The keys verl writes itself (and a line's rollout-id column): never a component.
VERL_DUMP_KEYS = frozenset({"input", "output", "gts", "score", "step", "uid", "request_id", "reward"})
#: rewardpipe's per-sample flag (:func:`rewardpipe.integrations.verl.compute_score`).
ERROR_FLAG = "reward_error"
#: verl's dump file of one step: ``<global_steps>.jsonl``.
STEP_FILE = re.compile(r"([0-9]+)\.jsonl")  # ASCII digits (\d is every script's)
#: verl 0.9.1's v1 key of a rollout: ``{uid}_{session_id}_{index}``.
_V1_KEY = re.compile(r"(.+)_(\d+)_(\d+)")


@dataclass
class DumpRead:
    """What :func:`read_rollout_dump` made of a dump: the records and transcripts (plain dicts in
    :class:`rewardpipe.models.Record` / ``RolloutTranscript`` shape), the lines it skipped (``file:line: why``),
    whether any line carried a group id (``uid``) rather than being grouped by its prompt, and the components."""

    records: list[dict[str, Any]] = field(default_factory=list)
    transcripts: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    grouped_by_uid: bool = False
    components: dict[str, None] = field(default_factory=dict)  # the numeric keys read, first seen first
    #: :func:`import_rollout_dump`: rollouts written, their steps, and the steps left as the store held them
    count: int = 0
    steps: set[int] = field(default_factory=set)
    already_stored: list[int] = field(default_factory=list)


def dump_files(path: str | Path) -> list[Path]:
    """The dump's step files in step order: ``path`` itself when it is a file, else its ``<step>.jsonl`` files.
    A path that does not exist, or a directory with no such file, is a ValueError naming it."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise ValueError(f"verl rollout dump not found: {path} (give trainer.rollout_data_dir or one <step>.jsonl)")
    files = [p for p in path.iterdir() if p.is_file() and STEP_FILE.fullmatch(p.name)]
    if not files:
        raise ValueError(f"{path} holds no <step>.jsonl file: is it verl's trainer.rollout_data_dir?")
    return sorted(files, key=lambda p: int(STEP_FILE.fullmatch(p.name).group(1)))  # type: ignore[union-attr]


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
    of the prompt text (every rollout of one prompt was decoded from the same prompt tokens)."""
    uid = line.get("uid")
    if isinstance(uid, str) and uid:
        match = _V1_KEY.fullmatch(uid)
        if match:
            return match.group(1), f"{match.group(1)}_{match.group(2)}", int(match.group(3)), True
        return uid, fallback, 0, True
    text = line["input"]  # a line with neither is refused before (its group cannot be told)
    return "p" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16], fallback, 0, False


def _ids_problem(line: Mapping[str, Any], group_id: str, rollout_id: str) -> str | None:
    """Why the ids made of a line cannot be ids (what every other input refuses, :data:`rewardpipe.models.InputId`:
    a terminal escape, a bidi override or a lone surrogate would be printed escaped, so `show` could never be given
    the id, and two ids could print alike), or None."""
    for made in (group_id, rollout_id):
        problem = id_problem(made) or (
            f"is {len(made)} characters long, at most {MAX_ID_LENGTH}" if len(made) > MAX_ID_LENGTH else None
        )
        if problem is not None:
            return f"uid {str(line.get('uid'))[:60]!a} {problem}"
    return None


def _fallback_rollout(file: Path, lineno: int) -> str:
    """A rollout id for a line without a uid: the step file's name and the line, or a digest of a name that is no id
    (a single file given by its path can be named anything)."""
    stem = file.stem
    if id_problem(stem) is not None or len(stem) > 200:
        stem = "f" + hashlib.sha256(file.name.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return f"{stem}-l{lineno}"


def _has_text(line: Mapping[str, Any], key: str) -> bool:
    value = line.get(key)
    return isinstance(value, str) and value != ""


def _being_written(file: Path) -> bool:
    """Whether verl's dump thread is still writing ``file`` (it writes line by line, each ending in a newline)."""
    with file.open("rb") as fh:
        if fh.seek(0, 2) == 0:
            return False
        fh.seek(-1, 2)
        return fh.read(1) != b"\n"


def _lines(file: Path) -> Iterator[tuple[int, Any, str | None]]:
    """``(line number, parsed JSON or None, why it is unreadable or None)`` for each non-empty line."""
    with file.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                yield lineno, json.loads(raw), None
            except (ValueError, RecursionError) as exc:  # not UTF-8 or not JSON (a line cut by a crash)
                yield lineno, None, f"not a JSON line ({type(exc).__name__})"


def read_rollout_dump(path: str | Path, run_id: str = "verl", weights: Mapping[str, float] | None = None) -> DumpRead:
    """Records and transcripts of verl's rollout dump at ``path`` (``trainer.rollout_data_dir`` or one of its
    files). ``weights``: the reward's component weights (default 1.0 each; verl's dump does not carry them), which
    the advantage shares read. Steps come from each line's ``step`` (else the file's name)."""
    out = DumpRead()
    for file in dump_files(path):
        _read_file(file, run_id, weights, out)
    return out


def _read_file(file: Path, run_id: str, weights: Mapping[str, float] | None, out: DumpRead) -> None:
    """One step file's records and transcripts, appended to ``out`` (its components: the file's numeric keys)."""
    if _being_written(file):
        out.skipped.append(
            f"{file}: its last line has no newline, so verl is still writing it: not imported (a step judged on "
            f"part of its rollouts is not judged again); import again once it is written"
        )
        return
    name_step = STEP_FILE.fullmatch(file.name)
    components: dict[str, None] = {}  # every numeric key of the file, in first-seen order
    parsed: list[tuple[int, tuple[str, str, int, bool], dict[str, Any]]] = []
    for lineno, line, problem in _lines(file):
        if problem is None and not isinstance(line, dict):
            problem = f"a JSON {type(line).__name__}, not an object"
        elif problem is None and _number(line.get("score")) is None:
            problem = "no finite numeric score (the reward verl trained on)"
        elif problem is None and not _has_text(line, "uid") and not _has_text(line, "input"):
            # grouped by nothing, every such rollout of a step would be one group: a dead component looked alive
            problem = "neither a uid nor an input (the prompt's text): its group cannot be told"
        step = line.get("step") if isinstance(line, dict) else None
        if problem is None and not (isinstance(step, int) and not isinstance(step, bool) and step >= 0):
            if name_step is None:
                problem = "no step (a non-negative whole number) and the file is not named <step>.jsonl"
            else:
                step = int(name_step.group(1))
        if (
            problem is None and isinstance(step, int) and step > MAX_STEP
        ):  # (the store refused it with pydantic's lines, one per rollout)
            problem = f"step {step} is past the largest a store holds ({MAX_STEP})"
        identity = None if problem is not None else _identity(line, _fallback_rollout(file, lineno))
        if identity is not None:
            problem = _ids_problem(line, identity[0], identity[1])
        if problem is not None:
            out.skipped.append(f"{file}:{lineno}: {problem}")
            continue
        assert isinstance(line, dict) and isinstance(step, int) and identity is not None
        for key, value in line.items():
            if key not in VERL_DUMP_KEYS and key != ERROR_FLAG and _component(value) is not None:
                components.setdefault(key)
        parsed.append((step, identity, line))
    weight_of = {name: float((weights or {}).get(name, 1.0)) for name in components}
    # One line per rollout: a session's last output (the highest index) stands for it, as verl's trainer keeps it.
    latest: dict[tuple[int, str, str], tuple[int, dict[str, Any]]] = {}
    for step, (group_id, rollout_id, index, by_uid), line in parsed:
        out.grouped_by_uid = out.grouped_by_uid or by_uid
        key = (step, group_id, rollout_id)
        if key not in latest or index >= latest[key][0]:
            latest[key] = (index, line)
    out.components.update(dict.fromkeys(components))
    for (step, group_id, rollout_id), (_, line) in latest.items():
        values = {name: _component(line.get(name)) for name in components}
        flagged = _number(line.get(ERROR_FLAG)) not in (None, 0.0)
        ids = {"run_id": run_id, "step": step, "group_id": group_id, "rollout_id": rollout_id, "task_id": group_id}
        record = {
            **ids,
            "status": "error" if flagged else "scored",
            "error": (
                {"kind": "reward_error", "message": f"rewardpipe could not score it (verl trained on {line['score']})"}
                if flagged
                else None
            ),
            "components": dict.fromkeys(components) if flagged else values,
            "weights": weight_of,
            "aggregate": None if flagged else float(line["score"]),
            "metrics": {},
        }
        out.records.append(record)
        out.transcripts.append(
            {
                **ids,
                "verdict": {"status": "not_executed", "reason": "verl's rollout: no code run by rewardpipe"},
                "status": record["status"],
                "components": record["components"],
                "aggregate": record["aggregate"],
                "messages": [
                    {"role": "user", "content": _text(line.get("input"))},
                    {"role": "assistant", "content": _text(line.get("output"))},
                ],
            }
        )


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else json.dumps(value, default=str)


def import_rollout_dump(
    path: str | Path,
    store: Any,
    run_id: str = "verl",
    weights: Mapping[str, float] | None = None,
    *,
    again: bool = False,
) -> DumpRead:
    """Write the dump's records and transcripts into ``store`` (a :class:`rewardpipe.store.Store`) under ``run_id``,
    one step file at a time (a long run's dump is never held whole). A step the store already holds for the run is
    left as it is (``already_stored``), so importing a growing dump again adds its new steps; ``again`` writes
    every step again (the same keys). Returns what was read, without the records (``count``, ``steps``)."""
    from rewardpipe.models import Record
    from rewardpipe.store import record_key, rollout_key, run_id_problem, step_prefix
    from rewardpipe.transcripts import RolloutTranscript

    problem = run_id_problem(run_id)
    if problem is not None:  # every rollout would be refused, one message each
        raise ValueError(problem)
    stored = set() if again or run_id not in store.list_runs() else set(store.list_steps(run_id))
    # The newest step the run holds is read again: verl writes a step file line by line through a buffer flushed
    # between lines, so a file imported mid-write most often ended in a newline (whole lines, not all of them) and,
    # held by the run, was never completed. Its rollouts not stored yet are added; none: it is already stored.
    newest = max(stored, default=None)
    summary = DumpRead()
    for file in dump_files(path):
        name_step = STEP_FILE.fullmatch(file.name)
        file_step = -1 if name_step is None else int(name_step.group(1))  # (-1: a file named otherwise, never held)
        if file_step in stored and file_step != newest:
            summary.already_stored.append(file_step)
            continue
        held = set(store.list_keys(step_prefix(run_id, file_step))) if file_step in stored else set()
        read = DumpRead()
        _read_file(file, run_id, weights, read)
        if held and not held <= {rollout_key(run_id, r["step"], r["group_id"], r["rollout_id"]) for r in read.records}:
            # Not grown but rewritten (verl resumed from an earlier checkpoint writes the step again, other uids):
            # added to what the run holds, the step would be two batches' rollouts judged as one.
            summary.already_stored.append(file_step)
            summary.skipped.append(
                f"{file}: no longer holds every rollout run '{run_id}' has of step {file_step} (rewritten by a "
                f"resumed run?): left as the run holds it; import into another --run-id to judge the new one"
            )
            continue
        before = summary.count
        skipped: list[str] = []
        for record, transcript in zip(read.records, read.transcripts, strict=True):
            try:  # a rollout the store refuses loses itself only
                valid = Record.model_validate(record)
                if record_key(valid) in held:
                    continue  # written by an earlier import, from the same line
                store.put_record(valid)
                store.put_transcript(RolloutTranscript.model_validate(transcript))
            except ValueError as exc:
                skipped.append(f"step {record['step']} rollout {record['rollout_id'][:80]!r}: {exc}")
                continue
            summary.count += 1
            summary.steps.add(record["step"])
        if held and summary.count == before and not skipped:
            summary.already_stored.append(file_step)
            continue  # (its unreadable lines were named when it was imported)
        summary.skipped += read.skipped + skipped
        summary.grouped_by_uid = summary.grouped_by_uid or read.grouped_by_uid
        summary.components.update(read.components)
    return summary
