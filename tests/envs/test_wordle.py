"""The wordle built-in: task rows (flat and the AWS sample's), the guess format (hostile text), Wordle's
feedback rules for repeated letters, the episode ending itself, the reward, the scripted mix's variance, and
the CLI paths (run, doctor, score, replay, monitor, report) over the bundled tasks."""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from pydantic import ValidationError

from rewardpipe.envs.wordle import BUNDLED_TASKS, ENVIRONMENT, WORDLE, Wordle, WordleState, WordleTask, load_words
from rewardpipe.envs.wordle.game import GuessProblem, describe, feedback, parse_guess
from rewardpipe.envs.wordle.state import TurnResult
from rewardpipe.episode import EnvServices, converse, finish_episode, start_episode
from rewardpipe.models import InputFileError, load_task_rows
from rewardpipe.policies import ScriptedPolicy
from rewardpipe.runner import NoSandbox, plan_step, run_slots
from rewardpipe.store import LocalStore

PROMPT = "Guess my five-letter word; write <guess>word</guess>."


def task(answer: str = "crane", **fields) -> WordleTask:
    return WordleTask(task_id=f"t-{answer}", prompt=PROMPT, answer=answer, **fields)


def play(turns, game: WordleTask | None = None, env: Wordle = ENVIRONMENT, max_turns: int | None = None):
    game = game or task()
    state = start_episode(game, env=env, run_id="r", step=0, group_id="g", rollout_id="k0", max_turns=max_turns)
    return converse(state, game, ScriptedPolicy(list(turns)), env), game


def g(word: str) -> str:
    return f"<guess>{word}</guess>"


# --- feedback: Wordle's rules for repeated letters ------------------------------------------------------


@pytest.mark.parametrize(
    "guess, answer, pattern",
    [
        ("crane", "crane", "GGGGG"),
        ("speed", "abide", "XXYXY"),  # the answer's one E: the first E is yellow, the second grey
        ("lolly", "hello", "XYGGX"),  # both of the answer's L's are matched green: the first L is grey
        ("geese", "those", "XXXGG"),  # the green E at the end takes the only E
        ("sheep", "geese", "YXGYX"),  # two unmatched E's in the answer: one green, then one yellow, no more
        ("abbey", "babes", "YYGGX"),
        ("array", "rural", "XYGGX"),  # the answer's A is green elsewhere: the guess's first A is grey
        ("eerie", "there", "YXYXG"),
        ("mummy", "tummy", "XGGGG"),
        ("allow", "llama", "YGYXX"),
    ],
)
def test_feedback_follows_the_repeated_letter_rules(guess, answer, pattern):
    assert feedback(guess, answer) == pattern


def test_feedback_rules_hold_for_every_pair_of_a_random_sample():
    """The rules as properties, over many pairs (not only the examples above): greens exactly where the
    letters match; each letter's greens + yellows = min(its count in the guess, in the answer); and the
    yellows of a letter go to its leftmost non-green places."""
    words = sorted(load_words())
    rng = random.Random(17)
    pairs = [(rng.choice(words), rng.choice(words)) for _ in range(3000)] + [("eerie", "sheep"), ("llama", "allay")]
    for guess, answer in pairs:
        pattern = feedback(guess, answer)
        assert all((p == "G") == (a == b) for p, a, b in zip(pattern, guess, answer)), (guess, answer, pattern)
        for letter in set(guess):
            places = [i for i, c in enumerate(guess) if c == letter]
            marked = [i for i in places if pattern[i] in "GY"]
            assert len(marked) == min(guess.count(letter), answer.count(letter)), (guess, answer, pattern)
            non_green = [i for i in places if pattern[i] != "G"]
            yellows = [i for i in places if pattern[i] == "Y"]
            assert yellows == non_green[: len(yellows)], (guess, answer, pattern)


def test_feedback_is_described_letter_by_letter():
    assert describe("speed", "XXYXY") == "S=grey P=grey E=yellow E=grey D=yellow"


# --- the guess format -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, word",
    [
        ("<guess>crane</guess>", "crane"),
        ("I think... <GUESS> Crane </Guess>", "crane"),
        ("<guess>slate</guess> no wait <guess>crane</guess>", "crane"),  # the last complete tag wins
        ("<guess>slate</guess> then <guess>crane", "slate"),  # an unclosed tag does not count
        ("<guess><guess>crane</guess>", "crane"),  # the later opening tag pairs
        ("</guess><guess>crane</guess></guess>", "crane"),  # stray closing tags are ignored
    ],
)
def test_a_guess_is_read_from_the_last_complete_tag(text, word):
    parsed = parse_guess(text)
    assert parsed.word == word and parsed.problem is None


