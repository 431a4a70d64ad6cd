"""Round thirty-one: a new user's journeys (README and docs/ followed literally): a run whose every group holds
one rollout (GRPO compares nothing in it, so the monitor can never judge it) is warned about by name."""

from __future__ import annotations

import json

from rewardpipe.models import Record
from tests.cli.conftest import BUNDLED_TASKS, write_jsonl


def _row(step: int, g: int, k: int, value: float) -> dict:
    """One scored record of run 'run' (group g, rollout k at ``step``) as its JSON."""
    ids = {"run_id": "run", "step": step, "group_id": f"g{g}", "rollout_id": f"s{step}-g{g}-k{k}", "task_id": f"t{g}"}
    record = Record(
        **ids, status="scored", weights={"found": 1.0}, components={"found": value}, aggregate=value
    )  # fmt: skip
    return record.model_dump(mode="json", by_alias=True)


# a run of groups of one rollout: every verdict insufficient_data for ever, and now a warning that says why


def _run(cli, tmp_path, run_id: str, group_size: int, groups: int, *extra: str):
    """`rewardpipe run` of the bundled tasks, scripted: two steps of `groups` groups of `group_size` rollouts."""
    return cli(
        "run", "--tasks", BUNDLED_TASKS, "--steps", "2", "--group-size", group_size, "--groups-per-step", groups,
        "--out", tmp_path / "store", "--run-id", run_id, *extra,
    )  # fmt: skip


def test_run_with_group_size_one_warns_that_no_group_can_be_judged(cli, tmp_path):
    result = _run(cli, tmp_path, "k1", 1, 4)
    assert result.exit_code == 0, result.output
    text = " ".join(result.stderr.split())
    assert "warning: single_rollout_groups" in text, result.output
    assert "8 rollouts in 8 groups" in text and "--group-size" in text
    # the verdicts themselves keep the documented rule
    assert "insufficient_data" in result.stdout
    # the same run in JSON carries the warning by name
    data = json.loads(_run(cli, tmp_path, "k1j", 1, 2, "--json").stdout.splitlines()[-1])
    assert [w["kind"] for w in data["warnings"]] == ["single_rollout_groups"]


def test_run_with_groups_of_two_has_no_such_warning(cli, tmp_path):
    result = _run(cli, tmp_path, "k2", 2, 2)
    assert result.exit_code == 0, result.output
    assert "single_rollout_groups" not in result.output


def test_monitor_of_records_with_one_rollout_per_group_warns(cli, tmp_path):
    rows = [_row(step, g, 0, float(g % 2)) for step in range(3) for g in range(6)]
    path = write_jsonl(tmp_path / "records.jsonl", rows)
    result = cli("monitor", path)
    assert result.exit_code == 0, result.output
    text = " ".join(result.stderr.split())
    assert "warning: single_rollout_groups" in text and "18 rollouts in 18 groups over 3 steps" in text
    data = json.loads(cli("monitor", path, "--json").stdout)
    assert [w["kind"] for w in data["warnings"]] == ["single_rollout_groups"]
    # one group of two rollouts anywhere in the run: GRPO compares something, no such warning
    both = write_jsonl(tmp_path / "two.jsonl", [*rows, _row(2, 0, 1, 1.0)])
    assert "single_rollout_groups" not in cli("monitor", both).output
    assert json.loads(cli("monitor", both, "--json").stdout)["warnings"] == []


# `score` of recordings some of which the environment cannot replay: reported, and the exit status says so


def test_score_whose_some_rollouts_fail_replay_names_them_and_exits_1(cli, tmp_path):
    from rewardpipe.envs.wordle.environment import POLICY_SYSTEM_PROMPT
    from rewardpipe.store import LocalStore
    from tests.cli.test_round_thirty_journeys import _wordle_rollouts

    system = [{"role": "system", "content": POLICY_SYSTEM_PROMPT}]
    path = write_jsonl(tmp_path / "mixed.jsonl", _wordle_rollouts([], system, [], system))
    tasks = BUNDLED_TASKS.parent / "wordle_tasks.jsonl"
    out = tmp_path / "m"
    result = cli("score", path, "--env", "wordle", "--tasks", tasks, "--out", out, "--run-id", "r")
    assert result.exit_code == 1, result.output
    text = " ".join(result.stderr.split())
    assert "2 of 4 recorded rollout(s) could not be replayed through environment 'wordle'" in text, result.output
    assert "'r1', 'r3'" in text and "system message" in result.stdout  # the summary's example
    assert "no rollout was scored" not in text  # two were: the run measured something, and says what it lost
    kinds = sorted(str(r.error.kind) if r.error else r.status for r in LocalStore(out).iter_records("r"))
    assert kinds == ["replay_failed", "replay_failed", "scored", "scored"]  # kept, as before
    # every recording replayed: exit 0, as before
    clean = write_jsonl(tmp_path / "clean.jsonl", _wordle_rollouts([], []))
    assert cli("score", clean, "--env", "wordle", "--tasks", tasks, "--out", tmp_path / "c").exit_code == 0


# `report` of such a run: the page said "Every task gives every component some signal" over no group of two


def _page_text(path) -> str:
    import html
    import re

    page = re.sub(r"<style.*?</style>", "", path.read_text(), flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def test_report_of_one_rollout_groups_warns_and_claims_no_signal(cli, tmp_path):
    rows = [_row(step, g, 0, float(g % 2)) for step in range(2) for g in range(6)]
    path = write_jsonl(tmp_path / "records.jsonl", rows)
    result = cli("report", path, "--out", tmp_path / "r.html")
    assert result.exit_code == 0, result.output
    assert "warning: single_rollout_groups" in result.stderr
    text = _page_text(tmp_path / "r.html")
    assert "Every task gives every component some signal" not in text
    assert "single_rollout_groups" in text and "0 of 6 tasks" in text
    data = json.loads(cli("report", path, "--json").stdout)
    assert [w["kind"] for w in data["warnings"]] == ["single_rollout_groups"] and data["triage_tasks_judged"] == 0


def test_report_says_which_tasks_triage_could_judge(cli, tmp_path):
    # task t0 has a group of two varying rollouts; t1..t5 one rollout a group: only t0 is judged
    rows = [_row(0, g, 0, float(g % 2)) for g in range(6)] + [_row(0, 0, 1, 1.0)]
    path = write_jsonl(tmp_path / "records.jsonl", rows)
    assert cli("report", path, "--out", tmp_path / "r.html").exit_code == 0
    text = _page_text(tmp_path / "r.html")
    assert "Every task gives every component some signal" not in text and "1 of 6 tasks" in text
    # every task judged: the sentence as before
    full = [_row(0, g, k, float(k)) for g in range(4) for k in range(2)]
    assert cli("report", write_jsonl(tmp_path / "f.jsonl", full), "--out", tmp_path / "f.html").exit_code == 0
    assert "Every task gives every component some signal" in _page_text(tmp_path / "f.html")
