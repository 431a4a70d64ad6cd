"""Command-line interface. Each command lives in its own module and registers itself on the Typer
application (:mod:`rewardpipe.cli.application`) when that module is imported.

``from rewardpipe.cli import app`` gives the application with every command. The ``rewardpipe`` command
itself (:func:`main`) imports only the module of the command it was asked for: the others' imports (rich's
syntax highlighting, the environments, the store) cost a command like ``exec`` about 60 ms of start-up.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import typer

# Every command (and command group), by the module that registers it. The modules are imported in this
# order, which is the order `rewardpipe --help` lists the commands in (groups after the commands).
# tests/cli/test_command_modules.py checks that this is every command the application has.
COMMAND_MODULES = {
    "envs": "envs_cmd",
    "exec": "exec_cmd",
    "init": "init_cmd",
    "monitor": "monitor_cmd",
    "nova": "nova_cmd",
    "report": "report_cmd",
    "run": "run_cmd",
    "score": "run_cmd",
    "doctor": "run_cmd",
    "show": "show_cmd",
    "tasks": "tasks_cmd",
    "verl": "verl_cmd",
}


def load(commands: list[str] | None = None) -> typer.Typer:
    """The application with ``commands`` registered (at least), every command when None."""
    wanted = COMMAND_MODULES if commands is None else commands
    for module in dict.fromkeys(COMMAND_MODULES[name] for name in wanted):
        importlib.import_module(f"rewardpipe.cli.{module}")
    from rewardpipe.cli.application import app

    # Listed in this map's order whichever command module was imported first (help, generated docs).
    order = {name: index for index, name in enumerate(COMMAND_MODULES)}
    app.registered_commands.sort(key=lambda info: order.get(_name_of(info), len(order)))
    app.registered_groups.sort(key=lambda info: order.get(info.name or "", len(order)))
    return app


def _name_of(info: Any) -> str:
    """A registered command's name as typer gives it: its own, or its function's with "-" for "_"."""
    return info.name or info.callback.__name__.replace("_", "-")


def main(args: list[str]) -> Any:
    """Run the command line ``args`` (without the program name), loading only the command it names; any
    other first argument (an option, a typo, nothing) gets every command, so help and errors list them all."""
    command = args[0] if args else None
    if command not in COMMAND_MODULES:
        return load()(args=args)
    import typer.main

    # A group even with one command loaded (a Typer with a single command would run it as the program
    # itself and take its name for an argument): the same usage lines and errors as the whole application.
    return typer.main.get_group(load([command]))(args=args)


def __getattr__(name: str) -> Any:
    if name == "app":
        app = load()
        globals()["app"] = app
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["COMMAND_MODULES", "app", "load", "main"]
