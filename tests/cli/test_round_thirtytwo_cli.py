"""Round thirty-two: the CLI and monitoring, as an adversary and as an RL engineer using them.

Each test failed before its fix (see docs/changelog.md, round thirty-two)."""

from __future__ import annotations

import json

from rewardpipe.monitoring import monitor_records
from tests.cli.test_round_thirtyone_monitoring import _record
from tests.monitoring.test_fast_path import write


def _many_mixed_groups(groups: int, tasks: int = 2) -> list[dict]:
    """One step of ``groups`` groups, each holding the rollouts of ``tasks`` tasks (set aside), and one good group."""
    out = [_record(0, "good", f"good-{i}", "t-good", float(i % 2), float(i % 2)) for i in range(4)]
    for g in range(groups):
        for t in range(tasks):
            out += [_record(0, f"g{g}", f"g{g}-t{t}-{i}", f"t{t}", 1.0, float(i % 2)) for i in range(2)]
    return out


#: rewardpipe.monitoring.statistics.MAX_LISTED
MAX_LISTED = 100


class TestSetAsideIsCappedInJson:
    """``set_aside`` in ``monitor --json`` and ``report --json`` (and the verdict an AWS check stores) listed every
    group set aside, each with every one of its tasks: a run of thousands of mixed-task groups made a JSON of
    megabytes. It now lists the first hundred groups (and tasks of one group), counts them all
    (``set_aside_count``, ``task_count``) and says how many are left out (``set_aside_left_out``)."""

    def test_the_result_lists_a_hundred_and_counts_them_all(self):
        from rewardpipe.monitoring import statistics

        assert statistics.MAX_LISTED == MAX_LISTED
        data = monitor_records(_many_mixed_groups(MAX_LISTED + 50)).to_dict()
        assert len(data["set_aside"]) == MAX_LISTED
        assert data["set_aside_count"] == MAX_LISTED + 50 and data["set_aside_left_out"] == 50
        assert data["steps"][0]["set_aside_groups"] == MAX_LISTED + 50  # the step's count is exact
        small = monitor_records(_many_mixed_groups(3)).to_dict()
        assert (len(small["set_aside"]), small["set_aside_count"], small["set_aside_left_out"]) == (3, 3, 0)

    def test_one_group_of_many_tasks_lists_a_hundred(self):
        data = monitor_records(_many_mixed_groups(1, tasks=MAX_LISTED + 7)).to_dict()
        (entry,) = data["set_aside"]
        assert len(entry["tasks"]) == MAX_LISTED and entry["task_count"] == MAX_LISTED + 7
        assert entry["records"] == 2 * (MAX_LISTED + 7)

    def test_monitor_and_report_json_and_page(self, tmp_path, cli):
        path = write(tmp_path / "records.jsonl", _many_mixed_groups(MAX_LISTED + 50))
        page = tmp_path / "report.html"
        for args in (["monitor", path, "--no-write-alarms", "--json"], ["report", path, "--out", page, "--json"]):
            result = cli(*args)
            assert result.exit_code == 0, result.output
            data = json.loads(result.stdout)
            assert len(data["set_aside"]) == MAX_LISTED, args[0]
            assert data["set_aside_count"] == MAX_LISTED + 50 and data["set_aside_left_out"] == 50
            assert f"{MAX_LISTED + 50 - 20} more group(s) like these" in result.stderr, args[0]
        assert f"… and {MAX_LISTED + 50 - 20} more group(s) set aside" in page.read_text()


class TestTheChartDrawsNamesAsTheyAre:
    """``run --plot`` (:func:`rewardpipe.monitoring.plots.plot_run`) handed component names and the run id to
    matplotlib as they were: text between two ``$`` is math to it, so a component named ``a$\\frac{$b`` failed the
    chart with a ValueError from its math parser, and one named ``$x$`` was drawn as another name (an italic x).
    Names are now drawn literally (every ``$`` escaped), on one line, control characters as escapes."""

    def test_names_matplotlib_would_read_as_math(self, tmp_path, monkeypatch):
        import matplotlib.pyplot as plt

        from rewardpipe.monitoring.plots import plot_run

        names = ["a$\\frac{$b", "$x$", "\x1b[2J\u202eback"]
        records = [
            {**_record(s, f"g{g}", f"r{s}-{g}-{i}", f"t{g}", 1.0, float(i % 2)), "run_id": "run$\\sqrt{$"}
            for s in range(2)
            for g in range(8)
            for i in range(4)
        ]
        for row in records:
            row["components"] = {name: 1.0 if k else row["components"]["correctness"] for k, name in enumerate(names)}
            row["weights"] = dict.fromkeys(names, 1.0)
            row["aggregate"] = sum(row["components"].values())
        figures = []
        closed = plt.close
        monkeypatch.setattr(plt, "close", lambda fig=None: (figures.append(fig), closed(fig)))
        plot_run(monitor_records(records), tmp_path / "chart.png")
        assert (tmp_path / "chart.png").stat().st_size > 0
        (figure,) = figures
        titles = [ax.get_title() for ax in figure.axes if ax.get_title()]
        assert sorted(titles) == sorted(["a\\$\\frac{\\$b", "\\$x\\$", "\\x1b[2J\\u202eback", "aggregate"])
        assert figure._suptitle.get_text().startswith("run run\\$\\sqrt{\\$: ")


