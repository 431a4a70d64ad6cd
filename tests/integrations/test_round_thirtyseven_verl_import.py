"""Round thirty-seven: ``rewardpipe verl import`` with every field of a dump line treated as hostile.

verl writes a dump line from the trainer's data, the model's text and the reward's extra info (which replaces any
column of verl's own it shares a name with, ``step`` included): the step a line claims, its uid, its keys and its
length are the model's or the reward's, and the dump directory is whatever is on disk. One hostile line costs that
line only, named; no line is ever filed in a step other than its file's, and nothing outside the dump is read.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

import pytest

from rewardpipe.integrations import verl_dump
from rewardpipe.integrations.verl_dump import import_rollout_dump, read_rollout_dump
from rewardpipe.models import TRAINER_TRANSCRIPT_MESSAGE_CHARS
from rewardpipe.monitoring import monitor_records
from rewardpipe.store import LocalStore, transcript_key


def _line(uid: str | None, step: object = 1, **extra: object) -> str:
    line: dict[str, object] = {"input": "Q", "output": "A", "score": 1.0, "step": step, **extra}
    if uid is not None:
        line["uid"] = uid
    return json.dumps(line)


def _step(step: int, tag: str = "g", score: float | None = None, **extra: object) -> list[str]:
    """A v1 step: 3 groups of 4 rollouts, the score alternating inside each group (or ``score`` everywhere)."""
    return [
        _line(f"{tag}{g}_{k}_0", step=step, score=float(k % 2) if score is None else score, **extra)
        for g in range(3)
        for k in range(4)
    ]


def _dump(tmp_path: Path, lines: list[str], name: str = "1.jsonl", folder: str = "dump") -> Path:
    where = tmp_path / folder
    where.mkdir(exist_ok=True)
    (where / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return where


def _aggregates(store: LocalStore, step: int) -> dict[str, float | None]:
    return {r.rollout_id: r.aggregate for r in store.iter_records("run") if r.step == step}


# -- (a) a line's step is its file's --------------------------------------------------------------------------


def test_a_line_claiming_another_step_never_overwrites_that_steps_records(tmp_path):
    """2.jsonl's lines said step 1 with step 1's uids: imported in the same run, they replaced step 1's records
    (every score 7.0). A step file's lines are its step's (verl writes each step into its own file): a line
    claiming another is named and left out."""
    folder = _dump(tmp_path, _step(1))
    lines = _step(1, score=7.0)
    lines[0] = _line("h_0_0", step=2, score=0.5)
    _dump(tmp_path, lines, name="2.jsonl")
    store = LocalStore(tmp_path / "store")
    read = import_rollout_dump(folder, store, "run")
    assert read.steps == {1, 2} and read.count == 13
    assert set(_aggregates(store, 1).values()) == {0.0, 1.0}  # step 1 as its own file says
    assert _aggregates(store, 2) == {"h_0": 0.5}
    assert len(read.skipped) == 11 and all(
        "2.jsonl:" in s and "step 1 in the file of step 2" in s for s in read.skipped
    )


def test_a_later_import_of_a_file_claiming_a_held_step_leaves_that_step_alone(tmp_path):
    folder = _dump(tmp_path, _step(1))
    _dump(tmp_path, _step(2), name="2.jsonl")
    store = LocalStore(tmp_path / "store")
    import_rollout_dump(folder, store, "run")
    _dump(tmp_path, _step(1, score=7.0), name="3.jsonl")
    again = import_rollout_dump(folder, store, "run")
    assert again.count == 0 and len(again.skipped) == 12
    assert set(_aggregates(store, 1).values()) == {0.0, 1.0} and not _aggregates(store, 3)


def test_a_single_file_of_a_step_the_run_holds_is_not_mixed_into_it(tmp_path):
    """A file given by its path is named anything, so its lines' steps are read: a step the run already holds is
    left as it is (a copy of a step file under another name double-counted every rollout of that step)."""
    folder = _dump(tmp_path, [_line(None, step=1, score=float(k % 2)) for k in range(4)])
    _dump(tmp_path, [_line(None, step=2)], name="2.jsonl")
    store = LocalStore(tmp_path / "store")
    import_rollout_dump(folder, store, "run")
    copy = tmp_path / "copy-of-step-1.jsonl"
    copy.write_text((folder / "1.jsonl").read_text())
    again = import_rollout_dump(copy, store, "run")
    assert again.count == 0 and again.already_stored == [1]
    assert len(_aggregates(store, 1)) == 4
    assert monitor_records(store.iter_records("run")).step(1).scored == 4


# -- (b) nothing outside the dump is read ----------------------------------------------------------------------


def test_a_linked_step_file_is_named_and_not_followed(tmp_path):
    outside = _dump(tmp_path, _step(2, tag="secret"), name="elsewhere.jsonl", folder="outside")
    folder = _dump(tmp_path, _step(1))
    (folder / "2.jsonl").symlink_to(outside / "elsewhere.jsonl")
    (folder / "3.jsonl").symlink_to(folder / "1.jsonl")  # a link inside the dump is a link too
    store = LocalStore(tmp_path / "store")
    read = import_rollout_dump(folder, store, "run")
    assert read.steps == {1} and not any(r.group_id.startswith("secret") for r in store.iter_records("run"))
    assert sum("symbolic link" in s for s in read.skipped) == 2


def test_a_step_file_swapped_for_a_link_after_the_listing_is_not_followed(tmp_path, monkeypatch):
    outside = _dump(tmp_path, _step(1, tag="secret"), name="elsewhere.jsonl", folder="outside")
    folder = tmp_path / "dump"
    folder.mkdir()
    (folder / "1.jsonl").symlink_to(outside / "elsewhere.jsonl")
    monkeypatch.setattr(verl_dump, "dump_files", lambda path, *args, **kwargs: [folder / "1.jsonl"])
    read = read_rollout_dump(folder)
    assert not read.records and len(read.skipped) == 1 and "1.jsonl" in read.skipped[0]


def test_only_a_dumps_own_name_of_a_step_is_read_beside_it(tmp_path):
    """ "01.jsonl" beside verl's "1.jsonl" named the same step: both were imported into it, one after the other."""
    folder = _dump(tmp_path, _step(1))
    _dump(tmp_path, _step(1, tag="other"), name="01.jsonl")
    read = read_rollout_dump(folder)
    assert {r["group_id"] for r in read.records} == {"g0", "g1", "g2"}
    assert len(read.skipped) == 1 and "01.jsonl" in read.skipped[0]


