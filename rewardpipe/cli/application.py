"""The typer application object, and the rules every subcommand shares.

* **Exit codes**: 0 success, 1 bad data (an input file, a store, an endpoint, a broken task), 2 usage (an
  option that is missing, malformed or contradicts another: click's own status for a bad command line), 130
  Ctrl-C. ``monitor --fail-on-alarm`` exits :data:`ALARM_EXIT` when an alarm is raised: 2 as well, as issue 1's
  interface fixed it; the two are told apart by stdout, which a usage error leaves empty.
* **Streams**: data (tables, results, JSON) goes to stdout, messages for people (progress, warnings,
  errors) to stderr. ``--json`` output is written with :func:`write_json_line`: one ASCII-only object per
  ``\\n``-terminated line, never through Rich, never with a non-finite number.
* **Progress bars** (`run`, `score`, `exec --batch`, `report`, `monitor`): on stderr, only when stderr is a
  terminal and never with ``--json``; stdout is the same with or without them (rewardpipe.cli.progress).
* **No tracebacks**: :class:`GuardedGroup` turns any exception a command lets through into one
  ``error:`` line (exit 1), so a bad input can never end in a Python traceback.
"""

from __future__ import annotations

import json
import math
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any, NoReturn

import typer
from typer.core import TyperGroup

USAGE_ERROR = 2
DATA_ERROR = 1
#: ``monitor --fail-on-alarm``: the run has a dead component or too many errors. The same status as a usage error,
#: because the CLI's published interface says so (scripts test for 2); an alarm prints its table or JSON on stdout,
#: a usage error nothing.
ALARM_EXIT = 2


#: The most characters of one line for people (a message, a table cell): a bad input line quoting the model's
#: megabyte-long field name or id printed all of it on stderr, once per line.
LINE_CHARS = 4000


def printable(text: str) -> str:
    """``text`` on one line with control characters shown as escapes, so hostile bytes (ANSI sequences in an
    id or an exception message) cannot rewrite the user's terminal (see :mod:`rewardpipe.safe_text`); cut to
    :data:`LINE_CHARS` characters, saying how many more there were."""
    from rewardpipe.safe_text import printable as escaped

    return escaped(cut_line(text), keep_newlines=False)


def cut_line(text: str, limit: int = LINE_CHARS) -> str:
    """``text``, or its first ``limit`` characters and how many more there were."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit:,} more characters)"


def markup_safe(text: object) -> str:
    """``text`` ready to embed in a Rich markup string: control characters escaped (see :func:`printable`)
    and ``[``-tags escaped, so an id like ``[bold]x[/]`` or ``\x1b[2J`` prints as itself."""
    from rich.markup import escape

    return escape(printable(str(text)))


class TerminalAlarmSink:
    """The monitor's console alarm sink for model- and user-written text: every string in the alarm (run id,
    component, message, causes, example ids and reasons) reaches the terminal with its control characters
    shown as escapes (Rich escapes the markup itself)."""

    def __init__(self, console: Any, location: str | None = None) -> None:
        from rewardpipe.monitoring import ConsoleAlarmSink

        self.inner = ConsoleAlarmSink(console, location)

    def emit(self, alarm: Any) -> None:
        import dataclasses

        self.inner.emit(
            dataclasses.replace(
                alarm,
                run_id=None if alarm.run_id is None else printable(alarm.run_id),
                component=printable(alarm.component),
                message=printable(alarm.message),
                causes=_printable_tree(alarm.causes),
                examples=_printable_tree(alarm.examples),
            )
        )


def _printable_tree(value: Any) -> Any:
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable(str(key)): _printable_tree(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_printable_tree(item) for item in value]
    return value


def note(message: str) -> None:
    """One line for people on stderr, as plain text (no Rich markup is interpreted in ``message``)."""
    try:
        sys.stderr.write(f"{printable(message)}\n")
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):  # stderr's reader gone too (`2>&1 | head`): nothing can be said
        pass


def error_line(message: str) -> None:
    note(f"error: {message}")


def fail(message: str, code: int = DATA_ERROR) -> NoReturn:
    """One ``error:`` line on stderr, then exit ``code`` (1 bad data, 2 usage)."""
    error_line(message)
    raise typer.Exit(code)


def usage_fail(message: str) -> NoReturn:
    fail(message, USAGE_ERROR)


#: What a command says when it is stopped part way (Ctrl-C, or the reader of its output gone): what it kept and
#: how to continue. Set by a command once it writes (``rewardpipe.cli.common.open_run``).
_ON_STOP: list[Callable[[], str]] = []


def when_stopped(say: Callable[[], str]) -> None:
    _ON_STOP[:] = [say]


def _stopped(what: str, code: int) -> NoReturn:
    said = "; ".join(say() for say in _ON_STOP)
    fail(f"{what}: {said}" if said else what, code)


def _quiet_stdout() -> None:
    """stdout's reader is gone: what is still buffered for it, and any later write, go nowhere (else the
    interpreter's last flush would print "Exception ignored ... BrokenPipeError" after the error line)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no file descriptor behind it (a test's captured stdout)
        pass