class TestUnreadableIsCapped:
    """``monitor`` and ``report`` printed one stderr line per unreadable record and listed every one under
    ``unreadable`` in ``--json``: a file of another format (every line refused) printed and carried a million of
    them. They name the first twenty on stderr and list the first hundred in the JSON now, with the exact count
    (``unreadable_count``) and how many are left out (``unreadable_left_out``)."""

    def test_monitor_and_report(self, tmp_path, cli):
        good = [_record(0, f"g{g}", f"r{g}-{i}", f"t{g}", 1.0, float(i % 2)) for g in range(4) for i in range(4)]
        lines = [json.dumps(row) for row in good] + ['{"not": "a record"}'] * (MAX_LISTED + 30)
        path = tmp_path / "records.jsonl"
        path.write_text("\n".join(lines) + "\n")
        for args in (["monitor", path, "--no-write-alarms", "--json"], ["report", path, "--json"]):
            result = cli(*args)
            assert result.exit_code == 0, result.output
            data = json.loads(result.stdout)
            assert len(data["unreadable"]) == MAX_LISTED and data["unreadable"][0]["key"] == f"{path}:17"
            assert data["unreadable_count"] == MAX_LISTED + 30 and data["unreadable_left_out"] == 30
            named = [line for line in result.stderr.splitlines() if line.startswith("skipped unreadable record")]
            assert len(named) == 20 and named[0].startswith(f"skipped unreadable record {path}:17: ")
            assert f"skipped {MAX_LISTED + 30 - 20} more unreadable record(s)" in result.stderr


class TestAnExplainedErrorIsCut:
    """An ``explain_error`` quoting the model's answer in its message put the whole answer into the record's error
    (a 300,000-character answer: a 300 KB record, and the same text in ``score``'s summary source and every Nova
    answer naming it). Its message is cut to 2,000 characters now, with a note of its length, as a text metric
    is (a raised component's line is cut to 300)."""

    def test_score_keeps_a_cut_message(self, tmp_path, cli):
        reward_file = tmp_path / "quoting.py"
        reward_file.write_text(
            "from rewardpipe.models import ErrorInfo\n"
            "from rewardpipe.rewards.base import Component, Reward\n"
            "REWARD = Reward('quoting', (Component('main', 1.0, lambda completion: None),),\n"
            "    explain_error=lambda completion: {'kind': 'unparsable', 'message': 'cannot read ' + completion})\n"
        )
        answer = "\x1b[2J" + "A" * 300_000
        sample = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": answer}]}
        samples = tmp_path / "samples.jsonl"
        samples.write_text(json.dumps(sample) + "\n")
        result = cli("score", samples, "--reward", f"{reward_file}:REWARD", "--out", tmp_path / "store", "--json")
        (line,) = result.stdout.splitlines()
        error = json.loads(line)["error"]
        assert error["kind"] == "unparsable" and error["message"].startswith("cannot read \x1b[2JAAA")
        assert len(error["message"]) <= 2000 and error["message"].endswith("[cut: 300,016 characters]")
        (stored,) = (tmp_path / "store").rglob("runs/scored/step=0/**/line-1.json")
        assert stored.stat().st_size < 4000


class TestTasksValidateNamesEveryBadLine:
    """``tasks validate`` stopped at the first bad line of a task file (as a run must), so a file of many bad rows
    took one re-run per row to clean. It names every bad line now (file:line and field, a repeated task_id too),
    then says how many, and exits 1; a run still refuses the file at its first."""

    def test_every_bad_line_is_named(self, tmp_path, cli):
        from tests.cli.conftest import make_task, write_jsonl

        rows = [
            make_task("one"),
            make_task("bad\x1b[2J"),
            "not json",
            make_task("two", spec="not a list"),
            make_task("one"),
            make_task("three"),
        ]
        path = write_jsonl(tmp_path / "tasks.jsonl", rows)
        result = cli("tasks", "validate", path)
        assert result.exit_code == 1
        lines = result.stderr.splitlines()
        assert [line.split(": ", 2)[1].split(" ")[0] for line in lines[:4]] == [f"{path}:{n}" for n in (2, 3, 4, 5)]
        assert "field 'task_id'" in lines[0] and "\x1b" not in result.stderr
        assert "not valid JSON" in lines[1] and "field 'spec'" in lines[2]
        assert "duplicate task_id 'one' (first on line 1)" in lines[3]
        assert lines[4].endswith("4 bad line(s); no task was checked further")
