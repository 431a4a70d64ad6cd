"""Round thirty-four, the CLI and doctor: exit codes a script can tell apart, a closed pipe under a table, `show`
bounded and inert, and doctor calling every hook of the environment protocol.

Each test failed before its fix (see docs/changelog.md, round thirty-four)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rewardpipe.models import ErrorInfo, Message
from rewardpipe.store import LocalStore
from rewardpipe.transcripts import RolloutTranscript, Verdict
from tests.cli.conftest import BUNDLED_TASKS, write_jsonl

ROOT = Path(__file__).resolve().parents[2]
ANIMALS = ROOT / "examples" / "your_own_environment"


def _dead_component_records(tmp_path: Path) -> Path:
    from tests.cli.test_round_thirtythree_cli import _records

    return write_jsonl(tmp_path / "records.jsonl", _records(c_varies=False))


class TestExitCodes:
    """`monitor --fail-on-alarm` exits 2 on an alarm, as the CLI's published interface says, and click exits 2 on a
    usage error (a mistyped option): a CI gate tells them apart by stdout, which a usage error leaves empty."""

    def test_an_alarm_and_a_usage_error_are_told_apart_by_stdout(self, cli, tmp_path):
        from rewardpipe.cli.application import ALARM_EXIT, USAGE_ERROR

        records = _dead_component_records(tmp_path)
        alarm = cli("monitor", records, "--fail-on-alarm", "--json")
        usage = cli("monitor", records, "--fail-on-alarms")  # a typo
        assert usage.exit_code == USAGE_ERROR == 2 and usage.stdout == ""
        assert alarm.exit_code == ALARM_EXIT == 2, alarm.output
        assert any(a["kind"] == "dead_component" for a in json.loads(alarm.stdout)["alarms"])
        table = cli("monitor", records, "--fail-on-alarm")
        assert table.exit_code == ALARM_EXIT and "dead" in table.stdout

    def test_the_documented_exit_codes_are_the_commands(self):
        from rewardpipe.cli import application

        table = (ROOT / "docs/reference/inputs.md").read_text()
        usage_row = next(line for line in table.splitlines() if line.startswith(f"| {application.ALARM_EXIT} |"))
        assert "--fail-on-alarm" in usage_row and "nothing on stdout" in usage_row


def _closed_pipe_run(*args: object) -> subprocess.CompletedProcess:
    """``rewardpipe ARGS`` with stdout a pipe nobody reads any more (``| head`` already gone)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", "rewardpipe", *map(str, args)],
            stdout=write,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=300,
            check=False,
        )
    finally:
        os.close(write)