@pytest.mark.parametrize(
    "text, problem",
    [
        ("crane", GuessProblem.NO_TAG),
        ("My guess is CRANE.", GuessProblem.NO_TAG),
        ("<guess>crane", GuessProblem.UNCLOSED_TAG),
        ("<guess>cranes</guess>", GuessProblem.NOT_FIVE_LETTERS),
        ("<guess>cran</guess>", GuessProblem.NOT_FIVE_LETTERS),
        ("<guess>cr4ne</guess>", GuessProblem.NOT_FIVE_LETTERS),
        ("<guess>crâne</guess>", GuessProblem.NOT_FIVE_LETTERS),  # five letters, not a-z
        ("<guess>c r a n e</guess>", GuessProblem.NOT_FIVE_LETTERS),
        ("<guess>crane</guess> <guess>no</guess>", GuessProblem.NOT_FIVE_LETTERS),  # the last one counts
        ("<guess>" + "a" * 10_000 + "</guess>", GuessProblem.NOT_FIVE_LETTERS),
        ("", GuessProblem.NO_TAG),
    ],
)
def test_a_turn_without_a_usable_guess_says_why(text, problem):
    parsed = parse_guess(text)
    assert parsed.word is None and parsed.problem is problem


def test_parsing_hostile_text_is_linear():
    """Hundreds of thousands of opening tags with no closing one: a lazy regular expression would rescan the
    rest of the text from each (hours); the tag scan reads it once."""
    hostile = "<guess>" * 300_000 + "crane"
    assert parse_guess(hostile).problem is GuessProblem.UNCLOSED_TAG
    many = "<guess>xx</guess>" * 100_000 + g("crane")
    assert parse_guess(many).word == "crane"


# --- task rows ------------------------------------------------------------------------------------------


def test_flat_rows_and_the_aws_samples_rows_are_both_read(tmp_path):
    rows = tmp_path / "tasks.jsonl"
    rows.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"task_id": "flat", "prompt": PROMPT, "answer": "Crane"},
                {"task_id": "flat-4", "prompt": PROMPT, "answer": "slate", "max_guesses": 4},
                {"id": "aws-1", "metadata": {"prompt": PROMPT, "answer": "ghost"}},
                {"id": 7, "metadata": {"prompt": PROMPT, "answer": "tiger", "max_guesses": 8}},
            ]
        )
        + "\n"
    )
    tasks = load_task_rows(rows, WordleTask)
    assert [(t.task_id, t.answer, t.max_guesses) for t in tasks] == [
        ("flat", "crane", 6),
        ("flat-4", "slate", 4),
        ("aws-1", "ghost", 6),
        ("7", "tiger", 8),
    ]
    assert tasks[2].prompt == PROMPT


@pytest.mark.parametrize(
    "row, says",
    [
        ({"task_id": "x", "prompt": PROMPT, "answer": "cranes"}, "five letters"),
        ({"task_id": "x", "prompt": PROMPT, "answer": "cr4ne"}, "five letters"),
        ({"task_id": "x", "prompt": PROMPT}, "answer"),
        ({"task_id": "x", "prompt": PROMPT, "answer": "crane", "max_guesses": 0}, "max_guesses"),
        ({"task_id": "x", "prompt": PROMPT, "answer": "crane", "max_guesses": 11}, "max_guesses"),
        ({"task_id": "x", "prompt": PROMPT, "answer": "crane", "max_guesses": "6"}, "max_guesses"),
        ({"task_id": "x", "prompt": PROMPT, "answer": "crane", "hint": "a bird"}, "hint"),
        ({"id": "x", "metadata": {"prompt": PROMPT, "answer": "crane"}, "split": "train"}, "'split'"),
        ({"id": "x", "metadata": {"prompt": PROMPT, "answer": "crane", "difficulty": 3}}, "'difficulty'"),
        ({"id": "x", "metadata": "crane"}, "'metadata' must be an object"),
        ({"metadata": {"prompt": PROMPT, "answer": "crane"}}, "needs 'id'"),
        ({"id": "x", "task_id": "x", "metadata": {"prompt": PROMPT, "answer": "crane"}}, "not both"),
        ({"id": True, "metadata": {"prompt": PROMPT, "answer": "crane"}}, "task_id"),
        ({"id": "x", "metadata": {"answer": "crane"}}, "prompt"),
    ],
)
def test_a_bad_row_is_refused_naming_what_is_wrong(row, says):
    with pytest.raises(ValidationError, match=says):
        WordleTask.model_validate(row)