def test_a_dump_path_that_is_a_pipe_is_named_as_one(tmp_path):
    """A FIFO given as the dump was "not found", though it is there."""
    fifo = tmp_path / "dump.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file or a directory"):
        read_rollout_dump(fifo)


# -- (c) a line's length is bounded ----------------------------------------------------------------------------


def test_a_line_past_the_bound_is_named_and_skipped_and_the_rest_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(verl_dump, "MAX_DUMP_LINE_BYTES", 4096, raising=False)
    lines = _step(1)
    lines[1] = _line("g0_1_0", output="x" * 50_000)
    read = read_rollout_dump(_dump(tmp_path, lines))
    assert len(read.records) == 11 and len(read.skipped) == 1
    assert ":2:" in read.skipped[0] and "4,096 bytes" in read.skipped[0]


def test_a_transcript_keeps_a_bounded_text_but_groups_by_the_whole_prompt(tmp_path):
    """The model's response and verl's prompt were stored whole in every transcript. They are cut as the other
    trainer integrations cut theirs; the group is still the whole prompt's (two prompts alike in their first
    4,000 characters are two groups)."""
    long = "p" * 10_000
    lines = [
        _line(None, input=long + str(g), output="o" * 50_000, score=float(k % 2)) for g in range(2) for k in range(2)
    ]
    store = LocalStore(tmp_path / "store")
    import_rollout_dump(_dump(tmp_path, lines), store, "run")
    records = list(store.iter_records("run"))
    assert len({r.group_id for r in records}) == 2
    transcript = store.get_transcript(transcript_key("run", 1, records[0].group_id, records[0].rollout_id))
    assert all(len(m.content) <= TRAINER_TRANSCRIPT_MESSAGE_CHARS for m in transcript.messages)
    assert transcript.messages[1].content.endswith("[cut: 50,000 characters]")