class TestTablesToAClosedPipe:
    """Rich's console ends the program itself (SystemExit 1) when its output's reader is gone: every command
    printing a table or a Rich line (`envs`, `monitor`, `run`, `show`, `tasks`) stopped without a word, where the
    rest say what happened and what was kept (`run`'s `--resume` command)."""

    @staticmethod
    @pytest.fixture(scope="class")
    def store(tmp_path_factory):
        out = tmp_path_factory.mktemp("pipe") / "store"
        args = ["run", "--tasks", BUNDLED_TASKS, "--out", out, "--run-id", "r", "--steps", "1", "-k", "2"]
        done = subprocess.run(
            [sys.executable, "-m", "rewardpipe", *map(str, args)],
            capture_output=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return out

    @pytest.mark.parametrize(
        "command",
        [
            ["envs"],
            ["monitor", "{store}"],
            ["show", "{store}", "--key", "{key}"],
            ["tasks", "validate", BUNDLED_TASKS],
        ],
    )
    def test_a_table_to_a_closed_pipe_is_said_so(self, store, command):
        key = LocalStore(store).list_keys("runs/r/transcripts/")[0]
        args = [str(part).format(store=store, key=key) for part in command]
        done = _closed_pipe_run(*args)
        err = done.stderr.decode()
        assert done.returncode == 1, err
        assert "the reader of the output closed it" in err, err
        assert "Traceback" not in err and "Exception ignored" not in err, err

    def test_a_finished_run_to_a_closed_pipe_says_it_is_complete(self, tmp_path):
        out = tmp_path / "store"
        done = _closed_pipe_run(
            "run", "--tasks", BUNDLED_TASKS, "--out", out, "--run-id", "p", "--steps", "1", "-k", "2"
        )
        err = done.stderr.decode()
        assert done.returncode == 1, err
        assert "the reader of the output closed it" in err and "Traceback" not in err, err
        # every record was stored before the table: nothing to --resume (it was offered)
        assert "run 'p' is complete" in err and "--resume" not in err, err


HOSTILE = "\x1b[2J\x1b]8;;http://evil\x07x\x1b]8;;\x07 [bold red]fake[/] \r\u202eevil\u202c\u2066 \x9b31m \u2028next"


def _inert(out: str) -> None:
    for char in ("\x1b", "\r", "\u202e", "\u202c", "\u2066", "\x07", "\x9b", "\u2028"):
        assert char not in out, repr(char)


def _store_with(tmp_path: Path, **fields) -> Path:
    store = LocalStore(tmp_path / "store")
    transcript = {
        "run_id": "r",
        "step": 0,
        "group_id": "g",
        "rollout_id": "x",
        "task_id": "t",
        "messages": [Message(role="user", content="Write f."), Message(role="assistant", content="ok")],
        "verdict": Verdict(status="failed", reason="no"),
        "components": {"c": 0.0},
        "aggregate": 0.0,
    }
    store.put_transcript(RolloutTranscript(**{**transcript, **fields}))
    return tmp_path / "store"


class TestShowIsBounded:
    """`show` printed the whole of every text: a 10 MB model message was 10 MB on the terminal (and its code
    through the syntax highlighter), with no way to see the start of a transcript."""

    BIG = "a" * 200_000 + "THE END"

    @pytest.mark.parametrize(
        "fields",
        [
            {"messages": [Message(role="user", content="q"), Message(role="assistant", content=BIG)]},
            {"messages": [Message(role="assistant", content="\n".join(["x"] * 20_000) + "THE END")]},
            {"executed_code": "x = 1\n" * 20_000 + "THE END"},
            {"verdict": Verdict(status="failed", reason=BIG)},
            {"status": "error", "error": ErrorInfo(kind="component_raised", message=BIG)},
            {
                "messages": [
                    Message(
                        role="assistant",
                        content="",
                        tool_calls=[{"id": "c1", "function": {"name": "f", "arguments": BIG}}],
                    )
                ]
            },
        ],
        ids=["message", "lines", "code", "verdict", "error", "tool_call"],
    )
    def test_each_text_is_cut_with_a_hint_and_full_shows_it_all(self, cli, tmp_path, fields):
        store = _store_with(tmp_path, **fields)
        shown = cli("show", store, "--rollout", "x")
        assert shown.exit_code == 0, shown.output[-2000:]
        assert len(shown.stdout) < 100_000
        assert "THE END" not in shown.stdout
        assert "--full" in shown.stdout
        full = cli("show", store, "--rollout", "x", "--full")
        assert full.exit_code == 0
        assert "THE END" in full.stdout

    def test_every_text_show_prints_is_inert(self, cli, tmp_path):
        store = _store_with(
            tmp_path,
            group_id="g",
            messages=[
                Message(role="user", content=HOSTILE, name=HOSTILE),
                Message(
                    role="assistant",
                    content=HOSTILE,
                    tool_calls=[{"id": HOSTILE, "function": {"name": HOSTILE, "arguments": HOSTILE}}],
                ),
                Message(role="tool", content=HOSTILE, tool_call_id=HOSTILE),
            ],
            turn_kinds=[HOSTILE],
            executed_code=HOSTILE,
            verdict=Verdict(status="failed", reason=HOSTILE),
            end_reason=HOSTILE,
            status="error" + HOSTILE,
            error=ErrorInfo(kind="k" + HOSTILE, message=HOSTILE),
            components={HOSTILE: 0.0},
        )
        for extra in ([], ["--full"]):
            result = cli("show", store, "--rollout", "x", *extra)
            assert result.exit_code == 0, result.output
            _inert(result.output)
            assert "[bold red]fake[/]" in result.output  # markup printed as itself

    def test_json_is_the_whole_document_and_ascii(self, cli, tmp_path):
        store = _store_with(
            tmp_path, messages=[Message(role="assistant", content=self.BIG + HOSTILE)], executed_code=HOSTILE
        )
        result = cli("show", store, "--rollout", "x", "--json")
        assert result.exit_code == 0
        assert result.stdout.isascii() and result.stdout.count("\n") == 1
        assert json.loads(result.stdout)["messages"][0]["content"] == self.BIG + HOSTILE


HOOKS = """
from animals_env import AnimalGuess


class FieldsRaise(AnimalGuess):
    def transcript_fields(self, state, task):
        raise RuntimeError("no fields today")


class FieldsExit(AnimalGuess):
    def transcript_fields(self, state, task):
        raise SystemExit(3)


class FieldsMutateTheState(AnimalGuess):
    def transcript_fields(self, state, task):
        state.questions = 42
        return {}


class FieldsMutateTheTask(AnimalGuess):
    def transcript_fields(self, state, task):
        task.max_guesses = 1
        return {}


class FieldsNotADict(AnimalGuess):
    def transcript_fields(self, state, task):
        return ["guess", "ask"]


class FieldsNotJson(AnimalGuess):
    def transcript_fields(self, state, task):
        return {"turn_kinds": [object()]}


class FieldsUnknown(AnimalGuess):
    def transcript_fields(self, state, task):
        return {"turn_kind": ["guess"]}


class FieldsFine(AnimalGuess):
    def transcript_fields(self, state, task):
        return {"turn_kinds": ["guess"] * state.assistant_turns}


class ReplayRaises(AnimalGuess):
    def replay(self, task, messages):
        raise ValueError("cannot read my own recordings")


class ReplayDropsATurn(AnimalGuess):
    def replay(self, task, messages):
        return super().replay(task, messages[:-2]) if len(messages) > 3 else super().replay(task, messages)


class ReplayFine(AnimalGuess):
    def replay(self, task, messages):
        return super().replay(task, messages)
"""


@pytest.fixture
def hook_envs(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ANIMALS))
    path = tmp_path / "hooks.py"
    path.write_text(HOOKS)
    return path


