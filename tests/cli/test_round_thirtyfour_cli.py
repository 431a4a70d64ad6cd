"""Round thirty-four, the CLI and doctor: exit codes a script can tell apart, a closed pipe under a table, `show`
bounded and inert, and doctor calling every hook of the environment protocol.

Each test failed before its fix (see docs/changelog.md, round thirty-four)."""

from __future__ import annotations

from pathlib import Path

from tests.cli.conftest import write_jsonl

ROOT = Path(__file__).resolve().parents[2]
ANIMALS = ROOT / "examples" / "your_own_environment"


def _dead_component_records(tmp_path: Path) -> Path:
    from tests.cli.test_round_thirtythree_cli import _records

    return write_jsonl(tmp_path / "records.jsonl", _records(c_varies=False))


class TestExitCodes:
    """`monitor --fail-on-alarm` exited 2 on an alarm, the status every usage error (a mistyped option) has: a CI
    gate could not tell "the run has a dead component" from "the command line is wrong"."""

    def test_an_alarm_and_a_usage_error_exit_differently(self, cli, tmp_path):
        from rewardpipe.cli.application import ALARM_EXIT, USAGE_ERROR

        records = _dead_component_records(tmp_path)
        alarm = cli("monitor", records, "--fail-on-alarm")
        usage = cli("monitor", records, "--fail-on-alarms")  # a typo
        assert usage.exit_code == USAGE_ERROR == 2
        assert alarm.exit_code == ALARM_EXIT != USAGE_ERROR, alarm.output
        assert cli("monitor", records, "--fail-on-alarm", "--json").exit_code == ALARM_EXIT

    def test_no_outcome_of_a_command_shares_the_usage_status(self):
        """Every status a command exits with for an outcome is named and documented, none of them 2."""
        from rewardpipe.cli import application

        table = (ROOT / "docs/reference/inputs.md").read_text()
        assert f"| {application.ALARM_EXIT} | " in table
        usage_row = next(line for line in table.splitlines() if line.startswith("| 2 |"))
        assert "alarm" not in usage_row
        assert application.ALARM_EXIT not in (0, application.DATA_ERROR, application.USAGE_ERROR, 130)
        source = (ROOT / "rewardpipe/cli/monitor_cmd.py").read_text()
        assert "Exit(2)" not in source
