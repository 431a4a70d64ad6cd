"""`rewardpipe verl import`: verl's rollout dump (``trainer.rollout_data_dir``) into a store the monitor reads."""

from __future__ import annotations

from pathlib import Path

import typer

from rewardpipe.cli.application import app, fail, note

verl_app = typer.Typer(
    name="verl", help="verl runs: import the rollout dump for the within-group monitor.", no_args_is_help=True
)
app.add_typer(verl_app, name="verl")


@verl_app.command("import")
def import_cmd(
    dump: Path = typer.Argument(
        ..., help="The directory verl's trainer.rollout_data_dir names (its <step>.jsonl files), or one of its files."
    ),
    out: str = typer.Option(..., "--out", help="The store to write into: a directory or s3://bucket/prefix."),
    run_id: str = typer.Option("verl", "--run-id", help="The run the records are filed under."),
    reward: str | None = typer.Option(
        None, "--reward", help="The reward verl scored with (its component weights; verl's dump does not hold them)."
    ),
    again: bool = typer.Option(
        False,
        "--again",
        help="Write the steps the run already holds again (by default only new steps are imported); a step the dump "
        "no longer holds whole (rewritten by a resumed run) is left either way.",
    ),
    live: bool = typer.Option(
        False,
        "--live",
        help="While verl is still running: the newest step file is imported but left unfinished (monitor and report do "
        "not judge it) until an import finds a later step's file, or one without --live (after the training).",
    ),
) -> None:
    """Write each rollout of verl's dump as a record (its components, verl's score as the aggregate) and a
    transcript (prompt and response), grouped by verl's uid or, without one, by prompt; then run `rewardpipe
    monitor` and `rewardpipe report` on the store. Steps the run already holds are left as they are, so importing a
    growing dump again adds its new steps. A line that cannot be read is named and skipped."""
    from rewardpipe.cli.common import check_run_id
    from rewardpipe.integrations.verl_dump import import_rollout_dump
    from rewardpipe.store import StoreError, open_store

    check_run_id(run_id)
    weights = None
    if reward is not None:
        from rewardpipe.rewards import get_reward

        try:
            chosen = get_reward(reward)
        except (KeyError, ValueError, ImportError) as exc:
            fail(f"--reward {reward}: {exc}")
        weights = {component.name: component.weight for component in chosen.components}
    try:
        store = open_store(out)
        read = import_rollout_dump(dump, store, run_id, weights, again=again, live=live)
    except (ValueError, StoreError, OSError) as exc:
        fail(str(exc))
    for failed in read.failures:  # the run's steps are then not marked: monitor counts them as a run without marks
        note(f"warning: {failed}")
    for skipped in read.skipped[:20]:
        note(f"skipped {skipped}")
    if len(read.skipped) > 20:
        note(f"... and {len(read.skipped) - 20} more lines skipped")
    if read.already_stored:
        note(
            f"{len(read.already_stored)} step(s) already in run '{run_id}' left as they are (--again writes them again)"
        )
    if not read.count and not read.already_stored:
        fail(f"{dump}: no rollout could be read")
    for step in read.left_unfinished:
        note(
            f"step {step} left unfinished (--live: verl may still be writing its file): monitor and report do not "
            f"judge it until an import finds a later step's file, or one without --live"
        )
    components = ", ".join(read.components) or (
        "none, so only the aggregate (verl's score) is judged: verl 0.9.1's v1 trainer dumps no reward_extra_info "
        "(trainer.use_v1=false dumps each component)"
    )
    note(
        f"imported {read.count} rollouts of {len(read.steps)} step(s) into run '{run_id}' of {out}; grouped by "
        f"{_grouping(read.grouped_by_uid, read.grouped_by_prompt)}; components: {components}"
    )


def _grouping(by_uid: bool, by_prompt: bool) -> str:
    """How the imported rollouts were grouped: verl 0.9.1's v1 trainer's uids, the legacy trainer's prompts, or both
    (a dump holding steps of each)."""
    if by_uid and by_prompt:
        return "verl uid (steps written with one) and prompt text (steps without)"
    return "verl uid" if by_uid else "prompt text"
