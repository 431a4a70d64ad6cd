import json

from rewardpipe.store import LocalStore
from tests.cli.conftest import BUNDLED_TASKS, make_task, write_jsonl


def test_run_scores_every_rollout_and_stores_it_under_the_hive_layout(cli, tmp_path):
    out = tmp_path / "store"
    result = cli(
        "run",
        "--tasks",
        BUNDLED_TASKS,
        "--steps",
        2,
        "--group-size",
        4,
        "--groups-per-step",
        3,
        "--out",
        out,
        "--run-id",
        "r1",
        "--json",
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert [s["step"] for s in summary["steps"]] == [0, 1]
    store = LocalStore(out)
    assert store.list_steps("r1") == [0, 1]
    records = list(store.iter_records("r1"))
    assert len(records) == 2 * 3 * 4
    assert {len({r.rollout_id for r in records if r.group_id == g}) for g in {r.group_id for r in records}} == {4}
    errors = [(r.rollout_id, r.error) for r in records if r.status != "scored"]
    assert not errors, errors  # an innocent rollout never ends in an error: say which and why
    for record in records:
        expected = sum(record.weights[n] * v for n, v in record.components.items())
        assert abs(record.aggregate - expected) < 1e-9
    # the same job twice, with --overwrite, replaces the run instead of adding to it
    again = cli(
        "run",
        "--tasks",
        BUNDLED_TASKS,
        "--steps",
        2,
        "--group-size",
        4,
        "--groups-per-step",
        3,
        "--out",
        out,
        "--run-id",
        "r1",
        "--json",
        "--overwrite",
    )
    assert again.exit_code == 0, again.output
    assert len(list(store.iter_records("r1"))) == 2 * 3 * 4


def test_a_collapsed_policy_raises_dead_component_alarms_with_causes(cli, tmp_path):
    out = tmp_path / "store"
    result = cli(
        "run",
        "--tasks",
        BUNDLED_TASKS,
        "--steps",
        2,
        "--group-size",
        8,
        "--groups-per-step",
        6,
        "--collapse-from-step",
        1,
        "--out",
        out,
        "--run-id",
        "c",
        "--json",
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    healthy, collapsed = summary["steps"]
    assert healthy["components"]["asked_before_coding"]["verdict"] == "ok"
    assert collapsed["components"]["asked_before_coding"]["verdict"] == "dead"
    assert collapsed["components"]["guessed_immediately"]["cause"] == "constant_at_minimum"
    alarmed = {(a["component"], a["kind"], a["step"]) for a in summary["alarms"]}
    assert ("asked_before_coding", "dead_component", 1) in alarmed
    assert not any(step == 0 for _, _, step in alarmed)
    # alarms are also written as JSON beside the records
    alarm_keys = [k for k in LocalStore(out).list_keys("runs/c/") if "alarm" in k]
    assert any("asked_before_coding" in k for k in alarm_keys)


def test_replay_policy_reuses_recorded_turns_and_ids(cli, tmp_path):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [make_task()])
    code = "```python\ndef add(a, b):\n    return a + b\n```"
    rollouts = write_jsonl(
        tmp_path / "rollouts.jsonl",
        [
            {
                "rollout_id": "ask",
                "group_id": "g",
                "task_id": "add",
                "step": 5,
                "messages": [
                    {"role": "user", "content": "x"},
                    {"role": "assistant", "content": "Can negatives appear?"},
                    {"role": "user", "content": "(ignored: the simulator answers live)"},
                    {"role": "assistant", "content": code},
                ],
            },
            {
                "rollout_id": "guess",
                "group_id": "g",
                "task_id": "add",
                "step": 5,
                "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": code}],
            },
        ],
    )
    out = tmp_path / "store"
    result = cli(
        "run", "--tasks", tasks, "--policy", "replay", "--rollouts", rollouts, "--out", out, "--run-id", "rp", "--json"
    )
    assert result.exit_code == 0, result.output
    records = {r.rollout_id: r for r in LocalStore(out).iter_records("rp")}
    assert records["ask"].step == 5
    assert records["ask"].components["asked_before_coding"] == 1.0
    assert records["ask"].components["correctness"] == 1.0
    assert records["guess"].components["guessed_immediately"] == -1.0


def test_run_rejects_bad_configuration_clearly(cli, tmp_path):
    result = cli("run", "--tasks", BUNDLED_TASKS, "--policy", "openai", "--out", tmp_path)
    assert result.exit_code == 2 and "--base-url" in result.output
    result = cli("run", "--tasks", BUNDLED_TASKS, "--weight", "nonsense=1", "--out", tmp_path)
    assert result.exit_code == 2 and "no component(s) ['nonsense']" in result.output
    result = cli("run", "--tasks", BUNDLED_TASKS, "--weight", "correctness", "--out", tmp_path)
    assert result.exit_code == 2 and "NAME=NUMBER" in result.output
    assert not any(tmp_path.iterdir())  # a usage error writes nothing