def _doctor(cli, envs: Path, name: str) -> tuple[int, list[dict]]:
    """doctor's exit status and findings for the environment ``name`` of HOOKS."""
    result = cli("doctor", "--env", f"{envs}:{name}", "--tasks", ANIMALS / "animals.jsonl", "--json")
    return result.exit_code, [f for d in json.loads(result.stdout)["diagnoses"] for f in d["findings"]]


class TestDoctorCallsTranscriptFields:
    """doctor played every hook but transcript_fields(): one that raised, changed what it was given, or returned
    what a transcript cannot hold passed doctor, and every run's transcripts silently lacked its fields."""

    @pytest.mark.parametrize(
        "name, check, said",
        [
            ("FieldsRaise", "transcript_fields_failed", "RuntimeError: no fields today"),
            ("FieldsExit", "transcript_fields_failed", "transcript_fields() called sys.exit(3)"),
            ("FieldsMutateTheState", "state_mutated", "transcript_fields() changed the state it was given"),
            ("FieldsMutateTheTask", "task_mutated", "transcript_fields() changed the task it was given"),
            ("FieldsNotADict", "transcript_fields_failed", "must return a dict"),
            ("FieldsNotJson", "transcript_fields_failed", "turn_kinds[0]"),
            ("FieldsUnknown", "transcript_fields_failed", "'turn_kind'"),
        ],
    )
    def test_a_bad_transcript_fields_fails_doctor(self, cli, hook_envs, name, check, said):
        status, findings = _doctor(cli, hook_envs, name)
        named = [f["message"] for f in findings if f["check"] == check]
        assert status == 1 and named, findings
        assert said in named[0], named

    def test_a_good_one_passes(self, cli, hook_envs):
        assert _doctor(cli, hook_envs, "FieldsFine") == (0, [])


