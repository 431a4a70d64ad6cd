"""Round sixteen: the built-in environments played the same way through every door, and gamed."""

from __future__ import annotations

import pytest

from rewardpipe.envs.wordle.environment import ENVIRONMENT as WORDLE
from rewardpipe.envs.wordle.tasks import WordleTask
from rewardpipe.integrations.trl_episodes import PLAIN_FEEDBACK, EpisodeRollout
from rewardpipe.runner import NoSandbox, plan_step, run_slots

EOS = 0
GAME = WordleTask(task_id="w16", prompt="Let's play Wordle: <guess>word</guess>, 6 guesses.", answer="crane")
#: Four misses, then the answer: solved on the fifth of six guesses (the wordle environment allows 10 turns).
GUESSES = ["slate", "moist", "pound", "build", "crane"]


class CharCodec:
    """Token = character code; 0 is EOS (tests/test_trl_episodes.py's)."""

    eos_id = EOS

    def prompt_ids(self, prompt):
        return [ord(c) for c in prompt]

    def decode(self, ids):
        return "".join(chr(i) for i in ids if i != EOS)

    def feedback_ids(self, reply, conversational):
        return [ord(c) for c in PLAIN_FEEDBACK.format(reply=reply)]


def _turn(guessed: int) -> str:
    return f"<guess>{GUESSES[min(guessed, len(GUESSES) - 1)]}</guess>"


class Player:
    def next_turn(self, state, task):
        return _turn(state.assistant_turns)


def _model(contexts, max_new_tokens):
    return [
        ([ord(c) for c in _turn(CharCodec().decode(context).count("Guess "))] + [EOS])[:max_new_tokens]
        for context in contexts
    ]


def _play(tasks, policy, env, group_size=1, **options):
    """``run_slots`` over one step of ``tasks`` with no sandbox: its records and the rollouts it recorded."""
    transcripts = []
    records = run_slots(
        plan_step(tasks, 0, len(tasks), group_size),
        policy=policy,
        env=env,
        executor=NoSandbox(),
        run_id="r16",
        on_transcript=transcripts.append,
        **options,
    )
    return records, [t.to_rollout() for t in transcripts]


def test_a_wordle_game_scores_the_same_through_run_and_the_trl_rollout():
    """EpisodeRollout's max_turns defaulted to 4 (its docstring: "default: the environment's"), so a game the
    local run scores as solved on guess 5 was cut at turn 4 in TRL: turn_limit, solved 0."""
    (local,) = run_slots(plan_step([GAME], 0, 1, 1), policy=Player(), env=WORDLE, executor=NoSandbox(), run_id="r16")
    assert local.status == "scored" and local.components["solved"] == 1.0 and local.metrics["guesses"] == 5
    rollout = EpisodeRollout([GAME], env="wordle")
    (episode,) = rollout.play([GAME.prompt], CharCodec(), _model, max_completion_tokens=20000, group_size=1)
    trl = episode.record
    assert trl.metrics["end_reason"] == local.metrics["end_reason"] == "solved"
    assert trl.components == local.components and trl.aggregate == local.aggregate