def test_a_bad_line_in_a_task_file_names_the_file_and_line(tmp_path):
    rows = tmp_path / "tasks.jsonl"
    rows.write_text(
        json.dumps({"task_id": "a", "prompt": PROMPT, "answer": "crane"})
        + "\n"
        + json.dumps({"id": "b", "metadata": {"prompt": PROMPT, "answer": "toolong"}})
        + "\n"
    )
    with pytest.raises(InputFileError, match=r"tasks.jsonl:2.*five letters"):
        load_task_rows(rows, WordleTask)


def test_the_bundled_tasks_are_valid_and_hold_repeated_letters():
    tasks = load_task_rows(BUNDLED_TASKS, WordleTask)
    assert len(tasks) >= 30
    assert sum(1 for t in tasks if len(set(t.answer)) < 5) >= 8
    words = load_words()
    assert all(t.answer in words for t in tasks) and all("<guess>" in t.prompt for t in tasks)
    assert len(words) >= 500 and all(len(w) == 5 and w.isascii() and w.isalpha() for w in words)


# --- the episode ----------------------------------------------------------------------------------------


def test_a_solved_game_ends_itself_with_no_reply():
    state, _ = play([g("slate"), g("crane"), g("never")])
    assert state.next_action == "score" and state.end_reason == "solved" and state.solved
    assert state.turn_results == ["guess", "solved"] and state.guesses == ["slate", "crane"]
    assert state.messages[-1].role == "assistant" and state.assistant_turns == 2
    assert state.feedback == [feedback("slate", "crane"), "GGGGG"]


def test_the_game_ends_when_the_guesses_run_out_and_says_the_answer():
    state, _ = play([g("slate"), g("ghost"), g("tiger")], task("crane", max_guesses=2))
    assert state.next_action == "score" and state.end_reason == "out_of_guesses" and not state.solved
    assert state.assistant_turns == 2
    assert "No guesses left: the word was CRANE." in state.messages[-1].content


def test_a_malformed_turn_gets_a_format_reminder_and_uses_no_guess():
    state, _ = play(["I think it is crane", "<guess>crane", g("cranes"), g("crane")])
    assert state.turn_results == ["malformed"] * 3 + ["solved"]
    replies = [m.content for m in state.messages if m.role == "user"][1:]
    assert "<guess>crane</guess>" in replies[0] and "no guess" in replies[0]
    assert "not closed" in replies[1] and "exactly five letters" in replies[2]
    assert "6 guesses left" in replies[2] and len(state.guesses) == 1


def test_a_word_not_in_the_list_uses_no_guess_and_a_repeat_uses_one():
    state, _ = play([g("qzxvj"), g("slate"), g("slate"), g("crane")], task("crane", max_guesses=3))
    assert state.turn_results == ["not_a_word", "guess", "repeat", "solved"]
    replies = [m.content for m in state.messages if m.role == "user"][1:]
    assert replies[0].startswith("QZXVJ is not in the word list") and "3 guesses left" in replies[0]
    assert replies[2].startswith("You already guessed SLATE.") and "1 guess left" in replies[2]


def test_the_answer_is_always_a_guess_even_outside_the_word_list():
    state, _ = play([g("zzzzq")], task("zzzzq"))
    assert state.solved


def test_the_dictionary_option():
    loose = ENVIRONMENT.configure(dictionary="off")
    assert play([g("qzxvj")], env=loose)[0].turn_results == ["guess"]
    assert ENVIRONMENT.configure().words == load_words()


def test_the_class_named_by_reference_plays_with_the_bundled_list():
    from rewardpipe.references import resolve_environment

    env = resolve_environment("rewardpipe.envs.wordle.environment:Wordle")
    assert env.words == load_words() and Wordle().dictionary == "bundled"
    assert play([g("qzxvj")], env=env)[0].turn_results == ["not_a_word"]