# -- hostile fields --------------------------------------------------------------------------------------------


def test_a_uid_whose_index_no_integer_holds_costs_its_line_only(tmp_path):
    """``{uid}_{session}_{index}`` with an index of 5,000 digits: int() refused it and the whole import ended."""
    read = read_rollout_dump(_dump(tmp_path, [_line("g_0_0"), _line("g_0_" + "9" * 5000)]))
    assert len(read.records) == 1 and len(read.skipped) == 1 and ":2: uid " in read.skipped[0]


@pytest.mark.parametrize(
    "key",
    ["", "aggregate", "errors", "\x1b[2Jred", "x" * 5000, "has space"],
    ids=["empty", "aggregate", "errors", "escape", "long", "space"],
)
def test_a_numeric_key_that_is_no_component_name_is_named_not_judged(tmp_path, key):
    """A reward's component name is a record key and a metric name (``components.check_name``); a dump's numeric key
    was taken as one whatever it held: empty, the monitor's own ``aggregate``, a terminal escape, 5,000 characters."""
    lines = [_line(f"g_{k}_0", acc=float(k % 2), **{key: 1.0}) for k in range(3)]
    read = read_rollout_dump(_dump(tmp_path, lines))
    assert list(read.components) == ["acc"] and len(read.records) == 3
    assert len(read.skipped) == 1 and "no component name" in read.skipped[0] and "\x1b" not in read.skipped[0]
    assert len(read.skipped[0]) < 400


def test_the_components_of_a_step_are_bounded(tmp_path):
    """A line of 20,000 numeric keys gave every record of its step 20,000 components."""
    lines = [_line("g_0_0", acc=1.0, **{f"k{i}": 1.0 for i in range(20_000)}), _line("g_1_0", acc=0.0)]
    read = read_rollout_dump(_dump(tmp_path, lines))
    assert len(read.components) == verl_dump.MAX_DUMP_COMPONENTS and "acc" in read.components
    assert all(len(r["components"]) == verl_dump.MAX_DUMP_COMPONENTS for r in read.records)
    assert len(read.skipped) == 1 and "20,001" in read.skipped[0]


def test_a_flag_written_as_true_makes_an_error_record(tmp_path):
    read = read_rollout_dump(_dump(tmp_path, [_line("g_0_0"), _line("g_1_0", score=0.0, reward_error=True)]))
    assert [r["status"] for r in read.records] == ["scored", "error"]


@pytest.mark.parametrize("score", [float("nan"), None, "n/a"])
def test_a_flagged_row_without_a_finite_score_is_an_error_record_not_dropped(tmp_path, score):
    """A row ``reward_error`` flags is an error record whatever verl trained on; without a finite score it was
    skipped, so the step's error rate never counted it."""
    read = read_rollout_dump(_dump(tmp_path, [_line("g_0_0"), _line("g_1_0", score=score, reward_error=1.0)]))
    assert [r["status"] for r in read.records] == ["scored", "error"] and not read.skipped
    assert monitor_records(read.records).step(1).errors == 1


@pytest.mark.parametrize("score", [1e300, -1e101])
def test_a_score_past_any_reward_is_named_and_skipped(tmp_path, score):
    read = read_rollout_dump(_dump(tmp_path, [_line("g_0_0"), _line("g_1_0", score=score)]))
    assert len(read.records) == 1 and len(read.skipped) == 1 and ":2:" in read.skipped[0]