def test_run_draws_the_variance_chart_when_asked(cli, tmp_path):
    chart = tmp_path / "charts" / "run.png"
    result = cli(
        "run",
        "--tasks",
        BUNDLED_TASKS,
        "--steps",
        2,
        "--group-size",
        2,
        "--groups-per-step",
        4,
        "--out",
        tmp_path / "store",
        "--run-id",
        "p",
        "--plot",
        chart,
        "--json",
    )
    assert result.exit_code == 0, result.output
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert chart.stat().st_size > 10_000  # a real figure, not an empty canvas


def test_plotting_an_empty_run_is_a_clear_error(tmp_path):
    import pytest

    from rewardpipe.monitoring import monitor_records
    from rewardpipe.monitoring.plots import plot_run

    with pytest.raises(ValueError, match="no steps"):
        plot_run(monitor_records([]), tmp_path / "x.png")


def test_overwriting_a_run_id_raises_its_alarms_again(cli, tmp_path):
    args = (
        "run",
        "--tasks",
        BUNDLED_TASKS,
        "--steps",
        2,
        "--group-size",
        8,
        "--groups-per-step",
        5,
        "--collapse-from-step",
        1,
        "--out",
        tmp_path,
        "--run-id",
        "again",
        "--json",
    )
    first = json.loads(cli(*args).output)
    second_result = cli(*args, "--overwrite")
    second = json.loads(second_result.stdout)

    # the conversation-driven alarms come back identically (correctness also depends on execution timing)
    def conversational(alarms):
        return [a for a in alarms if a["component"] in ("asked_before_coding", "guessed_immediately")]

    assert conversational(first["alarms"]) and conversational(second["alarms"]) == conversational(first["alarms"])
    assert all(alarm["examples"] for alarm in second["alarms"])
    assert not any(step["replayed"] for step in second["steps"])
    assert "\\u0000" not in second_result.output  # internal keys never leak into messages


def test_run_refuses_a_single_turn_reward(cli, tmp_path):
    result = cli("run", "--tasks", BUNDLED_TASKS, "--reward", "gsm8k", "--out", tmp_path)
    assert result.exit_code == 2
    assert "single-turn" in result.output and "ask_before_coding" in result.output


def test_a_chart_that_cannot_be_written_makes_the_exit_status_1(cli, tmp_path, monkeypatch):
    from rewardpipe.monitoring import plots

    def disk_full(result, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(plots, "plot_run", disk_full)
    result = cli(
        "run",
        "--tasks",
        BUNDLED_TASKS,
        "--out",
        tmp_path / "store",
        "--steps",
        "1",
        "-k",
        "2",
        "--groups-per-step",
        "2",
        "--plot",
        tmp_path / "chart.png",
        "--run-id",
        "p",
    )
    assert result.exit_code == 1, result.output
    assert "--plot: [Errno 28] No space left on device" in result.stderr
    assert list((tmp_path / "store" / "runs" / "p").glob("step=0/group=*/*.json"))  # the records are kept


def test_an_existing_output_file_that_cannot_be_written_is_a_usage_error(cli, tmp_path):
    import os

    import pytest

    if os.geteuid() == 0:
        pytest.skip("root can write any file, so a read-only file cannot be made here")
    chart = tmp_path / "chart.png"
    chart.write_bytes(b"")
    chart.chmod(0o444)
    result = cli("run", "--tasks", BUNDLED_TASKS, "--out", tmp_path / "store", "--plot", chart)
    assert result.exit_code == 2 and "cannot be written" in result.stderr
    assert not (tmp_path / "store").exists()


def test_a_step_is_stored_and_checked_while_the_next_step_is_played(cli, tmp_path, monkeypatch):
    """The sandbox must not wait for the store: step 0's records may only be written once step 1 has
    started playing. Without the overlap, step 1 never starts while step 0's write waits, and the write
    gives up (the run then fails this test)."""
    import threading

    from rewardpipe.policies import ScenarioMix

    step_one_playing = threading.Event()
    waited = []
    original_turn, original_put = ScenarioMix.next_turn, LocalStore.put_record

    def next_turn(self, state, task):
        if state.step == 1:
            step_one_playing.set()
        return original_turn(self, state, task)

    def put_record(self, record):
        if record.step == 0 and not waited:
            waited.append(step_one_playing.wait(timeout=20))
        return original_put(self, record)

    monkeypatch.setattr(ScenarioMix, "next_turn", next_turn)
    monkeypatch.setattr(LocalStore, "put_record", put_record)
    out = tmp_path / "store"
    result = cli(
        "run",
        "--tasks",
        BUNDLED_TASKS,
        "--steps",
        3,
        "--group-size",
        4,
        "--groups-per-step",
        2,
        "--out",
        out,
        "--run-id",
        "overlap",
        "--json",
    )
    assert result.exit_code == 0, result.output
    assert waited == [True]
    summary = json.loads(result.output)
    assert [s["step"] for s in summary["steps"]] == [0, 1, 2]  # checked in order all the same
    assert [s["records"] for s in summary["steps"]] == [8, 8, 8]
    assert len(list(LocalStore(out).iter_records("overlap"))) == 24
