"""Round twenty-nine: a new user's journeys (README and docs/ followed literally) and the mistakes on the way: a
rollouts file scored against the wrong task file, a module named where a reference was meant through the Python
API, and the store's paths as the commands print them."""

from __future__ import annotations

import json
import sys

import pytest

from rewardpipe.store import LocalStore
from tests.cli.conftest import BUNDLED_TASKS, make_task, write_jsonl

GOOD_CODE = "Here you go:\n```python\ndef add(a, b):\n    return a + b\n```"


def _rollout(rid: str, task_id: str) -> dict:
    return {
        "rollout_id": rid,
        "group_id": f"g-{task_id}",
        "task_id": task_id,
        "step": 0,
        "messages": [{"role": "user", "content": "combine"}, {"role": "assistant", "content": GOOD_CODE}],
    }


# (a) every rollout naming a task the task file does not hold: error records, and an exit status that says so


def test_score_against_the_wrong_task_file_reports_and_exits_1_keeping_the_error_records(cli, tmp_path):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [make_task("add")])
    rollouts = write_jsonl(tmp_path / "rollouts.jsonl", [_rollout("r0", "mul"), _rollout("r1", "[bold]sub")])
    out = tmp_path / "store"
    result = cli("score", rollouts, "--tasks", tasks, "--out", out, "--run-id", "r")
    assert result.exit_code == 1, result.output
    assert "2 rollout(s) name a task" in result.stderr and "'mul'" in result.stderr
    assert "'[bold]sub'" in result.stderr
    records = list(LocalStore(out).iter_records("r"))
    assert sorted(r.error.kind for r in records if r.error) == ["unknown_task", "unknown_task"]


def test_score_with_some_unknown_tasks_scores_the_rest_and_exits_1_like_a_bad_line(cli, tmp_path):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [make_task("add")])
    rollouts = write_jsonl(tmp_path / "rollouts.jsonl", [_rollout("ok", "add"), _rollout("orphan", "mul")])
    out = tmp_path / "store"
    result = cli("score", rollouts, "--tasks", tasks, "--out", out, "--run-id", "r", "--json")
    assert result.exit_code == 1
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert {line["rollout_id"]: line["status"] for line in lines} == {"ok": "scored", "orphan": "error"}
    assert "1 rollout(s) name a task" in result.stderr


def test_replaying_rollouts_of_tasks_not_in_the_task_file_exits_1(cli, tmp_path):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [make_task("add")])
    rollouts = write_jsonl(tmp_path / "rollouts.jsonl", [_rollout("r0", "mul")])
    out = tmp_path / "store"
    result = cli("run", "--policy", "replay", "--rollouts", rollouts, "--tasks", tasks, "--out", out, "--run-id", "r")
    assert result.exit_code == 1, result.output
    assert "name a task" in result.stderr and "'mul'" in result.stderr
    assert [r.error.kind for r in LocalStore(out).iter_records("r")] == ["unknown_task"]


# (b) the Python adapters name the reference a module stood for, as the CLI does

MODULE = """
from rewardpipe import Reward, component


@component(range=(0, 1), role="outcome")
def always(completion):
    return 1.0


STRICT = Reward("strict", [always])
"""


