"""`run` and `monitor` take the monitor's knobs from one declaration, and both hand them to the monitor."""

import json
import re

import pytest

from tests.cli.conftest import BUNDLED_TASKS

THRESHOLD_FLAGS = {
    "--epsilon",
    "--dead-fraction",
    "--recover-fraction",
    "--min-groups",
    "--consecutive",
    "--max-error-rate",
    "--error-recover-rate",
    "--ignore",
    "--range",
    "--alarm-idle-penalties",
}


def _flags(help_text: str) -> set[str]:
    return set(re.findall(r"--[a-z][a-z-]+", help_text))


def test_run_and_monitor_expose_the_same_threshold_options(cli):
    run_flags = _flags(cli("run", "--help").output)
    monitor_flags = _flags(cli("monitor", "--help").output)
    # Rich truncates long option names in narrow help panels; compare on the prefixes it keeps.
    for flag in THRESHOLD_FLAGS:
        assert any(flag.startswith(f) or f.startswith(flag) for f in run_flags), flag
        assert any(flag.startswith(f) or f.startswith(flag) for f in monitor_flags), flag


@pytest.mark.parametrize("command", ["run", "monitor"])
def test_a_bad_threshold_is_a_usage_error_naming_it(cli, tmp_path, command):
    target = ["--tasks", BUNDLED_TASKS, "--out", tmp_path / "store"] if command == "run" else [tmp_path]
    result = cli(command, *target, "--dead-fraction", "1.5")
    assert result.exit_code == 2
    assert "dead_fraction" in result.output
    assert not (tmp_path / "store").exists()


def test_thresholds_reach_the_monitor_from_both_commands(cli, tmp_path):
    store = tmp_path / "store"
    common = ["--ignore", "loop_penalty", "--dead-fraction", "0.75"]
    ran = cli(
        "run",
        "--tasks",
        BUNDLED_TASKS,
        "--out",
        store,
        "--run-id",
        "r",
        "--steps",
        "1",
        "--groups-per-step",
        "4",
        "--group-size",
        "4",
        "--json",
        *common,
    )
    assert ran.exit_code == 0, ran.output
    components = json.loads(ran.stdout.strip().splitlines()[-1])["steps"][0]["components"]
    # An ignored component is reported but never tracked towards an alarm; the others are.
    assert components["loop_penalty"]["dead_streak"] is None
    assert components["correctness"]["dead_streak"] is not None
    monitored = cli("monitor", store, "--run-id", "r", "--json", *common)
    assert monitored.exit_code == 0, monitored.output
    thresholds = json.loads(monitored.stdout)["thresholds"]
    assert thresholds["dead_fraction"] == 0.75
    assert thresholds["ignore"] == ["loop_penalty"]


@pytest.mark.parametrize("option", [("--ignore", "loop_penalt"), ("--ignore", ""), ("--range", "loop_penalt=0:1")])
def test_run_refuses_a_knob_naming_no_component_of_its_reward(cli, tmp_path, option):
    # a typo would otherwise silence nothing (or bound nothing) without a word
    result = cli("run", "--tasks", BUNDLED_TASKS, "--out", tmp_path / "store", *option)
    assert result.exit_code == 2
    assert f"{option[0]} '{option[1].split('=')[0]}': reward 'ask_before_coding' has no such component" in result.stderr
    assert "loop_penalty" in result.stderr  # the names it knows
    assert not (tmp_path / "store").exists()


def test_monitor_warns_about_an_ignore_naming_no_component_of_the_records(cli, tmp_path):
    assert (
        cli(
            "run",
            "--tasks",
            BUNDLED_TASKS,
            "--steps",
            1,
            "--group-size",
            2,
            "--groups-per-step",
            4,
            "--out",
            tmp_path,
            "--run-id",
            "r",
            "--json",
        ).exit_code
        == 0
    )
    result = cli("monitor", tmp_path, "--ignore", "loop_penalt", "--ignore", "loop_penalty", "--json")
    assert result.exit_code == 0, result.output
    assert "warning: --ignore 'loop_penalt' names no component of these records" in result.stderr
    assert "'loop_penalty'" not in result.stderr
