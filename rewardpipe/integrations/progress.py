"""Which steps of a trainer's stored run are whole: the manifest and the step markers ``rewardpipe run`` writes.

``monitor`` and ``report`` judge a store's finished steps only (see "When is a step finished?" in
:mod:`rewardpipe.store`). A run with no manifest says nothing either way, so every stored step counted: a trainer
whose store stopped taking records half-way through a batch (a full disk, a throttled bucket) left a step of some
of its groups, or of part of a group, which ``monitor`` judged as the whole batch: figures and verdicts of groups
that were not the ones trained on, with nothing said. The TRL callback and the verifiers ``GroupWatch`` write a
manifest when they start storing a run and mark each step whose every rollout was stored, as a record or as an error
record (one that does not validate is stored as its error record: :func:`storable_record`), as ``rewardpipe run``
does. The manifest's ``finished_at`` is set after each step while every step of the run is whole, and cleared
before the next step's records are written: a training killed between steps (as most end) leaves a finished run,
every step counted as before; one killed, or refused by its store, half-way through a step leaves that step named
unfinished.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rewardpipe.models import Record

logger = logging.getLogger("rewardpipe.progress")


#: What a store needs for its steps to be marked (a store of your own may take records only).
_PROGRESS_METHODS = ("put_json", "get_json", "mark_step_finished", "run_progress")


#: The error kind of a rollout whose record did not validate (a metric that is no metric value, an id with a lone
#: surrogate): stored as an error record in its place, so its step is still whole.
INVALID_RECORD = "invalid_record"
#: The ids an error record in place of an invalid one keeps (each made UTF-8); without them it has no store key.
_RECORD_IDS = ("run_id", "group_id", "rollout_id", "task_id")


def storable_record(raw: Mapping[str, Any]) -> tuple[Record | None, str | None]:
    """``raw`` as the record a store takes, and what was wrong with it (None when it validated). A record that does
    not validate is one bad sample: an error record in its place (``invalid_record``, the ids kept, every component
    None, the weights that are numbers, no metrics), so its step is whole: every rollout accounted for, as a record
    or an error record, not every record valid. None when not even that validates (an id missing or empty: no key
    to store it under)."""
    from pydantic import ValidationError

    from rewardpipe.models import Record, field_error
    from rewardpipe.safe_text import encodable

    try:
        return Record.model_validate(raw), None
    except ValidationError as exc:
        more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        problem = f"{field_error(exc.errors()[0])}{more}"
    except ValueError as exc:  # (a validator's own error)
        problem = str(exc)
    problem = encodable(problem)[:2000]
    components = raw.get("components")
    weights = raw.get("weights")
    error_record = {
        **{name: encodable(raw[name]) for name in _RECORD_IDS if isinstance(raw.get(name), str)},
        "step": raw.get("step"),
        "status": "error",
        "error": {"kind": INVALID_RECORD, "message": f"the rollout's record did not validate: {problem}"},
        "components": {
            encodable(name): None
            for name in (components if isinstance(components, Mapping) else {})
            if isinstance(name, str)
        },
        "weights": {
            encodable(name): float(weight)
            for name, weight in (weights.items() if isinstance(weights, Mapping) else ())
            if isinstance(name, str) and isinstance(weight, (int, float)) and not isinstance(weight, bool)
        },
        "aggregate": None,
        "metrics": {},
    }
    try:
        return Record.model_validate(error_record), problem
    except ValueError:
        return None, problem


@dataclass
class StorableBatch:
    """A trainer's batch of records (dicts in the ``Record`` shape, as an integration builds them), each validated
    once (:func:`storable_record`) for its judgement and its store alike: validating it again in the monitor and
    again before the store took it cost three validations per record per batch."""

    #: the records as built, each one that does not validate replaced by its error record's dict (what is built from
    #: a record, its transcript, is built from it)
    raw: list[dict[str, Any]]
    #: what the store takes of each: its ``Record``, an invalid one's error record; None when not even that validates
    #: (no id to store it under: the writer names it lost, its step not whole)
    records: list[Record | None]
    #: what was wrong with each (None: it validated)
    problems: list[str | None]

    @classmethod
    def of(cls, raw: Sequence[dict[str, Any]]) -> StorableBatch:
        built = list(raw)
        records: list[Record | None] = []
        problems: list[str | None] = []
        for index, item in enumerate(built):
            record, problem = storable_record(item)
            if record is not None and problem is not None:  # (a dict as before: a transcript is built from it)
                built[index] = record.model_dump(exclude={"schema_"})
            records.append(record)
            problems.append(problem)
        return cls(built, records, problems)

    @property
    def replaced(self) -> list[str]:
        """One line per record replaced by its error record (what was wrong with it), for the caller's ``failures``."""
        return [
            f"record {record.rollout_id} is an error record: {problem}"
            for record, problem in zip(self.records, self.problems, strict=True)
            if record is not None and problem is not None
        ]

    def judged(self) -> list[Record | dict[str, Any]]:
        """The batch as :func:`rewardpipe.monitoring.monitor_records` takes it: each validated ``Record`` (not
        validated again there); a record with no error record as it was built (listed unreadable there, as before)."""
        return [raw if record is None else record for raw, record in zip(self.raw, self.records, strict=True)]


