"""Issue 21 item 7: long commands show a progress bar on stderr when, and only when, stderr is a terminal.

Each command runs as a real process with its stderr on a pseudo-terminal (the pty module), then again with
stderr piped: the bar (Rich hides the cursor while it draws, and names what it counts) appears on the
terminal only, never with ``--json`` nor on a pipe, and stdout is byte for byte the same either way.
Model-written text (here terminal escape sequences in the rollouts) never reaches the bar."""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.cli.conftest import BUNDLED_TASKS, write_jsonl

CLI = [sys.executable, "-c", "import sys; from rewardpipe.cli import app; app(sys.argv[1:])"]
HIDE_CURSOR = b"\x1b[?25l"  # Rich's Live hides the cursor while a bar is drawn
HOSTILE = "\x1b]0;PWNED\x07\x1b[2J\x1b[31mRED-MODEL-TEXT"
ENV = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}
for variable in ("NO_COLOR", "FORCE_COLOR", "TTY_INTERACTIVE", "TTY_COMPATIBLE", "CI"):
    ENV.pop(variable, None)


def _drain(fd: int, into: bytearray) -> None:
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: every writer of the terminal has gone
            return
        if not chunk:
            return
        into.extend(chunk)


def invoke(*args, tty: bool) -> tuple[int, bytes, bytes]:
    """(exit code, stdout, stderr) of ``rewardpipe ARGS``; stdout is always a pipe, stderr a terminal when ``tty``."""
    argv = CLI + [str(a) for a in args]
    if not tty:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, env=ENV, timeout=300)
        return proc.returncode, proc.stdout, proc.stderr
    master, slave = pty.openpty()
    err = bytearray()
    reader = threading.Thread(target=_drain, args=(master, err), daemon=True)
    reader.start()
    try:
        proc = subprocess.run(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, env=ENV, timeout=300
        )
    finally:
        os.close(slave)
    reader.join(30)
    os.close(master)
    return proc.returncode, proc.stdout, bytes(err)


def both(*args, tidy=lambda out: out) -> tuple[bytes, bytes]:
    """The stderr of ARGS on a terminal and on a pipe, after checking they exit alike and print the same
    stdout (``tidy`` blanks what differs from one execution to the next: timings, the sandbox's uid)."""
    code_tty, out_tty, err_tty = invoke(*args, tty=True)
    code_pipe, out_pipe, err_pipe = invoke(*args, tty=False)
    assert code_tty == code_pipe, (code_tty, code_pipe, err_tty[-2000:], err_pipe[-2000:])
    assert tidy(out_tty) == tidy(out_pipe)
    return err_tty, err_pipe


def drew(err: bytes, description: bytes) -> bool:
    return HIDE_CURSOR in err and description in err


def no_bar(err: bytes) -> bool:
    return HIDE_CURSOR not in err and b"\x1b[2K" not in err  # no cursor hidden, no line cleared for a redraw


@pytest.fixture(scope="module")
def rollouts(tmp_path_factory) -> Path:
    """Recorded rollouts whose model turns carry terminal escape sequences."""
    here = tmp_path_factory.mktemp("rollouts")
    task = json.loads(BUNDLED_TASKS.read_text().splitlines()[0])
    rows = [
        {
            "rollout_id": f"r{i}",
            "group_id": f"g{i // 4}",
            "task_id": task["task_id"],
            "step": i // 8,
            "messages": [
                {"role": "user", "content": HOSTILE},
                {"role": "assistant", "content": f"{HOSTILE}\n```python\nx = {i}\n```"},
            ],
        }
        for i in range(16)
    ]
    return write_jsonl(here / "rollouts.jsonl", rows)


@pytest.fixture(scope="module")
def store(tmp_path_factory, rollouts) -> Path:
    out = tmp_path_factory.mktemp("store")
    code, _, err = invoke("score", rollouts, "--tasks", BUNDLED_TASKS, "--out", out, "--run-id", "s", tty=False)
    assert code == 0, err
    return out


def test_score_draws_a_bar_on_a_terminal_only_and_no_model_text_reaches_it(tmp_path, rollouts):
    out = tmp_path / "out"

    def fresh(tty: bool):
        shutil.rmtree(out, ignore_errors=True)
        return invoke("score", rollouts, "--tasks", BUNDLED_TASKS, "--out", out, "--run-id", "s", tty=tty)

    code_tty, out_tty, err_tty = fresh(True)
    code_pipe, out_pipe, err_pipe = fresh(False)
    assert code_tty == code_pipe == 0 and out_tty == out_pipe and b"scored 16" in out_tty
    assert drew(err_tty, b"scoring") and no_bar(err_pipe)
    for text in (b"PWNED", b"RED-MODEL-TEXT", b"\x1b]0;", b"\x1b[2J"):  # the model's text, raw or in part
        assert text not in err_tty


