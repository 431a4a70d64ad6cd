"""`rewardpipe envs`: the environments and rewards this Python can name, and where each comes from.

Built-ins first, then every short name an installed distribution registers in the entry-point groups
``rewardpipe.environments`` and ``rewardpipe.rewards``: its reference, version and distribution, and what keeps
it from loading (two distributions claiming one name, a package shadowing a built-in, an import error).
"""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from rewardpipe.cli.application import app, markup_safe, write_json_line


@app.command()
def envs(as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """List the environments and rewards that can be named (--env, --reward): built-in and installed."""
    from rewardpipe.references import ENVIRONMENT_GROUP, REWARD_GROUP, installed

    environments, rewards = installed(ENVIRONMENT_GROUP), installed(REWARD_GROUP)
    if as_json:
        write_json_line({"environments": environments, "rewards": rewards})
        return
    out = Console(width=None if Console().is_terminal else 160)
    for title, rows in (("environments", environments), ("rewards", rewards)):
        table = Table(title=f"{title} (--{'env' if title == 'environments' else 'reward'} NAME)")
        for column in ("name", "reference", "version", "distribution", "problem"):
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(
                *(markup_safe(row[c] or "") for c in ("name", "reference", "version", "distribution")),
                f"[red]{markup_safe(row['problem'])}[/]" if row["problem"] else "",
            )
        out.print(table)
    out.print(
        f'Register one in your package\'s pyproject.toml: [project.entry-points."{ENVIRONMENT_GROUP}"] or '
        f'[project.entry-points."{REWARD_GROUP}"] NAME = "your_package.module:ATTR", then pip install -e .',
        highlight=False,
        soft_wrap=True,
        markup=False,
    )
