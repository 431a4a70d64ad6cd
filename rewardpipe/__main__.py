"""The ``rewardpipe`` command (and ``python -m rewardpipe``).

Only the module of the command asked for is imported (rewardpipe.cli.main). Before that (typer, rich and
pydantic take about 0.1 s), a command that will run jobs in the sandbox has its fork servers started, so
that they come up meanwhile instead of after.
"""

from __future__ import annotations

import gc
import sys

# `rewardpipe exec` options that take a value (as "--name value" or "--name=value"), and its flags.
_EXEC_VALUE_OPTIONS = {
    "--code",
    "--tests",
    "--entry-point",
    "--tests-format",
    "--timeout",
    "--trust-mode",
    "--batch",
    "--workers",
    "--disable",
}
_EXEC_FLAGS = {"--json"}


def exec_sandbox_plan(argv: list[str]) -> tuple[int | None, dict] | None:
    """For a ``rewardpipe exec`` that runs jobs: ``(fork servers to start, settings overrides)``, the count
    None meaning one per worker of the executor. None for any other command, for ``--help`` and
    ``--isolation``, and for anything this reading is unsure of: the command then starts them itself, as
    it always can."""
    if not argv or argv[0] != "exec":
        return None
    values: dict[str, str] = {}
    rest = iter(argv[1:])
    for arg in rest:
        name, has_value, value = arg.partition("=")
        if name in _EXEC_VALUE_OPTIONS:
            if not has_value:
                following = next(rest, None)
                if following is None:
                    return None
                value = following
            values[name] = value
        elif arg not in _EXEC_FLAGS:
            return None
    workers: int | None = None
    if "--workers" in values:
        try:
            workers = int(values["--workers"])
        except ValueError:
            return None
        if workers < 1:
            return None
    from rewardpipe.execution.forkservers import overrides_for

    count = None if "--batch" in values else 1  # one job, one fork server; a batch warms them all up
    return count, overrides_for(workers, values.get("--disable", ""))


def _prestart(plan: tuple[int | None, dict]) -> None:
    count, overrides = plan
    try:
        from rewardpipe.execution import forkservers

        forkservers.prestart(count, **overrides)
    except Exception:  # noqa: BLE001 - a head start only: the command starts (and reports) them itself
        pass


def main() -> None:
    # Start-up makes a great many objects that all stay alive (typer, pydantic, the command's modules): the
    # collector would find nothing, again and again. Off meanwhile; then what start-up made is frozen (else the
    # first collections would walk all of it once the collector is on) and it is on before the command runs.
    gc.disable()
    try:
        plan = exec_sandbox_plan(sys.argv[1:])
        if plan is not None:
            _prestart(plan)
        from rewardpipe.cli import COMMAND_MODULES, load
        from rewardpipe.cli import main as command_line

        if sys.argv[1:2] and sys.argv[1] in COMMAND_MODULES:
            load(sys.argv[1:2])  # what command_line would import first
    finally:
        gc.freeze()
        gc.enable()
    try:
        command_line(sys.argv[1:])
    finally:
        if plan is not None:
            # An exec's results are written: spare the interpreter's last collection its walk over every
            # object the command imported (about 30 ms). Only here: a command that leaves a buffered file in
            # a reference cycle would otherwise lose what the file still held.
            gc.freeze()


if __name__ == "__main__":
    main()