def _pipe_closed() -> NoReturn:
    _quiet_stdout()
    _stopped("stopped: the reader of the output closed it (a pipe such as `| head` ended)", DATA_ERROR)


def _finite_copy(value: Any, path: str, why: dict[str, str]) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        why[path or "<value>"] = "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
        return None
    if isinstance(value, dict):
        return {k: _finite_copy(v, f"{path}.{k}" if path else str(k), why) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_copy(v, f"{path}[{i}]", why) for i, v in enumerate(value)]
    return value


def json_line(obj: Any) -> str:
    """``obj`` as one line of ASCII JSON. Non-finite numbers become null and are listed, by path, in a
    ``non_finite`` field of a top-level object (``{"steps[0].mean": "nan"}``), so nothing is lost."""
    why: dict[str, str] = {}
    clean = _finite_copy(obj, "", why)
    if why and isinstance(clean, dict):
        clean["non_finite"] = why
    return json.dumps(clean, ensure_ascii=True, allow_nan=False, separators=(",", ":")) + "\n"


def write_json_line(obj: Any) -> None:
    sys.stdout.write(json_line(obj))
    sys.stdout.flush()


def _plain_warnings(show: Any) -> Any:
    """``warnings.showwarning`` printing rewardpipe's own warnings (a component outside its declared range, say)
    as one ``warning:`` line: Python's display gave rewardpipe's file, line and source line, a fragment of a
    traceback, for a mistake in the user's reward. Any other warning is shown by ``show`` as before."""

    def plain(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
        if (getattr(category, "__module__", "") or "").startswith("rewardpipe"):
            note(f"warning: {message}")
        else:
            show(message, category, *args, **kwargs)

    return plain


class GuardedGroup(TyperGroup):
    """The command group; any exception a subcommand did not handle becomes one error line, exit 1."""

    def invoke(self, ctx: typer.Context) -> Any:  # type: ignore[override]  # typer hands its groups its own Context
        from rewardpipe.models import InputFileError
        from rewardpipe.store import StoreError

        _ON_STOP.clear()  # (a test runs several commands in one process)
        try:
            with warnings.catch_warnings():  # restores Python's own display when the command ends
                warnings.showwarning = _plain_warnings(warnings.showwarning)
                return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException):  # usage errors and exits: typer reports them
            raise
        except (InputFileError, StoreError) as exc:
            fail(str(exc))
        except UnicodeDecodeError as exc:
            fail(f"input is not UTF-8 text ({exc.reason} at byte {exc.start})")
        except KeyboardInterrupt:  # Ctrl-C: the usual status, and what was kept
            _stopped("interrupted", 130)
        except BrokenPipeError:  # `rewardpipe ... | head`: said as what it is, not a bare "Broken pipe"
            _pipe_closed()
        except SystemExit as exc:
            # Rich's console ends the program itself when its reader is gone (SystemExit(1) raised while handling
            # the BrokenPipeError): every table, panel and Rich line stopped without a word, and `run` without
            # saying what it kept. Said as the pipe closed under any other write is.
            if isinstance(exc.__context__, BrokenPipeError):
                _pipe_closed()
            raise
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            fail(f"{where}{exc.strerror or exc}")
        except Exception as exc:  # noqa: BLE001 - the last line of defence: never a traceback
            fail(f"unexpected {type(exc).__name__}: {exc} (this is a rewardpipe bug; please report it)")


app = typer.Typer(
    name="rewardpipe",
    help="Score GRPO rollouts component by component, run model code safely, and alarm on dead components.",
    no_args_is_help=True,
    add_completion=False,
    cls=GuardedGroup,
    pretty_exceptions_enable=False,
)
