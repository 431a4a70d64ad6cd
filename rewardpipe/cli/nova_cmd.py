"""`rewardpipe nova simulate`: play Nova Forge's side of delegated rollouts against a deployed bridge."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from rewardpipe.cli.application import app, fail, markup_safe, write_json_line

nova_app = typer.Typer(
    name="nova", help="Amazon Nova Forge multi-turn bridge (rollout.delegate).", no_args_is_help=True
)
app.add_typer(nova_app, name="nova")
err = Console(stderr=True, soft_wrap=True)

DEFAULT_TASKS = Path(__file__).resolve().parents[1] / "data" / "tasks.jsonl"


@nova_app.command("simulate")
def simulate_cmd(
    rollout_request_arn: str = typer.Option(
        ..., "--rollout-request-arn", help="Stack output NovaRolloutRequestArn: the rollout proxy Lambda Nova invokes."
    ),
    rollout_response_url: str = typer.Option(
        ..., "--rollout-response-url", help="Stack output NovaRolloutResponseSqsUrl."
    ),
    generate_request_url: str = typer.Option(
        ..., "--generate-request-url", help="Stack output NovaGenerateRequestSqsUrl."
    ),
    generate_response_url: str = typer.Option(
        ..., "--generate-response-url", help="Stack output NovaGenerateResponseSqsUrl."
    ),
    tasks: Path = typer.Option(
        DEFAULT_TASKS,
        "--tasks",
        help="Task JSONL; each task must also be at tasks/nova/<task_id>.json in the stack's bucket.",
    ),
    groups: int = typer.Option(2, min=1, max=50, help="Prompts (GRPO groups) to send."),
    group_size: int = typer.Option(4, min=1, max=64, help="Samples per group (Nova's number_generation)."),
    timeout: float = typer.Option(600.0, min=1, help="Seconds to wait for every rollout response."),
    region: str | None = typer.Option(None, help="AWS region of the stack (default: your AWS configuration)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Send rollout requests like a Nova training job (invoking the rollout proxy Lambda), answer its generate
    requests with scripted turns, and check one in-range rollout response per sample arrives. Exit 1 if any is
    missing, duplicated, out of range or an error answer."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    from rewardpipe.cli.common import load_tasks_or_fail
    from rewardpipe.integrations.nova.trainer_sim import NovaQueues, simulate

    task_list = load_tasks_or_fail(tasks, runnable=True)  # before any AWS call: an empty or unreadable file exits 1
    from rewardpipe.integrations.nova.trainer_sim import RolloutRequestRefused

    queues = NovaQueues(rollout_request_arn, rollout_response_url, generate_request_url, generate_response_url)
    try:
        kwargs = {"region_name": region} if region else {}
        sqs, lam = boto3.client("sqs", **kwargs), boto3.client("lambda", **kwargs)
        report = simulate(sqs, queues, task_list, groups=groups, group_size=group_size, timeout_s=timeout, lam=lam)
    except (BotoCoreError, ClientError, RolloutRequestRefused) as exc:  # no credentials, a wrong ARN/URL, a denial
        fail(f"AWS: {exc} (check --region, your AWS credentials, the rollout proxy ARN and the three queue URLs)")
    if as_json:
        write_json_line(
            {
                "ok": report.ok,
                "seconds": round(report.seconds, 1),
                "sent": report.sent,
                "responses": report.responses,
                "missing": report.missing,
                "duplicates": report.duplicates,
                "out_of_range": report.out_of_range,
                "errored": report.errored,
            }
        )
    else:
        table = Table(title=f"{len(report.responses)}/{len(report.sent)} rollout responses in {report.seconds:.0f}s")
        for column in ("sample_id", "stop_reason", "aggregate_score"):
            table.add_column(column)
        for sample_id in report.sent:
            response = report.responses.get(sample_id)
            table.add_row(
                markup_safe(sample_id),
                markup_safe(str(response.get("stop_reason"))) if response else "[red]missing[/red]",
                markup_safe(str(response.get("rewards", {}).get("aggregate_score"))) if response else "",
            )
        Console(soft_wrap=True).print(table)
        for problem, items in (
            ("missing", report.missing),
            ("out of range", report.out_of_range),
            ("answered with stop_reason error (see the bridge's logs and the records' errors)", report.errored),
            ("duplicate responses", [d.get("sample_id") for d in report.duplicates]),
        ):
            if items:
                err.print(f"[bold red]{problem}:[/] {markup_safe(', '.join(map(str, items)))}")
    if not report.ok:
        raise typer.Exit(1)
