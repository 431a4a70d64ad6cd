"""A user's package through the command line: score, run, doctor, monitor, report and show, with its
reward and environment named by entry-point short names and references."""

from __future__ import annotations

import json

import pytest

from rewardpipe.store import LocalStore
from tests.api.conftest import GUESS_TASKS, JSON_SAMPLES


def _records(store, run_id):
    return sorted(LocalStore(store).iter_records(run_id), key=lambda r: (r.step, r.rollout_id))


# --- score: single-turn samples ------------------------------------------------------------------------


def test_score_single_turn_samples_with_a_registered_reward_and_no_tasks(acme, cli, tmp_path):
    result = cli("score", JSON_SAMPLES, "--reward", "json_answer", "--out", tmp_path, "--run-id", "s", "--json")
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["components"]["answer_matches"] for r in records] == [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    assert [r["components"]["valid_json"] for r in records] == [1.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    assert {r["group_id"] for r in records} == {"q1", "q2"} and records[0]["rollout_id"] == "line-1"
    manifest = LocalStore(tmp_path).get_json("runs/s/manifest.json")
    assert manifest["environment"] is None and manifest["tasks_file"] is None
    assert manifest["reward"] == "json_answer" and manifest["packages"] == {"acme-rl": "0.3.1"}
    assert manifest["components"]["too_long"] == {"range": [-1.0, 0.0], "role": "penalty", "weight": 0.2}


def test_score_needs_no_ids_on_a_single_turn_line(acme, cli, tmp_path):
    samples = tmp_path / "bare.jsonl"
    samples.write_text(
        "".join(
            json.dumps(
                {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}], "reference": r}
            )
            + "\n"
            for q, a, r in [("1+1?", '{"answer": 2}', 2), ("1+1?", "two", 2), ("2+3?", '{"answer": 5}', 5)]
        )
    )
    result = cli(
        "score",
        samples,
        "--reward",
        "acme_rl.json_answer:JSON_ANSWER",
        "--out",
        tmp_path / "st",
        "--run-id",
        "b",
        "--json",
    )
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert records[0]["group_id"] == records[1]["group_id"] != records[2]["group_id"]  # one prompt, one group
    assert [r["aggregate"] for r in records] == [1.5, 0.0, 1.5]


def test_score_reports_a_bad_line_with_its_file_line_and_field(acme, cli, tmp_path):
    samples = tmp_path / "bad.jsonl"
    good = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "{}"}], "reference": 1}
    samples.write_text(
        json.dumps(good)
        + "\n"
        + json.dumps({**good, "referense": 1})
        + "\n"
        + json.dumps({"messages": [{"role": "user", "content": "q"}]})
        + "\n"
    )
    result = cli("score", samples, "--reward", "json_answer", "--out", tmp_path / "st", "--run-id", "b")
    assert result.exit_code == 1
    assert "bad.jsonl:2" in result.stderr and "'referense'" in result.stderr
    assert "bad.jsonl:3" in result.stderr and "no assistant message" in result.stderr
    assert "scored 1, errors 0, skipped lines 2" in result.stdout