def test_a_repeated_uid_in_a_step_is_named_and_the_first_kept(tmp_path):
    """verl writes each ``{uid}_{session}_{index}`` once a step; a second line with the same key replaced the first
    unsaid."""
    read = read_rollout_dump(_dump(tmp_path, [_line("g_0_0", score=0.0), _line("g_0_0", score=1.0)]))
    assert [r["aggregate"] for r in read.records] == [0.0]
    assert len(read.skipped) == 1 and ":2:" in read.skipped[0] and "line 1" in read.skipped[0]


def test_a_step_mixing_uid_lines_and_prompt_lines_never_joins_them_in_one_group(tmp_path):
    """A line without a uid is grouped by a digest of its prompt: a uid spelled as that digest put another prompt's
    rollouts in the group. One trainer writes one shape: in a step with uids, a line without one is named."""
    digest = "p" + hashlib.sha256(b"Q").hexdigest()[:16]
    lines = [_line(None, score=0.0), _line(None, score=1.0), _line(f"{digest}_0_0", input="other", score=0.5)]
    read = read_rollout_dump(_dump(tmp_path, lines))
    assert [r["rollout_id"] for r in read.records] == [f"{digest}_0"]
    assert len(read.skipped) == 2 and all("no uid" in s for s in read.skipped)


def test_a_dump_of_both_trainers_steps_says_it_grouped_by_both(tmp_path):
    """A run restarted under the other trainer dumps legacy steps (no uid) and v1 steps (uids): each step is grouped
    its own way, and the import said "grouped by verl uid" for all of them."""
    from typer.testing import CliRunner

    from rewardpipe.cli import app

    folder = _dump(tmp_path, [_line(None, input=f"Q{g}", score=float(k % 2)) for g in range(3) for k in range(4)])
    _dump(tmp_path, _step(2), name="2.jsonl")
    out = CliRunner().invoke(app, ["verl", "import", str(folder), "--out", str(tmp_path / "store")])
    assert out.exit_code == 0, out.output
    assert "grouped by verl uid (steps written with one) and prompt text (steps without)" in out.output.replace(
        "\n", ""
    )
    records = list(LocalStore(tmp_path / "store").iter_records("verl"))
    assert {r.group_id for r in records if r.step == 2} == {"g0", "g1", "g2"}
    assert len({r.group_id for r in records if r.step == 1}) == 3


def test_a_step_file_rewritten_while_it_is_read_is_not_imported(tmp_path, monkeypatch):
    """verl rewrites a step file in place (a resumed run opens it with "w"): read across the rewrite, the step held
    the old batch's first lines and the new batch's last ones. Such a file is named and left for the next import."""
    folder = _dump(tmp_path, _step(1, tag="old"))
    path = folder / "1.jsonl"
    original = verl_dump._lines

    def rewritten_midway(*args, **kwargs):
        for number, item in enumerate(original(*args, **kwargs)):
            if number == 2:
                path.write_text("".join(line + "\n" for line in _step(1, tag="new") + _step(1, tag="more")))
            yield item

    monkeypatch.setattr(verl_dump, "_lines", rewritten_midway)
    store = LocalStore(tmp_path / "store")
    read = import_rollout_dump(folder, store, "run")
    assert read.count == 0 and len(read.skipped) == 1 and "changed while" in read.skipped[0]
    monkeypatch.setattr(verl_dump, "_lines", original)
    assert import_rollout_dump(folder, store, "run").count == 24  # the next import reads it whole


# -- re-import and concurrent imports --------------------------------------------------------------------------


def test_importing_the_same_dump_again_never_double_counts(tmp_path):
    folder = _dump(tmp_path, [_line(None, score=float(k % 2), input=f"Q{g}") for g in range(3) for k in range(4)])
    _dump(tmp_path, _step(2), name="2.jsonl")
    store = LocalStore(tmp_path / "store")
    import_rollout_dump(folder, store, "run")
    first = monitor_records(store.iter_records("run"))
    import_rollout_dump(folder, store, "run")
    import_rollout_dump(folder, store, "run", again=True)
    import_rollout_dump(folder / "1.jsonl", store, "run")  # the step file by its own path: the same rollout ids
    again = monitor_records(store.iter_records("run"))
    assert [(s.step, s.scored) for s in again.steps] == [(s.step, s.scored) for s in first.steps] == [(1, 12), (2, 12)]


