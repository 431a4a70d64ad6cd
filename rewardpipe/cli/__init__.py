"""Command-line interface. Each command group lives in its own module and registers on ``app``."""

# Imported for their side effect of registering commands on ``app``.
from rewardpipe.cli import (  # noqa: E402,F401
    envs_cmd,
    exec_cmd,
    init_cmd,
    monitor_cmd,
    nova_cmd,
    report_cmd,
    run_cmd,
    show_cmd,
    tasks_cmd,
)
from rewardpipe.cli.app import app

__all__ = ["app"]