def test_score_json_draws_nothing_even_on_a_terminal(tmp_path, rollouts):
    out = tmp_path / "out"
    results = []
    for tty in (True, False):
        shutil.rmtree(out, ignore_errors=True)
        results.append(
            invoke("score", rollouts, "--tasks", BUNDLED_TASKS, "--out", out, "--run-id", "s", "--json", tty=tty)
        )
    (code_tty, out_tty, err_tty), (code_pipe, out_pipe, _) = results
    assert code_tty == code_pipe == 0 and no_bar(err_tty)
    assert [json.loads(line)["rollout_id"] for line in out_tty.splitlines()] == [
        json.loads(line)["rollout_id"] for line in out_pipe.splitlines()
    ]
    assert len(out_tty.splitlines()) == 16


@pytest.mark.parametrize("as_json", [False, True])
def test_monitor_reads_a_store_under_a_bar(store, as_json):
    err_tty, err_pipe = both("monitor", store, "--no-write-alarms", *(["--json"] if as_json else []))
    assert no_bar(err_pipe)
    assert no_bar(err_tty) if as_json else drew(err_tty, b"reading records")


def test_monitor_of_a_jsonl_file_and_the_careful_path_draw_a_bar_too(store, tmp_path):
    records = tmp_path / "records.jsonl"
    lines = [path.read_text().strip() for path in sorted((store / "runs" / "s").rglob("step=*/group=*/*.json"))]
    records.write_text("\n".join([*lines, "{not json"]) + "\n")  # a bad line: the careful path, counted
    err_tty, err_pipe = both("monitor", records)
    assert drew(err_tty, b"reading records") and no_bar(err_pipe)


def test_report_draws_a_bar_on_a_terminal_and_none_with_json(store, tmp_path):
    err_tty, err_pipe = both("report", store, "--json", "--no-triage-file")
    assert no_bar(err_tty) and no_bar(err_pipe)
    page = tmp_path / "report.html"
    err_tty, err_pipe = both("report", store, "--out", page, "--no-triage-file")
    assert drew(err_tty, b"reading records") and no_bar(err_pipe)


GOOD_JOB = {
    "code": "def add(a, b):\n    return a + b\n",
    "entry_point": "add",
    "tests": "import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n"
    "        self.assertEqual(add(1, 2), 3)\n",
}


def test_exec_batch_draws_a_bar_when_its_verdicts_go_to_a_pipe(tmp_path):
    hostile = {**GOOD_JOB, "code": f"# {HOSTILE}\nprint({HOSTILE!r})\n" + GOOD_JOB["code"]}
    batch = write_jsonl(tmp_path / "jobs.jsonl", [{**hostile, "id": f"job-{i}"} for i in range(6)])
    err_tty, err_pipe = both("exec", "--batch", batch, tidy=lambda out: re.sub(rb"[0-9.]+ ms", b"ms", out))
    assert drew(err_tty, b"running jobs") and no_bar(err_pipe)
    assert b"PWNED" not in err_tty and b"\x1b[2J" not in err_tty
    err_tty, _ = both("exec", "--batch", batch, "--json", tidy=lambda out: re.sub(rb"[0-9.]+", b"N", out))
    assert no_bar(err_tty)


def test_run_draws_a_bar_per_step_on_a_terminal_and_none_with_json(tmp_path):
    from rewardpipe.envs.wordle import BUNDLED_TASKS as WORDLE_TASKS

    out = tmp_path / "out"
    for as_json in (False, True):
        runs = []
        for tty in (True, False):
            shutil.rmtree(out, ignore_errors=True)
            runs.append(
                invoke(
                    "run",
                    "--env",
                    "wordle",
                    "--tasks",
                    WORDLE_TASKS,
                    "--steps",
                    2,
                    "--group-size",
                    4,
                    "--groups-per-step",
                    2,
                    "--out",
                    out,
                    "--run-id",
                    "w",
                    *(["--json"] if as_json else []),
                    tty=tty,
                )
            )
        (code_tty, out_tty, err_tty), (code_pipe, out_pipe, err_pipe) = runs
        assert code_tty == code_pipe == 0, err_tty[-2000:]
        assert no_bar(err_pipe)
        if as_json:
            assert no_bar(err_tty)
            assert json.loads(out_tty)["run_id"] == json.loads(out_pipe)["run_id"] == "w"
        else:
            assert drew(err_tty, b"step 0") and out_tty == out_pipe


def test_a_description_is_plain_text_whatever_it_is_given():
    from rewardpipe.cli.progress import Bars

    class Recorder:
        def __init__(self):
            self.calls = []

        def add_task(self, description, total=None):
            self.calls.append(description)
            return 1

        def update(self, task, **fields):
            self.calls.append(fields.get("description"))

    recorder = Recorder()
    bars = Bars(recorder)
    bars.add_task(f"step 1 {HOSTILE}", total=3)
    bars.update(1, description=f"[bold]{HOSTILE}[/bold]")
    assert all("\x1b" not in call and "\x07" not in call for call in recorder.calls)
    assert "[bold]" in recorder.calls[1]  # shown as itself: the bar's text column interprets no markup


def test_the_cli_imports_no_progress_bar_until_one_is_drawn():
    probe = (
        "import sys\nfrom rewardpipe.cli import app\ntry:\n    app(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('rich.progress', 'rich.live') if m in sys.modules), file=sys.stderr)"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, env=ENV, timeout=120)
    assert proc.stderr.decode().strip().splitlines()[-1] == "[]", proc.stderr[-2000:]