def test_again_never_mixes_a_rewritten_step_into_the_one_the_run_holds(tmp_path):
    """``--again`` wrote every step whatever the run held: a step file rewritten by a resumed run (other uids) was
    added to the old batch's rollouts, two batches judged as one step. It is named and left, as without ``--again``;
    a step still whole is written again."""
    folder = _dump(tmp_path, _step(1, tag="old"))
    _dump(tmp_path, _step(2, tag="old"), name="2.jsonl")
    store = LocalStore(tmp_path / "store")
    import_rollout_dump(folder, store, "run")
    _dump(tmp_path, _step(1, tag="new"))
    again = import_rollout_dump(folder, store, "run", again=True)
    assert again.steps == {2} and again.count == 12 and again.already_stored == [1]
    assert "rewritten" in again.skipped[0]
    assert {r.group_id for r in store.iter_records("run") if r.step == 1} == {"old0", "old1", "old2"}


def test_a_session_caught_between_its_outputs_is_completed_with_its_last_one(tmp_path):
    """An agent loop's session dumps several outputs, the last one the rollout verl trains on. A step file caught
    between two of them was imported with the earlier output, and the next import, finding the rollout held, kept
    it: the rollout was judged on an output verl did not train on."""
    lines = [_line(f"g{g}_{k}_0", score=0.0) for g in range(2) for k in range(2)]
    folder = _dump(tmp_path, lines)
    store = LocalStore(tmp_path / "store")
    assert import_rollout_dump(folder, store, "run").count == 4
    _dump(tmp_path, [*lines, _line("g0_0_1", score=1.0)])  # the session's second output, written after
    again = import_rollout_dump(folder, store, "run")
    assert again.count == 0 and not again.skipped  # no new rollout, one changed
    assert _aggregates(store, 1) == {"g0_0": 1.0, "g0_1": 0.0, "g1_0": 0.0, "g1_1": 0.0}


def test_a_store_failure_mid_step_leaves_no_record_without_its_transcript(tmp_path):
    """A record was written before its transcript: the store failing in between left the record, which the next
    import finds held and skips, so its transcript (an alarm's example) was never written."""
    from rewardpipe.store import StoreError

    class FailingOnce(LocalStore):
        failed = False

        def put_transcript(self, transcript):
            if transcript.rollout_id == "g1_2" and not FailingOnce.failed:
                FailingOnce.failed = True
                raise StoreError("S3 went away")
            return super().put_transcript(transcript)

    folder = _dump(tmp_path, _step(1))
    store = FailingOnce(tmp_path / "store")
    with pytest.raises(StoreError):
        import_rollout_dump(folder, store, "run")
    import_rollout_dump(folder, store, "run")
    records = list(store.iter_records("run"))
    assert len(records) == 12
    for r in records:
        assert store.get_transcript(transcript_key("run", r.step, r.group_id, r.rollout_id)).rollout_id == r.rollout_id


def test_two_imports_of_one_dump_at_once_write_each_rollout_once(tmp_path):
    from rewardpipe.store import StoreError

    folder = _dump(tmp_path, _step(1))
    for step in range(2, 6):
        _dump(tmp_path, _step(step), name=f"{step}.jsonl")
    errors: list[BaseException] = []

    def run() -> None:
        try:
            import_rollout_dump(folder, LocalStore(tmp_path / "store"), "run")
        except StoreError as exc:  # the other import holds the run: refused, named
            assert "being written by another" in str(exc)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    records = list(LocalStore(tmp_path / "store").iter_records("run"))
    assert len(records) == 5 * 12 and len({(r.step, r.rollout_id) for r in records}) == 60