@pytest.fixture
def reward_module(tmp_path, monkeypatch):
    (tmp_path / "acme_rewards_r29.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "acme_rewards_r29"
    sys.modules.pop("acme_rewards_r29", None)


@pytest.mark.parametrize(
    "load",
    [
        lambda name: __import__("rewardpipe").load_reward(name),
        lambda name: __import__("rewardpipe.rewards", fromlist=["get_reward"]).get_reward(name),
        lambda name: __import__("rewardpipe.references", fromlist=["x"]).resolve_reward(name),
        lambda name: __import__("rewardpipe.integrations.trl", fromlist=["x"]).reward_functions(name),
        lambda name: __import__("rewardpipe.testing", fromlist=["x"]).score(name, completion="hi"),
    ],
    ids=["rewardpipe.load_reward", "rewards.get_reward", "resolve_reward", "trl.reward_functions", "testing.score"],
)
def test_a_module_named_as_a_reward_through_the_python_api_names_the_reference(reward_module, load):
    from rewardpipe.references import ReferenceProblem

    with pytest.raises(ReferenceProblem) as caught:
        load(reward_module)
    assert f"{reward_module}:STRICT" in str(caught.value) and "is a module" in str(caught.value)
    with pytest.raises(ReferenceProblem, match="dotted path"):
        load(f"{reward_module}.STRICT")


def test_the_python_environment_loader_names_the_reference_a_module_stood_for(tmp_path, monkeypatch):
    from rewardpipe import load_environment
    from rewardpipe.references import ReferenceProblem

    (tmp_path / "acme_env_r29.py").write_text("from rewardpipe.envs.wordle import ENVIRONMENT\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(ReferenceProblem, match="acme_env_r29:ENVIRONMENT"):
            load_environment("acme_env_r29")
    finally:
        sys.modules.pop("acme_env_r29", None)


def test_the_cli_keeps_its_hint_and_its_import(reward_module, cli, tmp_path):
    from rewardpipe.cli import common
    from rewardpipe.references import meant_reference

    assert common.meant_reference is meant_reference
    samples = write_jsonl(tmp_path / "s.jsonl", [{"id": "a", "messages": [{"role": "assistant", "content": "x"}]}])
    result = cli("score", samples, "--reward", reward_module, "--out", tmp_path / "store")
    assert result.exit_code == 2 and f"--reward '{reward_module}' is a module" in result.stderr


# (c) the store's location plus a key: one spelling (Store.path_of), and the run summary names the real folder


def _small_run(cli, out, run_id):
    small = ["--steps", "1", "--group-size", "2", "--groups-per-step", "1"]
    return cli("run", *small, "--tasks", BUNDLED_TASKS, "--out", out, "--run-id", run_id)


def test_the_run_summary_names_the_folder_the_records_are_in_for_a_run_id_that_is_encoded(cli, tmp_path):
    from rewardpipe.store import run_prefix

    out = tmp_path / "store"
    result = _small_run(cli, out, "exp 1")
    assert result.exit_code == 0, result.output
    said = " ".join(result.stdout.split("records and alarms written under", 1)[1].split())
    assert said.startswith(f"{out}/{run_prefix('exp 1')}") and (out / run_prefix("exp 1")).is_dir()
    assert not (out / "runs" / "exp 1").exists()


def test_a_store_names_its_objects_one_way_and_reads_the_names_back(tmp_path):
    from rewardpipe.monitoring import ConsoleAlarmSink
    from rewardpipe.store import S3Store, open_store

    local = open_store(tmp_path / "s")
    key = "runs/r/transcripts/step-0/g/a.json"
    assert local.path_of(key) == f"{tmp_path / 's'}/{key}"
    assert local.key_of(local.path_of(key)) == key and local.key_of(f"{tmp_path}/other/{key}") is None
    s3 = S3Store("bucket", "pre/", client=object())
    assert s3.path_of(key) == f"s3://bucket/pre/{key}" and s3.key_of(f"s3://bucket/pre/{key}") == key
    assert ConsoleAlarmSink(object(), s3.location).transcript_at(key) == s3.path_of(key)
    assert ConsoleAlarmSink(object(), local.location + "/").transcript_at(key) == local.path_of(key)


def test_show_key_accepts_the_path_an_alarm_printed(cli, tmp_path):
    out = tmp_path / "store"
    assert _small_run(cli, out, "r").exit_code == 0
    from rewardpipe.store import open_store

    store = open_store(out)
    (key,) = [k for k in store.list_keys("runs/r/transcripts/")][:1]
    shown = cli("show", out, "--key", store.path_of(key), "--json")
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["rollout_id"]


# show: a store path that is not there, and a run the store does not hold, said as monitor and report say them


def test_show_of_a_missing_store_says_not_found_not_that_it_holds_no_runs(cli, tmp_path):
    result = cli("show", tmp_path / "nostore", "--rollout", "r1")
    assert result.exit_code == 1 and "not found" in result.stderr and "holds no runs" not in result.stderr
    assert not (tmp_path / "nostore").exists()


def test_show_of_a_run_the_store_does_not_hold_lists_its_runs(cli, tmp_path):
    out = tmp_path / "store"
    assert _small_run(cli, out, "exp 1").exit_code == 0
    result = cli("show", out, "--run-id", "exp 2", "--rollout", "r1")
    assert result.exit_code == 1 and "run 'exp 2' not found" in result.stderr and "(runs: exp 1)" in result.stderr
    monitor = cli("monitor", out, "--run-id", "exp 2")
    assert "run 'exp 2' not found" in monitor.stderr


# doctor and run: a reward of single-turn samples, given with the samples file as --tasks, is said to be one


@pytest.mark.parametrize("command", [["doctor"], ["run", "--steps", "1", "--out", "store"]])
def test_a_single_turn_reward_given_to_doctor_or_run_is_said_to_be_one_before_the_task_rows(
    cli, tmp_path, monkeypatch, command
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_reward_r29.py").write_text(MODULE.replace("completion):", "completion, reference):"))
    samples = write_jsonl(
        tmp_path / "samples.jsonl",
        [{"rollout_id": "r1", "group_id": "g", "reference": "42", "messages": [{"role": "user", "content": "?"}]}],
    )
    result = cli(*command, "--tasks", samples, "--reward", f"{tmp_path}/my_reward_r29.py:STRICT")
    assert result.exit_code == 2, result.output
    assert "scores single-turn samples" in result.stderr and "missing required field" not in result.stderr


# an output file that is one of the command's inputs: refused before anything is read or written


def test_an_output_file_that_is_an_input_is_refused_before_it_is_overwritten(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    records = tmp_path / "records.jsonl"
    assert cli("score", _samples(tmp_path), "--reward", "gsm8k", "--out", "store", "--json").exit_code == 0
    records.write_text(cli("score", "samples.jsonl", "--reward", "gsm8k", "--out", "s2", "--json").stdout)
    humaneval = write_jsonl(
        tmp_path / "he.jsonl",
        [
            {
                "task_id": "HumanEval/0",
                "prompt": 'def add(a, b):\n    """Add two numbers. Return the sum."""\n',
                "entry_point": "add",
                "canonical_solution": "    return a + b\n",
                "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
            }
        ],
    )
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [make_task("add")])
    rollouts = write_jsonl(tmp_path / "rollouts.jsonl", [_rollout("r0", "add")])
    kept = {p: p.read_bytes() for p in (records, humaneval, tasks, rollouts)}
    for command in (
        ["report", records, "--out", "./records.jsonl"],
        ["tasks", "import-humaneval", humaneval, "--out", humaneval],
        ["score", rollouts, "--tasks", tasks, "--out", "s3", "--spill", rollouts],
        ["run", "--tasks", tasks, "--steps", "1", "--out", "s4", "--spill", tasks],
        ["run", "--policy", "replay", "--rollouts", rollouts, "--tasks", tasks, "--out", "s5", "--spill", rollouts],
    ):
        result = cli(*command)
        assert result.exit_code == 2 and "is the input file" in result.stderr, (command, result.output)
    assert {p: p.read_bytes() for p in kept} == kept
    assert not any((tmp_path / name).exists() for name in ("s3", "s4", "s5"))


def _samples(tmp_path):
    rows = [
        {
            "rollout_id": f"r{i}",
            "group_id": "g",
            "reference": "4",
            "messages": [{"role": "assistant", "content": "#### 4"}],
        }
        for i in range(2)
    ]
    return write_jsonl(tmp_path / "samples.jsonl", rows)


# report: a comparison of a run with itself (a --run-id given once too often, a PATH twice) is refused


def test_report_refuses_to_compare_a_run_with_itself(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    samples = _samples(tmp_path)
    for run in ("a", "b"):
        assert cli("score", samples, "--reward", "gsm8k", "--out", "st", "--run-id", run).exit_code == 0
    for command in (
        ["st", "--run-id", "a", "--run-id", "a"],
        ["st", "./st/", "--run-id", "b"],
        ["st", str(tmp_path / "st"), "--run-id", "a", "--run-id", "a"],
    ):
        result = cli("report", *command, "--out", "c.html")
        assert result.exit_code == 2 and "both sides of the comparison are run" in result.stderr, command
    assert not (tmp_path / "c.html").exists()
    assert cli("report", "st", "--run-id", "a", "--run-id", "b", "--out", "c.html").exit_code == 0


def test_report_exits_1_when_the_store_refuses_its_triage_file_after_writing_the_page(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli("score", _samples(tmp_path), "--reward", "gsm8k", "--out", "st", "--run-id", "a").exit_code == 0
    (tmp_path / "st" / "runs" / "a" / "triage.jsonl").mkdir()  # a folder where the file must go
    result = cli("report", "st", "--out", "c.html")
    assert result.exit_code == 1 and "triage.jsonl not written" in result.stderr
    assert "could not write the triage.jsonl of run 'a'" in result.stderr and (tmp_path / "c.html").is_file()
    assert cli("report", "st", "--out", "c.html", "--no-triage-file").exit_code == 0


# rewardpipe.testing.check_reward: a sample key it does not know (a typo) is refused, not dropped


def test_check_reward_refuses_a_sample_key_it_would_drop(reward_module):
    from rewardpipe.testing import check_reward

    with pytest.raises(ValueError, match=r"sample 1: unknown key\(s\) 'refrence'"):
        check_reward(
            f"{reward_module}:STRICT",
            [{"completion": "a", "reference": "1"}, {"completion": "b", "refrence": "1"}],
            require_variation=False,
        )
    # a line of a samples file, ids and all, is a sample as it is
    row = {"rollout_id": "r1", "group_id": "g", "task_id": "t", "step": 0, "reference": "4"}
    check_reward(
        f"{reward_module}:STRICT",
        [{**row, "messages": [{"role": "assistant", "content": "4"}]}],
        require_variation=False,
    )


# score: --tasks given with a single-turn reward that reads no task made every sample an unknown_task error


def test_score_refuses_a_task_file_a_single_turn_reward_does_not_read(cli, tmp_path):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [make_task("add")])
    result = cli("score", _samples(tmp_path), "--reward", "gsm8k", "--tasks", tasks, "--out", tmp_path / "st")
    assert result.exit_code == 2 and "reads no task" in result.stderr and "leave it out" in result.stderr
    assert not (tmp_path / "st").exists()


# show --key with --rollout, --run-id or --step saying otherwise: they were ignored without a word


def test_show_key_refuses_an_option_that_contradicts_the_transcript_it_names(cli, tmp_path):
    out = tmp_path / "store"
    assert _small_run(cli, out, "r").exit_code == 0
    from rewardpipe.store import open_store

    key = open_store(out).list_keys("runs/r/transcripts/")[0]
    rollout = key.rsplit("/", 1)[1].removesuffix(".json")
    assert cli("show", out, "--key", key, "--run-id", "r", "--rollout", rollout, "--step", "0").exit_code == 0
    for option in (["--rollout", "other"], ["--run-id", "other"], ["--step", "1"]):
        result = cli("show", out, "--key", key, *option)
        assert result.exit_code == 2 and f"{option[0]} " in result.stderr and "contradicts --key" in result.stderr