def test_a_reward_that_reads_the_task_needs_tasks(acme, cli, tmp_path):
    reward = tmp_path / "by_task.py"
    reward.write_text(
        "from rewardpipe import Reward, component\n"
        "@component(range=(0, 1), role='outcome')\ndef mentions(completion, task):\n"
        "    return 1.0 if task.topic in completion else 0.0\nR = Reward('by_task', [mentions])\n"
    )
    samples = tmp_path / "s.jsonl"
    line = {"task_id": "t", "messages": [{"role": "assistant", "content": "about cats"}]}
    samples.write_text(json.dumps(line) + "\n")
    refused = cli("score", samples, "--reward", f"{reward}:R", "--out", tmp_path / "st")
    assert refused.exit_code == 2 and "reads the task: give --tasks" in refused.stderr
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps({"task_id": "t", "prompt": "Write about it.", "topic": "cats"}) + "\n")
    result = cli("score", samples, "--reward", f"{reward}:R", "--tasks", tasks, "--out", tmp_path / "st", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["components"] == {"mentions": 1.0}


# --- run, replay, score through the environment ---------------------------------------------------------


def test_run_any_environment_by_its_short_name(acme, cli, tmp_path):
    result = cli(
        "run",
        "--env",
        "guess",
        "--tasks",
        GUESS_TASKS,
        "--policy",
        "scripted",
        "--steps",
        2,
        "--group-size",
        4,
        "--groups-per-step",
        3,
        "--out",
        tmp_path,
        "--run-id",
        "g",
        "--json",
    )
    assert result.exit_code == 0, result.output
    records = _records(tmp_path, "g")
    assert len(records) == 24 and all(r.status == "scored" for r in records)
    assert {r.metrics["end_reason"] for r in records} >= {"solved", "turn_limit"}
    assert len({r.components["closeness"] for r in records}) > 2  # the scripted mix gives real variance
    manifest = LocalStore(tmp_path).get_json("runs/g/manifest.json")
    assert (manifest["environment"], manifest["environment_version"]) == ("guess", "2")
    assert manifest["configuration"]["max_turns"] == 8  # the environment's own turn limit
    assert manifest["components"]["solved"]["role"] == "outcome"
    transcript = json.loads(next((tmp_path / "runs" / "g" / "transcripts").rglob("*.json")).read_text())
    assert transcript["verdict"]["reason"] == "the environment runs no code"


def test_replaying_and_rescoring_a_run_give_its_records_again(acme, cli, tmp_path):
    assert (
        cli(
            "run",
            "--env",
            "acme_rl.guess:ENVIRONMENT",
            "--tasks",
            GUESS_TASKS,
            "--steps",
            1,
            "-k",
            4,
            "--groups-per-step",
            3,
            "--out",
            tmp_path,
            "--run-id",
            "live",
        ).exit_code
        == 0
    )
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text(
        "".join(
            json.dumps({k: doc[k] for k in ("rollout_id", "group_id", "task_id", "step", "messages")}) + "\n"
            for doc in (json.loads(p.read_text()) for p in sorted((tmp_path / "runs/live/transcripts").rglob("*.json")))
        )
    )
    replay = cli(
        "run",
        "--env",
        "guess",
        "--tasks",
        GUESS_TASKS,
        "--policy",
        "replay",
        "--rollouts",
        rollouts,
        "--out",
        tmp_path,
        "--run-id",
        "replayed",
    )
    assert replay.exit_code == 0, replay.output
    scored = cli("score", rollouts, "--env", "guess", "--tasks", GUESS_TASKS, "--out", tmp_path, "--run-id", "rescored")
    assert scored.exit_code == 0, scored.output
    live = {r.rollout_id: r.components for r in _records(tmp_path, "live")}
    assert {r.rollout_id: r.components for r in _records(tmp_path, "replayed")} == live
    assert {r.rollout_id: r.components for r in _records(tmp_path, "rescored")} == live


def test_run_refuses_a_reward_that_reads_reference_for_an_environment(acme, cli, tmp_path):
    result = cli("run", "--env", "guess", "--reward", "json_answer", "--tasks", GUESS_TASKS, "--out", tmp_path)
    assert result.exit_code == 2 and "single-turn" in result.stderr and "answer_matches" in result.stderr


def test_run_reports_a_task_row_that_does_not_fit_the_environment(acme, cli, tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"task_id": "a", "prompt": "p", "secret": 3}\n{"task_id": "b", "prompt": "p", "secret": 300}\n')
    result = cli("run", "--env", "guess", "--tasks", tasks, "--out", tmp_path / "st")
    assert result.exit_code == 1 and "tasks.jsonl:2" in result.stderr and "secret" in result.stderr


def test_an_unknown_environment_is_a_usage_error_listing_what_exists(acme, cli, tmp_path):
    result = cli("run", "--env", "gues", "--tasks", GUESS_TASKS, "--out", tmp_path)
    assert result.exit_code == 2 and "unknown environment 'gues'" in result.stderr and "guess" in result.stderr


# --- doctor -----------------------------------------------------------------------------------------------


def test_doctor_passes_a_healthy_user_environment(acme, cli):
    result = cli("doctor", "--env", "guess", "--tasks", GUESS_TASKS, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["broken"] == [] and report["environment"] == "guess_number"
    assert all(len(values) >= 2 for d in report["diagnoses"] for values in d["component_values"].values())


BROKEN_ENVS = """
import random
from rewardpipe import Reward, component
from acme_rl.guess import GuessNumber, GUESS_REWARD, GuessState

class Mutates(GuessNumber):
    def respond(self, state, task, ctx):
        state.guesses.append(0)
        return super().respond(state, task, ctx)

class Dice(GuessNumber):
    def respond(self, state, task, ctx):
        new = super().respond(state, task, ctx)
        return new.evolve(invalid=random.randint(0, 1000))

@component(range=(0, 0.5), role="shaping")
def overshoots(state):
    return 0.75 if state.solved else 0.0

class Overshoots(GuessNumber):
    reward = GUESS_REWARD.with_components([*GUESS_REWARD.components, overshoots])

class NoReference(GuessNumber):
    def scenarios(self, task):
        return {k: v for k, v in super().scenarios(task).items() if k != "reference"}

class WeakReference(GuessNumber):
    def scenarios(self, task):
        scenarios = super().scenarios(task)
        scenarios["reference"] = scenarios["always_one"]
        return scenarios

class NotJson(GuessNumber):
    def respond(self, state, task, ctx):
        return super().respond(state, task, ctx).evolve(guesses=[object()])
"""


@pytest.mark.parametrize(
    "env_class, check",
    [
        ("Mutates", "state_mutated"),
        ("Dice", "not_deterministic"),
        ("Overshoots", "out_of_range"),
        ("NoReference", "reference_not_best"),
        ("WeakReference", "reference_not_best"),
        ("NotJson", "state_not_json"),
    ],
)
def test_doctor_names_what_is_wrong_with_a_broken_environment(acme, cli, tmp_path, env_class, check):
    path = tmp_path / "broken_envs.py"
    path.write_text(BROKEN_ENVS)
    result = cli("doctor", "--env", f"{path}:{env_class}", "--tasks", GUESS_TASKS, "--json")
    assert result.exit_code == 1, result.output
    checks = {f["check"] for d in json.loads(result.stdout)["diagnoses"] for f in d["findings"]}
    assert check in checks


def test_doctor_catches_a_component_that_never_varies(acme, cli, tmp_path):
    path = tmp_path / "dead.py"
    path.write_text(
        "from rewardpipe import component\nfrom acme_rl.guess import GUESS_REWARD\n"
        "@component(range=(0, 1), role='shaping')\ndef gated(state):\n    return 0.0\n"
        "R = GUESS_REWARD.with_components([*GUESS_REWARD.components, gated])\n"
    )
    result = cli("doctor", "--env", "guess", "--reward", f"{path}:R", "--tasks", GUESS_TASKS, "--json")
    assert result.exit_code == 1
    problems = [p for d in json.loads(result.stdout)["diagnoses"] for p in d["problems"]]
    assert "component 'gated' takes only the value(s) [0.0]: it would be dead" in problems


# --- monitor and report: the run's own ranges and roles ------------------------------------------------------


def _idle_samples(path):
    """8 groups of 3 answers; every answer is short valid JSON: valid_json is constant at its maximum, the
    too_long penalty never fires, answer_matches varies."""
    rows = []
    for group in range(8):
        for k in range(3):
            answer = group if k != 1 else group + 1
            messages = [
                {"role": "user", "content": f"q{group}"},
                {"role": "assistant", "content": json.dumps({"answer": answer})},
            ]
            rows.append({"task_id": f"q{group}", "messages": messages, "reference": group})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_monitor_judges_a_user_reward_by_its_declared_ranges_and_roles(acme, cli, tmp_path):
    assert (
        cli(
            "score",
            _idle_samples(tmp_path / "s.jsonl"),
            "--reward",
            "json_answer",
            "--out",
            tmp_path / "st",
            "--run-id",
            "m",
        ).exit_code
        == 0
    )
    result = cli("monitor", tmp_path / "st", "--run-id", "m", "--json", "--no-write-alarms")
    assert result.exit_code == 0, result.output
    step = json.loads(result.stdout)["steps"][0]["components"]
    assert (step["valid_json"]["verdict"], step["valid_json"]["cause"]) == ("dead", "constant_at_maximum")
    assert (step["too_long"]["verdict"], step["too_long"]["cause"]) == ("info", "penalty_never_fires")
    assert step["answer_matches"]["verdict"] == "ok"


def test_a_penalty_is_known_by_its_role_not_the_shape_of_its_range(acme, cli, tmp_path):
    reward = tmp_path / "roles.py"
    reward.write_text(
        "from rewardpipe import Reward, component\nfrom acme_rl.json_answer import answer_matches\n"
        "@component(range=(0, 1), role='penalty', weight=-1.0)\ndef swore(completion):\n    return 0.0\n"
        "@component(range=(-1, 0), role='shaping')\ndef below_zero(completion):\n    return 0.0\n"
        "R = Reward('roles', [answer_matches, swore, below_zero])\n"
    )
    assert (
        cli(
            "score",
            _idle_samples(tmp_path / "s.jsonl"),
            "--reward",
            f"{reward}:R",
            "--out",
            tmp_path / "st",
            "--run-id",
            "m",
        ).exit_code
        == 0
    )
    step = json.loads(cli("monitor", tmp_path / "st", "--run-id", "m", "--json").stdout)["steps"][0]["components"]
    assert (step["swore"]["verdict"], step["swore"]["cause"]) == ("info", "penalty_never_fires")  # idle at 0
    assert (step["below_zero"]["verdict"], step["below_zero"]["cause"]) == ("dead", "constant_at_maximum")


def test_report_reads_a_user_reward_run(acme, cli, tmp_path):
    assert (
        cli(
            "score",
            _idle_samples(tmp_path / "s.jsonl"),
            "--reward",
            "json_answer",
            "--out",
            tmp_path / "st",
            "--run-id",
            "m",
        ).exit_code
        == 0
    )
    result = cli("report", tmp_path / "st", "--run-id", "m", "--out", tmp_path / "r.html")
    assert result.exit_code == 0, result.output
    assert "too_long" in (tmp_path / "r.html").read_text()


# --- show ---------------------------------------------------------------------------------------------------


def test_show_prints_any_environments_messages_and_tool_calls(acme, cli, tmp_path):
    from rewardpipe import Message
    from rewardpipe.transcripts import RolloutTranscript, Verdict

    store = LocalStore(tmp_path)
    call = {"id": "call-1", "type": "function", "function": {"name": "lookup\x1b[2J", "arguments": '{"q": "[red]x"}'}}
    store.put_transcript(
        RolloutTranscript(
            run_id="t",
            step=0,
            group_id="g",
            rollout_id="r1",
            task_id="t1",
            messages=[
                Message(role="user", content="Find it."),
                Message(role="assistant", content="", tool_calls=[call]),
                Message(role="tool", content="found", tool_call_id="call-1", name="lookup"),
                Message(role="assistant", content="It is found."),
            ],
            verdict=Verdict(status="not_executed", reason="the environment runs no code"),
            end_reason="done",
            components={"solved": 1.0},
            aggregate=1.0,
        )
    )
    text = cli("show", tmp_path, "--run-id", "t", "--rollout", "r1")
    assert text.exit_code == 0, text.output
    assert "tool call" in text.stdout and "lookup\\x1b[2J" in text.stdout and "[red]x" in text.stdout
    assert "\x1b[2J" not in text.stdout and "answers call-1" in text.stdout and "It is found." in text.stdout
    shown = json.loads(cli("show", tmp_path, "--run-id", "t", "--rollout", "r1", "--json").stdout)
    assert shown["messages"][1]["tool_calls"] == [call] and shown["messages"][2]["tool_call_id"] == "call-1"


def test_show_prints_a_guess_runs_transcript(acme, cli, tmp_path):
    assert (
        cli(
            "run",
            "--env",
            "guess",
            "--tasks",
            GUESS_TASKS,
            "--steps",
            1,
            "-k",
            2,
            "--groups-per-step",
            1,
            "--out",
            tmp_path,
            "--run-id",
            "g",
        ).exit_code
        == 0
    )
    result = cli("show", tmp_path, "--run-id", "g", "--rollout", "s0-g000-g-07-k0")
    assert result.exit_code == 0, result.output
    assert "assistant · turn 0" in result.stdout and "I am thinking of a number" in result.stdout


# --- live endpoints: an LLM policy, and an environment that calls an LLM ------------------------------------


@pytest.fixture
def chat_server():
    from tests.core.conftest import StubChatServer

    server = StubChatServer()
    yield server
    server.close()


def test_run_any_environment_with_an_openai_policy(acme, cli, tmp_path, chat_server):
    for _ in range(8):
        chat_server.reply("I guess 42")
    result = cli(
        "run",
        "--env",
        "guess",
        "--tasks",
        GUESS_TASKS,
        "--policy",
        "openai",
        "--base-url",
        chat_server.url,
        "--model",
        "m",
        "--steps",
        1,
        "-k",
        2,
        "--groups-per-step",
        2,
        "--out",
        tmp_path,
        "--run-id",
        "o",
        "--max-turns",
        2,
    )
    assert result.exit_code == 0, result.output
    records = _records(tmp_path, "o")
    assert len(records) == 4 and all(r.status == "scored" for r in records)
    first = chat_server.requests[0]["body"]["messages"]
    assert first == [
        {"role": "user", "content": "I am thinking of a number from 1 to 100. Guess it; I will say higher or lower."}
    ]  # the environment names no system prompt


LLM_ENV = """
from rewardpipe import Message, Reward, ScriptedPolicy, component
from acme_rl.guess import GuessNumber

class HintedGuess(GuessNumber):
    name = "hinted_guess"
    calls_llm = True

    def respond(self, state, task, ctx):
        hint = ctx.chat([{"role": "system", "content": f"The secret is {task.secret}: give a hint."},
                         {"role": "user", "content": state.messages[-1].content}], temperature=0)
        new = super().respond(state, task, ctx)
        return new.evolve(messages=[*new.messages[:-1], Message(role="user", content=hint)])
"""


def test_an_environment_that_calls_an_llm_gets_the_runs_chat_client(acme, cli, tmp_path, chat_server):
    path = tmp_path / "llm_env.py"
    path.write_text(LLM_ENV)
    refused = cli("run", "--env", f"{path}:HintedGuess", "--tasks", GUESS_TASKS, "--out", tmp_path / "a")
    assert refused.exit_code == 2 and "calls an LLM" in refused.stderr and "--sim-base-url" in refused.stderr
    for _ in range(40):
        chat_server.reply("Warmer!")
    result = cli(
        "run",
        "--env",
        f"{path}:HintedGuess",
        "--tasks",
        GUESS_TASKS,
        "--sim-base-url",
        chat_server.url,
        "--sim-model",
        "sim",
        "--steps",
        1,
        "-k",
        2,
        "--groups-per-step",
        1,
        "--out",
        tmp_path / "b",
        "--run-id",
        "h",
        "--json",
    )
    assert result.exit_code == 0, result.output
    assert chat_server.requests and chat_server.requests[0]["body"]["model"] == "sim"
    assert "The secret is 7" in chat_server.requests[0]["body"]["messages"][0]["content"]
    transcript = json.loads(next((tmp_path / "b" / "runs" / "h" / "transcripts").rglob("*.json")).read_text())
    assert "Warmer!" in [m["content"] for m in transcript["messages"] if m["role"] == "user"]