def test_an_import_into_a_run_another_process_writes_is_refused_naming_it(tmp_path):
    """The import took no hold of the run (``rewardpipe run`` does): two imports at once each judged a step new from
    what the run held when it looked, and two dumps' rollouts could both land in one step."""
    from rewardpipe.store import StoreError

    folder = _dump(tmp_path, _step(1))
    store = LocalStore(tmp_path / "store")
    held = store.lock_run("run")
    try:
        with pytest.raises(StoreError, match="being written by another"):
            import_rollout_dump(folder, LocalStore(tmp_path / "store"), "run")
    finally:
        held.close()
    assert import_rollout_dump(folder, store, "run").count == 12  # released: the next import runs


def test_duplicated_uids_across_steps_stay_in_their_steps(tmp_path):
    folder = _dump(tmp_path, _step(1))
    _dump(tmp_path, _step(2, score=1.0), name="2.jsonl")
    result = monitor_records(read_rollout_dump(folder).records)
    assert result.step(1).aggregate.verdict != result.step(2).aggregate.verdict
    assert result.step(1).scored == result.step(2).scored == 12


# -- verl's own writer (make test-verl) ------------------------------------------------------------------------


@pytest.mark.verl
def test_verls_writer_with_a_reward_column_named_step_never_files_a_line_in_another_step(tmp_path):
    """verl's ``_write_generations`` lets the reward's extra info replace its ``step`` column: a reward key named
    ``step`` (an int here) made every line of step 2 claim step 1, and step 2's rollouts replaced step 1's."""
    pytest.importorskip("verl")
    from tests.integrations.test_round_thirtysix_verl_monitor import _verls_writer

    write = _verls_writer("verl.trainer.ppo.ray_trainer", "RayPPOTrainer")
    prompts = [f"Q{g}" for g in range(3) for _ in range(4)]
    for step in (1, 2):
        extra = {"step": [1] * 12, "acc": [float(k % 2) for k in range(12)]}
        write(prompts, [f"o{i}" for i in range(12)], ["7"] * 12, [float(step)] * 12, extra, str(tmp_path / "d"), step)
    store = LocalStore(tmp_path / "store")
    read = import_rollout_dump(tmp_path / "d", store, "run")
    assert read.steps == {1} and read.count == 12
    assert {r.aggregate for r in store.iter_records("run")} == {1.0}
    assert len(read.skipped) == 12 and all("2.jsonl" in s and "extra info named 'step'" in s for s in read.skipped)


def test_no_file_descriptor_is_left_open(tmp_path):
    folder = _dump(tmp_path, _step(1))
    before = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    for _ in range(5):
        read_rollout_dump(folder)
    if before is not None:
        assert len(os.listdir("/proc/self/fd")) == before


@pytest.mark.verl
def test_verls_v1_writer_with_hostile_keys_and_scores_costs_those_lines_only(tmp_path):
    """verl's own v1 writer, fed keys and scores no trainer should produce but a dump can hold: a NaN score, a key
    with a terminal escape, a key given twice, a key whose index no integer holds. Each costs its line, named."""
    pytest.importorskip("verl")
    from tests.integrations.test_round_thirtysix_verl_monitor import _verls_writer

    write = _verls_writer("verl.trainer.ppo.v1.trainer_base", "PPOTrainer")
    keys = [f"u{g}_{k}_0" for g in range(3) for k in range(4)]
    scores = [float(k % 2) for _ in range(3) for k in range(4)]
    keys[1], keys[2], keys[5] = "u0\x1b[2J_1_0", "u0_0_0", "u1_1_" + "9" * 5000
    scores[7] = float("nan")
    write([f"Q{i // 4}" for i in range(12)], ["o"] * 12, [None] * 12, scores, {"uid": keys}, str(tmp_path / "d"), 4)
    read = read_rollout_dump(tmp_path / "d")
    assert len(read.records) == 8 and read.grouped_by_uid
    assert sorted(int(s.split(".jsonl:")[1].split(":")[0]) for s in read.skipped) == [2, 3, 6, 8]
    assert monitor_records(read.records).step(4).scored == 8