def test_a_word_list_of_ones_own(tmp_path):
    words = tmp_path / "words.txt"
    words.write_text("# mine\nslate\nCRANE\n\n")
    env = ENVIRONMENT.configure(dictionary=str(words))
    assert env.words == {"slate", "crane"}
    assert play([g("ghost"), g("slate")], env=env)[0].turn_results == ["not_a_word", "guess"]
    words.write_text("slate\ncranes\n")
    with pytest.raises(ValueError, match="not a five-letter word"):
        ENVIRONMENT.configure(dictionary=str(words))


@pytest.mark.parametrize(
    "options, says",
    [
        ({"dictionary": "/no/such/file"}, "not a file"),
        ({"colour": "blue"}, "dictionary=bundled|off|PATH"),
    ],
)
def test_bad_options_are_refused(options, says):
    with pytest.raises(ValueError, match=says):
        ENVIRONMENT.configure(**options)


def test_the_platform_turn_limit_still_applies():
    state, _ = play(["hmm"] * 20)
    assert state.end_reason == "turn_limit" and state.assistant_turns == ENVIRONMENT.max_turns


def test_no_sandbox_is_ever_asked_for():
    state, game = play([g("crane")])
    assert ENVIRONMENT.runs_code is False and ENVIRONMENT.execution_job(state, game) is None


def test_hostile_turns_are_answered_in_bounded_text():
    state, _ = play(["\x1b[2J<guess>" * 50_000, "<guess>" + "z" * 100_000 + "</guess>", g("crane")])
    replies = [m.content for m in state.messages if m.role == "user"][1:]
    assert state.turn_results == ["malformed", "malformed", "solved"]
    assert all(len(reply) < 300 for reply in replies)


def test_the_state_survives_json():
    state, _ = play([g("qzxvj"), "oops", g("slate"), g("slate"), g("crane")])
    again = WordleState.model_validate_json(state.model_dump_json())
    assert again.model_dump() == state.model_dump() and again.turn_results == state.turn_results


# --- the reward -----------------------------------------------------------------------------------------


def components(state) -> dict:
    return WORDLE.score(state.messages, task=None, state=state).components


def test_a_quick_solve_scores_high_on_every_component():
    values = components(play([g("crane")])[0])
    assert values == {"solved": 1.0, "letter_credit": 1.0, "speed": 1.0, "format_ok": 1.0, "wasted_guesses": 0.0}


def test_letter_credit_and_speed_are_not_gated_on_solving():
    # slate vs crane: A and E green, nothing else (credit 2/5); out of guesses after two
    state, _ = play([g("slate"), g("slate")], task("crane", max_guesses=2))
    values = components(state)
    assert values["solved"] == 0.0 and values["letter_credit"] == pytest.approx(0.4)
    assert values["speed"] == pytest.approx(0.4) and values["wasted_guesses"] == -0.5


def test_speed_rewards_fewer_guesses():
    # slate then crane: slot 1 holds 0.4, slots 2..6 hold 1
    fast = components(play([g("slate"), g("crane")])[0])["speed"]
    slow = components(play([g("slate"), g("ghost"), g("tiger"), g("crane")])[0])["speed"]
    assert fast == pytest.approx((0.4 + 5) / 6) and fast > slow > components(play([g("slate")] * 6)[0])["speed"]


def test_format_ok_and_wasted_guesses():
    state, _ = play(["nope", g("qzxvj"), g("slate"), g("slate"), g("crane")])
    values = components(state)
    assert values["format_ok"] == pytest.approx(4 / 5) and values["wasted_guesses"] == -1.0
    assert values["wasted_guesses"] == -1.0 and str(values["wasted_guesses"]) == "-1.0"
    assert str(components(play([g("crane")])[0])["wasted_guesses"]) == "0.0"  # never a -0.0 in a record


def test_scored_without_a_wordle_state_is_an_error_not_a_zero():
    score = WORDLE.score(play([g("crane")])[0].messages)
    assert score.aggregate is None and score.error.kind == "component_unavailable"
    assert "--env wordle" in score.error.message


# --- the scripted mix: real within-group variance -----------------------------------------------------


def _scripted_records(seed: int = 0, steps: int = 2, collapse: int | None = None):
    tasks = load_task_rows(BUNDLED_TASKS, WordleTask)
    policy = ENVIRONMENT.scripted_policy(seed=seed, collapse_from_step=collapse)
    records = []
    for step in range(steps):
        records += run_slots(
            plan_step(tasks, step, 16, 8),
            policy=policy,
            env=ENVIRONMENT,
            executor=NoSandbox(),
            run_id="mix",
            services=EnvServices(seed=seed),
        )
    return records