def test_a_word_list_that_is_not_utf8_is_an_error_naming_the_file(tmp_path):
    """``--env-option dictionary=PATH`` with a file in another encoding said only "'utf-8' codec can't decode
    byte 0xff in position 0", naming no file (its other problems name the file and line)."""
    words = tmp_path / "words-latin1.txt"
    words.write_bytes("crane\nsl\xe2te\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"words-latin1\.txt") as raised:
        WORDLE.configure(dictionary=str(words))
    assert "UTF-8" in str(raised.value)


def test_scoring_a_recorded_episode_gives_the_record_the_run_wrote():
    """``rewardpipe score`` (score_rollouts: the recording replayed through the environment) wrote records with
    no metrics at all, where ``rewardpipe run`` writes the end reason and the environment's own (guesses,
    calls, invalid_calls...), although every path is documented to write the same document. (The
    ask_before_coding runs, turn limits included, are compared in tests/envs/test_ask_before_coding_golden.py.)"""
    from rewardpipe.envs.tool_call.environment import ENVIRONMENT as TOOL_CALL
    from rewardpipe.envs.tool_call.tasks import BUNDLED_TASKS as TOOL_TASKS
    from rewardpipe.envs.tool_call.tasks import ToolCallTask
    from rewardpipe.models import load_task_rows
    from rewardpipe.runner import score_rollouts

    tool_tasks = load_task_rows(TOOL_TASKS, ToolCallTask)[:3]
    for env, tasks, policy in [
        (WORDLE, [GAME], Player()),
        (TOOL_CALL, tool_tasks, TOOL_CALL.scripted_policy(seed=3)),
    ]:
        played, rollouts = _play(tasks, policy, env, group_size=4)
        scored = score_rollouts(
            rollouts,
            {task.task_id: task for task in tasks},
            executor=NoSandbox(),
            env=env,
            run_id="r16",
        )
        assert [r.status for r in played] == ["scored"] * len(played)
        assert [r.model_dump() for r in scored] == [r.model_dump() for r in played], env.name


def test_a_recording_cut_by_the_turn_limit_is_scored_with_the_end_reason_the_run_gave():
    """A game stopped by ``--max-turns`` is ``turn_limit`` in run's record; ``score`` (told the same limit) says
    the same, where it said nothing; scored under a higher limit it is the environment's end, not a turn limit."""
    from rewardpipe.runner import score_rollouts

    (played,), recorded = _play([GAME], Player(), WORDLE, max_turns=3)
    assert played.metrics["end_reason"] == "turn_limit"
    rollouts = [rollout.model_copy(update={"end_reason": None}) for rollout in recorded]  # a recording from elsewhere
    (scored,) = score_rollouts(
        rollouts, {GAME.task_id: GAME}, executor=NoSandbox(), env=WORDLE, run_id="r16", max_turns=3
    )
    assert scored.model_dump() == played.model_dump()
    (unlimited,) = score_rollouts(rollouts, {GAME.task_id: GAME}, executor=NoSandbox(), env=WORDLE, run_id="r16")
    assert unlimited.metrics["end_reason"] != "turn_limit"
    # Round nineteen: the run's own recording says how it ended, whatever limit score is told.
    assert recorded[0].end_reason == "turn_limit"
    (declared,) = score_rollouts(recorded, {GAME.task_id: GAME}, executor=NoSandbox(), env=WORDLE, run_id="r16")
    assert declared.model_dump() == played.model_dump()


def test_score_max_turns_names_the_turn_limit_the_run_stopped_at(tmp_path):
    """Through the CLI: a run with ``--max-turns 2``, its conversations scored with ``score --max-turns 2``, gives
    the run's records (turn limits included); scored without it, a turn-limited one is not called a turn limit."""
    import json

    from typer.testing import CliRunner

    from rewardpipe.cli import app
    from tests.envs.golden_runs import TASKS, _rollouts_of

    store, rollouts = tmp_path / "store", tmp_path / "rollouts.jsonl"
    common = ["--tasks", str(TASKS), "--out", str(store)]
    played = ["run", *common, "--policy", "scripted", "--group-size", "4", "--groups-per-step", "6"]
    for args in (
        [*played, "--steps", "1", "--seed", "7", "--max-turns", "2", "--run-id", "cut"],
        None,
        ["score", str(rollouts), *common, "--max-turns", "2", "--run-id", "scored"],
        ["score", str(rollouts), *common, "--run-id", "unlimited"],
    ):
        if args is None:
            _rollouts_of(store, "cut", rollouts)
            continue
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output

    def records(run_id):
        found = {}
        for path in (store / "runs" / run_id).glob("step=*/group=*/*.json"):
            found[path.name] = json.loads(path.read_text())
            found[path.name]["metrics"].pop("exec_ms", None)  # the execution's wall-clock time
        return found

    cut, scored, unlimited = records("cut"), records("scored"), records("unlimited")
    ends = {name: record["metrics"]["end_reason"] for name, record in cut.items()}
    assert "turn_limit" in ends.values() and "committed" in ends.values()
    assert {name: {**record, "run_id": "cut"} for name, record in scored.items()} == cut
    assert all(
        record["metrics"]["end_reason"] != "turn_limit"
        for name, record in unlimited.items()
        if ends[name] == "turn_limit"
    )


def test_a_recording_that_stops_where_the_model_was_to_speak_is_not_called_the_environments_end():
    """Round eighteen: ask_before_coding's replay left the end reason of a conversation without a commit to the
    platform, which named every one that did not stop at the turn limit ended_by_env: a recording of a run
    whose model was stopped (its context window full, its turns run out) said the simulator ended it. It says
    what the default replay says of the same recording (policy_exhausted; recording_ended when it stops where
    the user was to answer)."""
    from rewardpipe import ContextLimitReached
    from rewardpipe.envs.ask_before_coding.environment import ENVIRONMENT as ABC
    from rewardpipe.runner import score_rollouts
    from tests.core.conftest import make_task

    task = make_task()

    class Windowed:
        def next_turn(self, state, task):
            if state.assistant_turns:
                raise ContextLimitReached("full")
            return "What should happen for an empty input?"

    (played,), (recorded,) = _play([task], Windowed(), ABC)
    assert played.metrics["end_reason"] == "context_limit"
    # Round nineteen: the run's recording declares its end (score could not recover context_limit before).
    (scored,) = score_rollouts([recorded], {task.task_id: task}, executor=NoSandbox(), env=ABC, run_id="r16")
    assert scored.model_dump() == played.model_dump()
    rollout = recorded.model_copy(update={"end_reason": None})  # a recording that does not say
    (scored,) = score_rollouts([rollout], {task.task_id: task}, executor=NoSandbox(), env=ABC, run_id="r16")
    assert scored.metrics["end_reason"] == "policy_exhausted"
    cut = rollout.model_copy(update={"messages": rollout.messages[:-1]})  # stops on the model's question
    (scored,) = score_rollouts([cut], {task.task_id: task}, executor=NoSandbox(), env=ABC, run_id="r16")
    assert scored.metrics["end_reason"] == "recording_ended"