def invalid_as_error_records(records: list[dict[str, Any]]) -> list[str]:
    """Each of ``records`` (dicts in the ``Record`` shape, as a trainer integration builds them) that does not
    validate replaced in place by its error record (:func:`storable_record`), before the step is judged and stored:
    the bad sample is counted as an error by the judgement and by ``monitor`` on the store alike, and its step stays
    whole. Returns one line per record replaced (what was wrong with it), for the caller's ``failures``. A record
    with no id to store it under is left as it is (the writer names it lost, its step not whole). The trainers use
    :class:`StorableBatch`, which keeps each validated ``Record`` for the judgement and the store."""
    batch = StorableBatch.of(records)
    records[:] = batch.raw
    return batch.replaced


class StoredProgress:
    """The manifest and step markers of one trainer run in ``store``. Each method returns what failed (a line for
    the caller's ``failures``) or None; none of them raises: monitoring never stops a training run."""

    def __init__(self, store: Any, run_id: str, command: str) -> None:
        self.store = store
        self.run_id = run_id
        self.command = command
        self.manifest: dict[str, Any] | None = None  # the manifest this writer keeps up to date; None: none kept
        self.incomplete = False  # a step of this writer's was not stored whole: the run is never marked finished
        self.finished = False  # the manifest says finished: a step written after it reopens the run first
        # a write of ``finished_at`` reported failed, which the store may have made all the same (S3's client gives
        # up on a put whose answer timed out): the next step reopens the run as after one that was made
        self.maybe_finished = False
        self.earlier_checked = False  # the run's steps before this writer's were read, and are all finished

    def start(
        self,
        *,
        reward: Any,
        weights: Mapping[str, float] | None = None,
        components: Mapping[str, Any] | None = None,
        configuration: Mapping[str, Any] | None = None,
        stored_steps: bool = False,
        reward_reference: str | None = None,
    ) -> str | None:
        """Write the run's manifest, in progress (``finished_at`` null): a new run's, or a resumed run's again (its
        new steps are then finished only once marked). A run stored without a manifest before (``stored_steps`` and
        none found: every step of it counted) is left as it is. A new run's manifest is built as ``rewardpipe run``
        builds its own (:func:`rewardpipe.models.new_manifest`): ``reward`` is the ``Reward`` trained on, or the name
        of one rewardpipe does not hold, with its ``weights`` (and ``components``, when they are known)."""
        from rewardpipe.models import RunManifest, new_manifest
        from rewardpipe.store import manifest_key

        if not all(callable(getattr(self.store, name, None)) for name in _PROGRESS_METHODS):
            return None  # a store of your own that takes records only: its steps say nothing, as before
        try:
            stored = self.store.get_json(manifest_key(self.run_id), default=None)
            if stored is None and stored_steps:
                return None
            if isinstance(stored, Mapping):
                manifest = RunManifest.model_validate(stored)
                manifest.finished_at = None
            else:
                manifest = new_manifest(
                    run_id=self.run_id,
                    command=self.command,
                    configuration=configuration or {},
                    reward=reward,
                    weights=weights,
                    components=components,
                    reward_reference=reward_reference,
                )
            self.store.put_json(manifest_key(self.run_id), manifest.to_dict())
        except Exception as exc:  # noqa: BLE001 - reported by the caller; the run is stored as before, unmarked
            return f"run manifest: {type(exc).__name__}: {exc}"
        self.manifest = manifest.to_dict()
        return None

    def before_step(self) -> str | None:
        """Before a step's records are written: a run marked finished (training called again on the same callback, a
        watch given groups after its flush) is in progress again, or a step cut short now would be counted whole."""
        from rewardpipe.store import manifest_key

        if self.manifest is None or not (self.finished or self.maybe_finished):
            return None
        try:
            self.store.put_json(manifest_key(self.run_id), self.manifest)
        except Exception as exc:  # noqa: BLE001 - the run keeps its end: this writer marks nothing more
            self.manifest = None
            return f"run manifest (reopened): {type(exc).__name__}: {exc}"
        self.finished = self.maybe_finished = False
        return None

    def step_stored(self, step: int, records: int, whole: bool) -> str | None:
        """Mark ``step`` finished when its ``records`` were all stored (``whole``); a step that was not is left
        unmarked, so ``monitor`` names it unfinished rather than judging part of it."""
        if self.manifest is None:
            return None
        if not whole:
            self.incomplete = True
            return None
        try:
            self.store.mark_step_finished(self.run_id, step, stored=records)
        except Exception as exc:  # noqa: BLE001 - the step stays unfinished: not judged, never judged in part
            self.incomplete = True
            return f"step {step} finished marker: {type(exc).__name__}: {exc}"
        # Finished after every whole step (and reopened before the next one's records): a training killed between
        # steps, as most end, leaves a run whose every step is counted (``report`` writes its triage), as before.
        return self.finish()

    def finish(self) -> str | None:
        """The manifest's ``finished_at`` (every step of the run is then counted) when every step of the run was
        stored whole; an incomplete run keeps its unfinished steps named."""
        from rewardpipe.models import utc_now
        from rewardpipe.store import manifest_key

        if self.manifest is None or self.incomplete or self.finished:
            return None
        try:
            # a step an earlier writer of the run (before a resume) left cut short stays unfinished: it would be
            # counted whole once the manifest says finished (read once: this writer's own steps are known)
            if not self.earlier_checked:
                if self.store.run_progress(self.run_id).unfinished:
                    self.incomplete = True
                    return None
                self.earlier_checked = True
            self.maybe_finished = True
            self.store.put_json(manifest_key(self.run_id), {**self.manifest, "finished_at": utc_now()})
        except Exception as exc:  # noqa: BLE001 - the run stays in progress: its marked steps are still judged
            return f"run manifest (end): {type(exc).__name__}: {exc}"
        self.finished = True
        return None