class TestDoctorReplaysEachPlay:
    """doctor never called replay(), the hook `rewardpipe score` rebuilds a recorded conversation with: one that
    raised made every recording a replay_failed error record, one rebuilding another conversation scored something
    else, and doctor passed both."""

    @pytest.mark.parametrize(
        "name, said",
        [
            ("ReplayRaises", "ValueError: cannot read my own recordings"),
            ("ReplayDropsATurn", "differing from message"),
        ],
    )
    def test_a_replay_that_cannot_rebuild_a_play_fails_doctor(self, cli, hook_envs, name, said):
        status, findings = _doctor(cli, hook_envs, name)
        named = [f["message"] for f in findings if f["check"] == "replay_failed"]
        assert status == 1 and named and said in named[0], findings

    def test_a_faithful_replay_passes(self, cli, hook_envs):
        assert _doctor(cli, hook_envs, "ReplayFine") == (0, [])


def test_a_bad_line_quoting_a_huge_model_text_is_said_in_a_bounded_line(cli, tmp_path):
    """`score` naming a bad line quoted the model's unknown field name whole: a megabyte name was a megabyte on
    stderr for each such line. Every line for people is bounded (the roles and ids quoted already were)."""
    big = "\x1b[2J" + "A" * 1_000_000
    row = {"rollout_id": "r1", "group_id": "g", "task_id": "t", "messages": [{"role": "user", "content": "q"}], big: 1}
    samples = write_jsonl(tmp_path / "samples.jsonl", [row])
    result = cli("score", samples, "--tasks", BUNDLED_TASKS, "--out", tmp_path / "store")
    assert result.exit_code == 1
    assert "samples.jsonl:1" in result.stderr and "more characters" in result.stderr, result.stderr[:500]
    assert len(result.stderr) < 20_000
    _inert(result.stderr)


def test_exec_batch_names_a_huge_unknown_field_in_a_bounded_line(cli, tmp_path):
    """`exec --batch` put a line's unknown field name whole into the line's error result and its `skipped` line: a
    megabyte name was a megabyte on stdout and stderr, and in the `--json` result's reason."""
    big = "\x1b[2J" + "B" * 1_000_000
    job = {"id": "a", "code": "def f():\n    return 1\n", "tests": "x", "entry_point": "f", big: 1}
    batch = write_jsonl(tmp_path / "jobs.jsonl", [job])
    for extra in ([], ["--json"]):
        result = cli("exec", "--batch", batch, *extra)
        assert result.exit_code == 1
        assert len(result.stdout) < 20_000 and len(result.stderr) < 20_000
        assert "more characters" in result.stdout + result.stderr
        _inert(result.stdout + result.stderr)


def test_show_of_a_rollout_not_there_names_the_ones_that_are(cli, tmp_path):
    """`show --rollout` with a mistyped id said only that it was not found: a new user had no way to learn an id."""
    store = _store_with(tmp_path, rollout_id="s0-g0-k1")
    result = cli("show", store, "--rollout", "s0-g0-k2")
    assert result.exit_code == 1
    assert "no transcript of rollout 's0-g0-k2'" in result.stderr
    assert "run 'r' holds 1 rollout(s), e.g. 's0-g0-k1'" in result.stderr, result.stderr
