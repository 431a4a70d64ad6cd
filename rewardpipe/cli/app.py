"""The typer application object; command modules register themselves on it."""

import typer

app = typer.Typer(
    name="rewardpipe",
    help="Score GRPO rollouts component by component, run model code safely, and alarm on dead components.",
    no_args_is_help=True,
    add_completion=False,
)
