"""Progress bars for long commands (`run`, `score`, `exec --batch`, `report`, `monitor`).

A bar is drawn on stderr only when stderr is a terminal and the command is not asked for ``--json``; in every
other case the commands get :class:`NoBars`, which does nothing, so piped output and ``--json`` output never
carry a bar, and stdout is the same byte for byte whether or not stderr is a terminal (stdout is never
redirected through the bar: ``redirect_stdout=False``). ``rich.progress`` is imported only when a bar is
drawn, so it costs the CLI's start-up nothing.

Descriptions are rewardpipe's own words ("scoring", "step 3: playing"). Whatever a caller passes is still
made plain text (control characters shown as escapes, no Rich markup interpreted), so text from a model or a
file can never move the cursor or retitle the terminal through a bar.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # replaced by an object without a descriptor, or closed
        return False


def bars_wanted(as_json: bool = False, prints_meanwhile: bool = False) -> bool:
    """A bar is drawn when stderr is a terminal, unless the command writes ``--json``, or prints lines to
    stdout while it works (``prints_meanwhile``: `exec --batch`'s verdicts) and stdout is a terminal too:
    those lines are the progress then, and a bar redrawn between them would overwrite them."""
    if as_json or not _is_terminal(sys.stderr):
        return False
    return not (prints_meanwhile and _is_terminal(sys.stdout))


def _plain(description: str) -> str:
    from rewardpipe.cli.application import printable

    return printable(str(description))


class NoBars:
    """The bars of a command whose stderr is not a terminal (or that writes ``--json``): nothing is drawn."""

    drawn = False

    def add_task(self, description: str, total: float | None = None, **_: Any) -> int:  # noqa: ARG002
        return 0

    def update(self, task: int, **_: Any) -> None:
        pass

    def advance(self, task: int, advance: float = 1) -> None:
        pass

    def remove_task(self, task: int) -> None:
        pass


class Bars(NoBars):
    """Rich's ``Progress`` on stderr, its descriptions made plain text."""

    drawn = True

    def __init__(self, progress: Any) -> None:
        self._progress = progress

    def add_task(self, description: str, total: float | None = None, **_: Any) -> int:
        return self._progress.add_task(_plain(description), total=total)

    def update(self, task: int, *, description: str | None = None, **fields: Any) -> None:
        if description is not None:
            fields["description"] = _plain(description)
        self._progress.update(task, **fields)

    def advance(self, task: int, advance: float = 1) -> None:
        self._progress.advance(task, advance)

    def remove_task(self, task: int) -> None:
        self._progress.remove_task(task)


@contextlib.contextmanager
def progress_bars(as_json: bool = False, console: Any = None, prints_meanwhile: bool = False) -> Iterator[NoBars]:
    """The command's bars: drawn (and cleared at the end) when :func:`bars_wanted`, else :class:`NoBars`.
    ``console``: the stderr Console the command prints other things to while the bars are up (so Rich
    prints them above the bars), else a new one."""
    if not bars_wanted(as_json, prints_meanwhile):
        yield NoBars()
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if console is None:
        from rich.console import Console

        console = Console(stderr=True)
    # Lines other code writes to stderr meanwhile (notes, errors) are printed above the bar
    # (redirect_stderr); stdout is left alone, so what a command prints there never moves to stderr.
    progress = Progress(
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        redirect_stdout=False,
        redirect_stderr=True,
    )
    with progress:
        yield Bars(progress)


def count_lines(path: os.PathLike[str] | str) -> int | None:
    """How many lines ``path`` holds (a bar's total; read in large blocks), or None if it cannot be read."""
    import stat

    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a pipe is read once, by the command
            return None
        with open(path, "rb") as handle:
            count, last = 0, b"\n"
            while block := handle.read(1 << 20):
                count += block.count(b"\n")
                last = block[-1:]
            return count + (last != b"\n")
    except OSError:
        return None
