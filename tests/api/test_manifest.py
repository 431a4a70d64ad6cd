"""Run manifest v2: the environment, the reward's components (ranges, roles, weights) and the packages travel
with every run; a v1 manifest still reads, resumes, and gives the monitor the built-in's ranges and roles."""

from __future__ import annotations

import json

from rewardpipe.models import RunManifest
from rewardpipe.monitoring.thresholds import Thresholds, manifest_components, run_thresholds
from rewardpipe.store import LocalStore
from tests.cli.conftest import BUNDLED_TASKS

V1 = {
    "schema": "rewardpipe.run-manifest/v1",
    "run_id": "old",
    "command": "run",
    "configuration": {
        "policy": "scripted",
        "group_size": 2,
        "groups_per_step": 2,
        "max_turns": 6,
        "simulator": "rule",
        "seed": 0,
        "collapse_from_step": None,
    },
    "tasks_file": "t.jsonl",
    "tasks_sha256": "abc",
    "reward": "ask_before_coding",
    "weights": {"correctness": 1.0, "asked_before_coding": 0.6, "guessed_immediately": 0.4, "loop_penalty": 0.2},
    "versions": {"rewardpipe": "0.1.0", "python": "3.11.7"},
    "started_at": "2026-01-01T00:00:00+00:00",
    "finished_at": None,
    "steps": 2,
}


def test_a_v1_manifest_reads_and_stands_for_the_ask_before_coding_environment():
    manifest = RunManifest.model_validate(V1)
    assert manifest.components == {} and manifest.environment is None
    assert (
        manifest.environment_name == "ask_before_coding" and manifest.identity()["environment"] == "ask_before_coding"
    )
    assert manifest_components(V1)["loop_penalty"] == {"range": [-0.5, 0.0], "role": "penalty", "weight": 0.2}


def test_a_run_started_with_a_v1_manifest_resumes(cli, tmp_path):
    args = [
        "run",
        "--tasks",
        BUNDLED_TASKS,
        "--steps",
        1,
        "-k",
        2,
        "--groups-per-step",
        2,
        "--out",
        tmp_path,
        "--run-id",
        "old",
    ]
    assert cli(*args).exit_code == 0
    store = LocalStore(tmp_path)
    stored = store.get_json("runs/old/manifest.json")
    v1 = {k: v for k, v in stored.items() if k in V1}
    store.put_json("runs/old/manifest.json", {**v1, "schema": "rewardpipe.run-manifest/v1"})
    resumed = cli(*args[:4], 2, *args[5:], "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert LocalStore(tmp_path).get_json("runs/old/manifest.json")["schema"] == "rewardpipe.run-manifest/v2"
    other = cli(*args, "--resume", "--reward", "code_correctness")
    assert other.exit_code == 1 and "reward: 'ask_before_coding' -> 'code_correctness'" in other.stderr


def test_the_monitor_takes_ranges_and_roles_from_the_manifest_and_explicit_ranges_win(tmp_path):
    store = LocalStore(tmp_path)
    components = {
        "score": {"range": [0, 10], "role": "outcome", "weight": 1.0},
        "correctness": {"range": [0, 5], "role": "shaping", "weight": 1.0},
        "fine": {"range": [0, 1], "role": "penalty", "weight": -1.0},
    }
    manifest = {**V1, "schema": "rewardpipe.run-manifest/v2", "run_id": "new", "components": components}
    store.put_json("runs/new/manifest.json", manifest)
    thresholds = run_thresholds(
        Thresholds(range_overrides={"score": (0.0, 20.0)}, ranges={"score": (0.0, 20.0), "correctness": (0.0, 1.0)}),
        store,
        "new",
    )
    assert thresholds.ranges["score"] == (0.0, 20.0)  # --range wins
    assert thresholds.ranges["correctness"] == (0.0, 5.0)  # the declared range wins over the built-in default
    assert thresholds.outcome_components == ("score",) and thresholds.roles["fine"] == "penalty"
    assert run_thresholds(None, store, "absent") == Thresholds()  # no manifest: the defaults, as before


def test_a_penalty_never_firing_is_idle_by_role_and_anything_else_at_its_maximum_is_dead():
    th = Thresholds().with_components(
        {
            "pen": {"range": [0, 1], "role": "penalty"},
            "neg": {"range": [-1, 0], "role": "penalty"},
            "shape": {"range": [-1, 0], "role": "shaping"},
        }
    )
    assert th.is_idle_penalty("pen", "constant_at_minimum", (0.0, 1.0))  # 0 is where a (0, 1) penalty rests
    assert not th.is_idle_penalty("pen", "constant_at_maximum", (0.0, 1.0))  # always firing is not idle
    assert th.is_idle_penalty("neg", "constant_at_maximum", (-1.0, 0.0))
    assert not th.is_idle_penalty("shape", "constant_at_maximum", (-1.0, 0.0))  # declared shaping: dead
    assert Thresholds().is_idle_penalty("undeclared", "constant_at_maximum", (-1.0, 0.0))  # the range rule


def test_the_manifest_names_the_environment_reward_reference_and_components(cli, tmp_path):
    result = cli(
        "run",
        "--tasks",
        BUNDLED_TASKS,
        "--steps",
        1,
        "-k",
        2,
        "--groups-per-step",
        1,
        "--out",
        tmp_path,
        "--run-id",
        "m",
        "--reward",
        "rewardpipe.envs.ask_before_coding.reward:ASK_BEFORE_CODING",
        "--json",
    )
    assert result.exit_code == 0, result.output
    manifest = json.loads(result.stdout)["manifest"]
    assert manifest["schema"] == "rewardpipe.run-manifest/v2" and manifest["reward"] == "ask_before_coding"
    assert manifest["reward_reference"] == "rewardpipe.envs.ask_before_coding.reward:ASK_BEFORE_CODING"
    assert manifest["environment"] == "ask_before_coding" and manifest["environment_version"] == "1"
    assert (
        set(manifest["components"]) == {"correctness", "asked_before_coding", "guessed_immediately", "loop_penalty"}
        and manifest["packages"] == {}
    )
