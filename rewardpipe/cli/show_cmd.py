"""`rewardpipe show STORE --run-id R --rollout ID`: one rollout's transcript, readably.

Prints the messages of any environment (the assistant's tool calls, a tool message's call id and name;
each assistant turn with its kind when the environment labels turns, and the spec detail a reply revealed),
the executed code, the execution verdict with its reason, and the scores. Every string from the transcript is model- or
simulator-written and is printed through :func:`rewardpipe.safe_text.printable` and ``rich.markup.escape``.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table

from rewardpipe.cli.application import app, fail, usage_fail, write_json_line
from rewardpipe.safe_text import printable

#: What ``show`` prints of one text (a message, a tool call's arguments, the code, a reason) unless ``--full``: a
#: model's 10 MB message was 10 MB on the terminal, its code 10 MB through the syntax highlighter.
SHOWN_CHARS = 8000
SHOWN_LINES = 200


def _cut(text: str, full: bool) -> tuple[str, str]:
    """``text`` as far as it is shown (whole with ``full``), and the note (markup) saying what was left out."""
    if full:
        return text, ""
    shown = text[:SHOWN_CHARS]
    lines = shown.split("\n")
    if len(lines) > SHOWN_LINES:
        shown = "\n".join(lines[:SHOWN_LINES])
    if len(shown) == len(text):
        return text, ""
    left = text[len(shown) :]
    return shown, (
        f"[dim]… {len(left):,} more character(s), {left.count(chr(10)):,} more line(s): "
        f"--full prints the whole text, --json the document[/]"
    )


def _safe(text: object, full: bool = True) -> str:
    """``text`` ready for markup: cut (unless ``full``), control and bidi characters escaped, ``[`` escaped."""
    shown, left = _cut(str(text), full)
    return escape(printable(shown)) + (f" {left}" if left else "")


def _tool_call(call: object, full: bool) -> str:
    """One OpenAI-style tool call as ``name(arguments) [id]``, every part escaped (the model wrote it)."""
    from rewardpipe.transcripts import tool_call_parts

    if not isinstance(call, dict):
        return _safe(call, full)
    name, arguments, call_id = tool_call_parts(call, ensure_ascii=True)
    ident = f" [dim]\\[{_safe(call_id, full)}][/]" if call_id else ""
    return f"{_safe(name, full)}({_safe(arguments, full)}){ident}"


def _given_key(store, key: str) -> str:
    """``--key`` as the store's key: a transcript_key as it is, or the path `monitor` and `run` print for an
    alarm example (the key under the store's location) made the key again, when that names a transcript and the
    text as given does not."""
    from rewardpipe.store import is_transcript_key

    stored = store.key_of(key)
    if stored is not None and not is_transcript_key(key) and is_transcript_key(stored):
        return stored
    return key


def _locate(store, run_id: str, rollout: str, step: int | None, key: str | None) -> str:
    if key:
        return _given_key(store, key)
    keys = store.find_transcripts(run_id, rollout, step)
    if not keys:
        where = f" at step {step}" if step is not None else ""
        fail(
            f"no transcript of rollout '{rollout}' in run '{run_id}'{where} under {store.location} "
            f"(transcripts are written by `rewardpipe run`/`score` and the AWS Score step)"
            + (_other_case(store, run_id, rollout) or f"; {_held(run_id, _rollout_ids(store, run_id))}")
        )
    if len(keys) > 1:
        fail(
            f"rollout '{rollout}' has {len(keys)} transcripts in run '{run_id}' (one per step); "
            f"choose one with --step: " + ", ".join(keys[:10])
        )
    return keys[0]


def _other_case(store, run_id: str, rollout: str) -> str:
    """Ids are case-sensitive: name the stored rollouts that differ from ``rollout`` only in letter case."""
    wanted = rollout.casefold()
    close = [other for other in _rollout_ids(store, run_id) if other != rollout and other.casefold() == wanted]
    return f"; ids are case-sensitive: did you mean {', '.join(repr(c) for c in close[:3])}?" if close else ""


def _rollout_ids(store, run_id: str) -> list[str]:
    """The ids of the rollouts the run holds a transcript of, sorted."""
    from rewardpipe.store import decode_id, run_prefix

    keys = store.list_keys(f"{run_prefix(run_id)}transcripts/")
    return sorted({decode_id(key.rsplit("/", 1)[1].removesuffix(".json")) for key in keys})


def _which_rollouts(store_path: str, run_id: str | None) -> str:
    """``: run 'R' holds N rollout(s), e.g. ...``, what to give ``--rollout`` (a new user had no way to learn an id);
    empty when the store cannot say (not there, several runs and none chosen) or is on S3 (a usage mistake is said
    without a network call): the mistake is said anyway."""
    from rewardpipe.store import StoreError, open_store

    try:
        if store_path.startswith("s3://") or not Path(store_path).is_dir():
            return ""
        store = open_store(store_path)
        runs = store.list_runs()
        if run_id is None and len(runs) == 1:
            run_id = runs[0]
        if run_id is None or run_id not in runs:
            return ""
        ids = _rollout_ids(store, run_id)
    except (StoreError, ValueError, KeyError, OSError):
        return ""
    return f": {_held(run_id, ids)}"


def _held(run_id: str, ids: list[str]) -> str:
    """``run 'R' holds N rollout(s), e.g. ...``: what ``--rollout`` can name."""
    if not ids:
        return f"run '{run_id}' holds no transcripts (they are written by `rewardpipe run`/`score`)"
    shown = ", ".join(printable(repr(rollout[:80])) for rollout in ids[:5])
    return f"run '{run_id}' holds {len(ids)} rollout(s), e.g. {shown}{' ...' if len(ids) > 5 else ''}"


@app.command()
def show(
    store_path: str = typer.Argument(..., metavar="STORE", help="The store: a directory or s3://bucket/prefix."),
    run_id: str | None = typer.Option(
        None, "--run-id", help="The run the rollout belongs to (default: the store's only run)."
    ),
    rollout: str | None = typer.Option(None, "--rollout", help="The rollout id."),
    step: int | None = typer.Option(None, "--step", min=0, help="The step, when the rollout id repeats."),
    key: str | None = typer.Option(None, "--key", help="A transcript_key (as in alarm examples) instead."),
    as_json: bool = typer.Option(False, "--json", help="Print the transcript document as JSON (always whole)."),
    full: bool = typer.Option(
        False,
        "--full",
        help=f"Print every text whole (by default each is cut at {SHOWN_CHARS:,} characters or {SHOWN_LINES} lines, "
        "and says so).",
    ),
) -> None:
    """Print one rollout's transcript: messages (tool calls too), revealed details, executed code, verdict,
    components. Each text is cut at a screenful or so unless --full; model text is always shown inert."""
    from rewardpipe.store import StoreError, open_store

    if not rollout and not key:  # a usage mistake (exit 2), said with what the store would let one give
        usage_fail(f"give --rollout ID (or --key TRANSCRIPT_KEY){_which_rollouts(store_path, run_id)}")
    if not store_path.startswith("s3://") and not Path(store_path).exists():  # as monitor and report say it
        fail(f"STORE not found: {store_path} (expected a store directory or an s3:// URI)")
    try:
        store = open_store(store_path)
        if not key:  # as monitor and report: the store's only run, or the one named, which must be there
            runs = store.list_runs()
            if run_id is None and len(runs) != 1:
                fail(
                    f"{store_path} holds several runs ({', '.join(runs)}): choose one with --run-id"
                    if runs
                    else f"{store_path} holds no runs"
                )
            if run_id is not None and run_id not in runs:
                fail(f"run '{run_id}' not found in {store_path} (runs: {', '.join(runs) or 'none'})")
            run_id = run_id or runs[0]
        transcript = store.get_transcript(_locate(store, run_id or "", rollout or "", step, key))
    except KeyError as exc:
        fail(str(exc.args[0]) if exc.args else "no such transcript")
    except (StoreError, ValueError) as exc:
        fail(str(exc))
    if key:  # the key chose the transcript: an option that says otherwise was ignored, whatever it said
        t = transcript
        for option, given, actual in (
            ("--run-id", run_id, t.run_id),
            ("--rollout", rollout, t.rollout_id),
            ("--step", step, t.step),
        ):
            if given is not None and given != actual:
                usage_fail(
                    f"{option} {given!r} contradicts --key, whose transcript is rollout {t.rollout_id!r} of "
                    f"run {t.run_id!r} at step {t.step} (give --key alone)"
                )
    out = Console(highlight=False)
    if as_json:
        # ensure_ascii: control, bidi and every other non-ASCII character a model wrote becomes a \u escape
        write_json_line(transcript.to_json_dict())
        return
    t = transcript
    out.print(
        f"[bold]{_safe(t.rollout_id, full)}[/]  run {_safe(t.run_id, full)} · step {t.step} "
        f"· group {_safe(t.group_id, full)} · task {_safe(t.task_id, full)}",
        soft_wrap=True,
    )
    revealed_at = {item.turn: item for item in t.revealed if item.turn is not None}
    turn = -1
    for message in t.messages:
        label = message.role
        if message.role == "assistant":
            turn += 1
            kind = f" · {t.turn_kinds[turn]}" if turn < len(t.turn_kinds) else ""
            label = f"assistant · turn {turn}{kind}"
        if message.name:
            label += f" · {message.name}"
        if message.tool_call_id:
            label += f" · answers {message.tool_call_id}"
        body = _safe(message.content, full) if message.content else ("" if message.tool_calls else "[dim](empty)[/]")
        for call in message.tool_calls or []:
            body += ("\n" if body else "") + f"[magenta]↳ tool call[/] {_tool_call(call, full)}"
        out.print(
            Panel(
                body,
                title=_safe(label, full),
                title_align="left",
                border_style="cyan" if message.role == "assistant" else "white",
            )
        )
        if message.role == "user" and turn in revealed_at and turn >= 0:
            out.print(f"  [green]↳ revealed spec item {revealed_at[turn].index}[/]")
    if t.executed_code is not None:
        code, left = _cut(t.executed_code, full)
        out.print(
            Panel(
                Syntax(printable(code), "python", line_numbers=True, word_wrap=True),
                title="executed code",
                title_align="left",
            )
        )
        if left:
            out.print(f"  {left}")
    verdict = t.verdict
    tests = f" ({verdict.passed}/{verdict.total} tests)" if verdict.total else ""
    out.print(
        f"[bold]verdict:[/] {_safe(verdict.status, full)}{tests}"
        + (f" — {_safe(verdict.reason, full)}" if verdict.reason else ""),
        soft_wrap=True,
    )
    revealed = f" · revealed {len(t.revealed)} spec item(s)" if t.revealed or t.reveals_spec else ""
    out.print(f"[bold]end:[/] {_safe(t.end_reason or '-', full)}{revealed}", soft_wrap=True)
    status = f"status {_safe(t.status, full)}" + (f" · {_safe(t.error.kind, full)}" if t.error else "")
    table = Table("component", "value", title=status)
    for name, value in t.components.items():
        table.add_row(_safe(name, full), "—" if value is None else f"{value:g}")
    table.add_row("[bold]aggregate[/]", "—" if t.aggregate is None else f"{t.aggregate:g}")
    out.print(table)
    if t.error:
        out.print(f"[red]error:[/] {_safe(t.error.message, full)}", soft_wrap=True)