def test_the_scripted_mix_gives_every_component_within_group_variance():
    records = _scripted_records()
    assert all(r.status == "scored" for r in records)
    groups = defaultdict(list)
    for record in records:
        groups[record.group_id].append(record.components)
    for name in WORDLE.component_names:
        moving = sum(1 for values in groups.values() if len({v[name] for v in values}) > 1)
        assert moving >= len(groups) // 3, (name, moving, len(groups))
    solved = Counter(r.components["solved"] for r in records)
    assert solved[1.0] > len(records) * 0.3 and solved[0.0] > len(records) * 0.1
    assert any(r.components["format_ok"] < 1.0 for r in records)


def test_the_scripted_mix_is_reproducible_and_seeded():
    first = [r.components for r in _scripted_records(seed=3, steps=1)]
    assert first == [r.components for r in _scripted_records(seed=3, steps=1)]
    assert first != [r.components for r in _scripted_records(seed=4, steps=1)]


def test_the_collapse_plays_one_word_in_every_rollout():
    records = [r for r in _scripted_records(steps=2, collapse=1) if r.step == 1]
    groups = defaultdict(set)
    for record in records:
        groups[record.group_id].add(tuple(record.components.values()))
    assert all(len(values) == 1 for values in groups.values())


def test_the_reference_scenario_solves_every_bundled_task():
    tasks = load_task_rows(BUNDLED_TASKS, WordleTask) + [task("zzzzq"), task("fuzzy", max_guesses=1)]
    for game in tasks:
        reference = ENVIRONMENT.scenarios(game)["reference"]
        state = start_episode(game, env=ENVIRONMENT, run_id="r", step=0, group_id="g", rollout_id="k")
        state = converse(state, game, reference, ENVIRONMENT)
        assert state.solved, game.task_id
        assert finish_episode(state, game, None, None, ENVIRONMENT).components["solved"] == 1.0


# --- the command line -----------------------------------------------------------------------------------


@pytest.fixture
def cli():
    from typer.testing import CliRunner

    from rewardpipe.cli import app

    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args])


def _rollouts_file(store: Path, run_id: str, out: Path) -> Path:
    lines = []
    for path in sorted((store / "runs" / run_id / "transcripts").rglob("*.json")):
        doc = json.loads(path.read_text())
        lines.append(json.dumps({k: doc[k] for k in ("rollout_id", "group_id", "task_id", "step", "messages")}))
    out.write_text("\n".join(lines) + "\n")
    return out


def _by_rollout(store: Path, run_id: str) -> dict:
    return {r.rollout_id: (r.status, r.components) for r in LocalStore(store).iter_records(run_id)}


@pytest.mark.slow
def test_run_doctor_score_replay_monitor_and_report_over_the_bundled_tasks(cli, tmp_path):
    store = tmp_path / "store"
    result = cli(
        "run",
        "--env",
        "wordle",
        "--tasks",
        BUNDLED_TASKS,
        "--policy",
        "scripted",
        "--steps",
        "2",
        "--groups-per-step",
        "8",
        "--group-size",
        "4",
        "--out",
        store,
        "--run-id",
        "w",
        "--json",
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["manifest"]["environment"] == "wordle" and summary["alarms"] == []
    assert summary["manifest"]["components"]["wasted_guesses"] == {
        "range": [-1.0, 0.0],
        "role": "penalty",
        "weight": 0.3,
    }
    live = _by_rollout(store, "w")
    assert len(live) == 64 and all(status == "scored" for status, _ in live.values())
    transcripts = list((store / "runs" / "w" / "transcripts").rglob("*.json"))
    assert len(transcripts) == 64
    doc = json.loads(transcripts[0].read_text())
    assert doc["verdict"]["status"] == "not_executed" and doc["turn_kinds"]

    doctor = cli("doctor", "--env", "wordle", "--tasks", BUNDLED_TASKS, "--json")
    assert doctor.exit_code == 0, doctor.output
    report = json.loads(doctor.stdout)
    assert report["broken"] == [] and not any(d["warnings"] for d in report["diagnoses"])

    rollouts = _rollouts_file(store, "w", tmp_path / "rollouts.jsonl")
    scored = cli("score", rollouts, "--env", "wordle", "--tasks", BUNDLED_TASKS, "--out", store, "--run-id", "s")
    assert scored.exit_code == 0, scored.output
    assert _by_rollout(store, "s") == live
    by_reward = cli("score", rollouts, "--reward", "wordle", "--tasks", BUNDLED_TASKS, "--out", store, "--run-id", "r")
    assert by_reward.exit_code == 0, by_reward.output
    assert _by_rollout(store, "r") == live
    replayed = cli(
        "run",
        "--env",
        "wordle",
        "--tasks",
        BUNDLED_TASKS,
        "--policy",
        "replay",
        "--rollouts",
        rollouts,
        "--out",
        store,
        "--run-id",
        "p",
    )
    assert replayed.exit_code == 0, replayed.output
    assert _by_rollout(store, "p") == live

    monitored = cli("monitor", store, "--run-id", "w", "--json")
    assert monitored.exit_code == 0, monitored.output
    html = tmp_path / "report.html"
    reported = cli("report", store, "--run-id", "w", "--out", html)
    assert reported.exit_code == 0, reported.output
    assert "wasted_guesses" in html.read_text()
    shown = cli("show", store, "--run-id", "w", "--rollout", next(iter(live)), "--step", "0")
    assert shown.exit_code == 0 and "<guess>" in shown.output


def test_a_recording_made_with_another_word_list_does_not_replay(cli, tmp_path):
    state, game = play([g("qzxvj"), g("crane")], env=ENVIRONMENT.configure(dictionary="off"))
    rows = tmp_path / "tasks.jsonl"
    rows.write_text(json.dumps(game.model_dump()) + "\n")
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text(
        json.dumps(
            {
                "rollout_id": "k0",
                "group_id": "g",
                "task_id": game.task_id,
                "step": 0,
                "messages": [m.model_dump() for m in state.messages],
            }
        )
        + "\n"
    )
    result = cli("score", rollouts, "--env", "wordle", "--tasks", rows, "--out", tmp_path / "st", "--json")
    record = json.loads(result.stdout)
    assert record["status"] == "error" and record["error"]["kind"] == "replay_failed"


def test_run_takes_the_dictionary_option(cli, tmp_path):
    result = cli(
        "run",
        "--env",
        "wordle",
        "--env-option",
        "dictionary=off",
        "--tasks",
        BUNDLED_TASKS,
        "--steps",
        "1",
        "--groups-per-step",
        "2",
        "--group-size",
        "2",
        "--out",
        tmp_path,
        "--run-id",
        "o",
        "--json",
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["manifest"]["configuration"]["env_options"] == {"dictionary": "off"}
    bad = cli(
        "run",
        "--env",
        "wordle",
        "--env-option",
        "dictionary=/nope",
        "--tasks",
        BUNDLED_TASKS,
        "--out",
        tmp_path,
        "--run-id",
        "b",
    )
    assert bad.exit_code != 0 and "not a file" in bad.output


def test_the_aws_samples_rows_run_from_the_command_line(cli, tmp_path):
    rows = tmp_path / "sample.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"id": f"s{i}", "metadata": {"prompt": PROMPT, "answer": word}}) + "\n"
            for i, word in enumerate(["crane", "geese", "llama"])
        )
    )
    result = cli(
        "run",
        "--env",
        "wordle",
        "--tasks",
        rows,
        "--steps",
        "1",
        "--groups-per-step",
        "3",
        "--group-size",
        "4",
        "--out",
        tmp_path / "st",
        "--run-id",
        "a",
        "--json",
    )
    assert result.exit_code == 0, result.output
    assert {r.task_id for r in LocalStore(tmp_path / "st").iter_records("a")} == {"s0", "s1", "s2"}
    doctor = cli("doctor", "--env", "wordle", "--tasks", rows)
    assert doctor.exit_code == 0, doctor.output


def test_envs_lists_both_new_built_ins(cli):
    result = cli("envs", "--json")
    listed = json.loads(result.stdout)
    environments = {row["name"]: row for row in listed["environments"]}
    assert environments["wordle"]["builtin"] and environments["wordle"]["problem"] is None
    assert environments["tool_call"]["reference"] == "rewardpipe.envs.tool_call:ENVIRONMENT"
    rewards = {row["name"]: row for row in listed["rewards"]}
    assert rewards["wordle"]["components"] == WORDLE.component_names


def test_turn_results_match_the_literal_values():
    assert {TurnResult.GUESS, TurnResult.SOLVED, TurnResult.REPEAT, TurnResult.NOT_A_WORD, TurnResult.MALFORMED} == set(
        WordleState.model_fields["turn_results"].annotation.__args__[0].__args__
    )
