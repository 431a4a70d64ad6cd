"""The multi-turn TRL rollout (rewardpipe.integrations.trl_episodes) without TRL: a character codec and a
scripted generator stand in for the tokenizer and the model; the simulator, sandbox and reward are real.
The real GRPOTrainer run is tests/integrations/test_trl_real.py::test_multi_turn_*."""

from __future__ import annotations

import pytest

from rewardpipe.envs.ask_before_coding.environment import AskBeforeCoding
from rewardpipe.envs.ask_before_coding.scenarios import stub_guess
from rewardpipe.integrations.trl_episodes import (
    EPISODE_FIELD,
    PLAIN_FEEDBACK,
    EpisodeRollout,
    EpisodeScorer,
    cut_at_eos,
    rollout_output,
)
from rewardpipe.models import load_tasks
from rewardpipe.policies import fenced

EOS = 0
TASKS = load_tasks("rewardpipe/data/tasks.jsonl")[:2]
ASKER, GUESSER = TASKS  # the script below asks on the first task's prompt and guesses on the second's
QUESTION = "Are there any other details or edge cases I should know about?"
# One generic question per hidden detail, each worded differently: the same question asked again is a loop.
QUESTIONS = [
    QUESTION,
    "Before I write this, could you tell me more about the requirements?",
    "Is there anything more about the expected behaviour I should know?",
    "What else should I keep in mind: any constraints on the input?",
]


class CharCodec:
    """Token = character code; 0 is EOS."""

    eos_id = EOS

    def prompt_ids(self, prompt):
        text = prompt if isinstance(prompt, str) else prompt[-1]["content"]
        return [ord(c) for c in text]

    def decode(self, ids):
        return "".join(chr(i) for i in ids if i != EOS)

    def feedback_ids(self, reply, conversational):
        return [ord(c) for c in PLAIN_FEEDBACK.format(reply=reply)]


class ScriptedModel:
    """Answers each context like a model would: on the asker's task, a question per hidden detail (it reads
    how many the simulator has revealed off the context), then the reference solution; on the other task, a
    signature-only guess. Appends EOS and padding after it, as ``generate`` does."""

    def __init__(self):
        self.calls: list[int] = []

    def turn(self, text: str) -> str:
        if text.startswith(GUESSER.prompt):
            return "Here it is:\n" + fenced(stub_guess(GUESSER))
        revealed = sum(1 for item in ASKER.spec if item in text)
        if revealed < len(ASKER.spec):
            return QUESTIONS[revealed % len(QUESTIONS)]
        return "Thanks, here it is:\n" + fenced(ASKER.reference_solution)

    def __call__(self, contexts, max_new_tokens):
        self.calls.append(len(contexts))
        out = []
        for context in contexts:
            ids = [ord(c) for c in self.turn(CharCodec().decode(context))] + [EOS, EOS, EOS]
            out.append(ids[:max_new_tokens])
        return out


def rollout(**kwargs):
    return EpisodeRollout(TASKS, max_turns=kwargs.pop("max_turns", 6), **kwargs)


def play(prompts, budget=4000, **kwargs):
    model = ScriptedModel()
    r = rollout(**kwargs)
    return r, model, r.play(prompts, CharCodec(), model, max_completion_tokens=budget, group_size=2)


def test_an_episode_asks_the_simulator_then_commits_and_is_scored_against_the_hidden_tests():
    r, model, episodes = play([ASKER.prompt, ASKER.prompt, GUESSER.prompt, GUESSER.prompt])
    asker, guesser = episodes[0], episodes[2]
    assert asker.record.status == "scored"
    assert asker.record.components == {
        "correctness": 1.0,
        "asked_before_coding": 1.0,
        "guessed_immediately": 0.0,
        "loop_penalty": 0.0,
    }
    row = asker.row(r.env)
    assert row["simulator_replies"] == len(ASKER.spec) and row["spec_revealed"] == len(ASKER.spec)
    assert asker.execution is not None and asker.execution.passed == asker.execution.total > 0
    assert guesser.record.components["correctness"] == 0.0
    assert guesser.record.components["guessed_immediately"] == -1.0
    assert guesser.row()["simulator_replies"] == 0 and guesser.tokens.env_mask == [1] * len(
        guesser.tokens.completion_ids
    )
    # All live episodes' turns are generated together: 4 on the first round, then only the askers.
    assert model.calls == [4] + [2] * len(ASKER.spec)


def test_the_masks_mark_the_models_tokens_and_hide_the_simulators():
    _, _, episodes = play([ASKER.prompt])
    tokens = episodes[0].tokens
    codec = CharCodec()
    assert tokens.prompt_ids == codec.prompt_ids(ASKER.prompt)
    assert len(tokens.env_mask) == len(tokens.completion_ids)
    model_text = codec.decode([t for t, m in zip(tokens.completion_ids, tokens.env_mask) if m])
    simulator_text = codec.decode([t for t, m in zip(tokens.completion_ids, tokens.env_mask) if not m])
    assert sum(model_text.count(q) for q in QUESTIONS) == len(ASKER.spec)
    assert ASKER.reference_solution.strip() in model_text
    assert simulator_text == "".join(PLAIN_FEEDBACK.format(reply=item) for item in ASKER.spec)
    assert not any(item in model_text for item in ASKER.spec)  # the hidden spec is never trained on
    # Each model turn keeps its EOS (the padding after it is dropped).
    assert tokens.completion_ids.count(EOS) == len(ASKER.spec) + 1


def test_the_completion_never_exceeds_the_budget_and_a_reply_that_leaves_no_room_ends_the_episode():
    question_tokens = len(QUESTION) + 1
    budget = question_tokens + 40  # room for one question, not for the simulator's reply and another turn
    _, _, episodes = play([ASKER.prompt], budget=budget)
    episode = episodes[0]
    assert len(episode.tokens.completion_ids) <= budget
    assert episode.state.end_reason == "completion_budget"
    assert episode.record.status == "scored" and episode.record.components["correctness"] == 0.0
    assert [m.role for m in episode.state.messages] == ["user", "assistant"]  # the reply that did not fit is gone
    assert episode.tokens.env_mask == [1] * question_tokens


def test_a_turn_is_cut_at_max_turn_tokens():
    _, _, episodes = play([GUESSER.prompt], max_turn_tokens=5, max_turns=2)
    ids = episodes[0].tokens
    assert ids.env_mask.count(1) <= 10 and episodes[0].state.assistant_turns == 2


def test_a_prompt_naming_no_task_is_an_error_record_and_the_others_are_scored():
    _, _, episodes = play(["what is 1+1?", GUESSER.prompt])
    unknown, known = episodes
    assert unknown.record.status == "error" and unknown.record.error.kind == "unknown_task"
    assert set(unknown.record.components.values()) == {None}
    assert unknown.tokens.completion_ids == [EOS] and unknown.tokens.env_mask == [0]  # no loss on it
    assert known.record.status == "scored"


def test_a_simulator_failure_costs_its_own_episode_an_error_record():
    class BrokenSimulator:
        def respond(self, state, task):
            raise RuntimeError("simulator down")

    _, _, episodes = play([ASKER.prompt, GUESSER.prompt], env=AskBeforeCoding(BrokenSimulator()))
    assert episodes[0].record.error.kind == "simulator_error" and "simulator down" in episodes[0].record.error.message
    assert episodes[1].record.status == "scored"


def test_conversational_prompts_and_instructions_find_their_task():
    r = rollout(instructions="Ask before you code.")
    rows = r.dataset_rows(conversational=True)
    assert rows[0]["prompt"][0] == {"role": "system", "content": "Ask before you code."}
    assert r.task_for(rows[0]["prompt"]) is ASKER
    assert r.task_for(r.dataset_rows()[1]["prompt"]) is GUESSER
    assert r.task_for([{"role": "user", "content": GUESSER.prompt}]) is GUESSER  # a user-made dataset
    assert r.task_for("something else") is None


def test_groups_that_share_a_prompt_take_its_tasks_in_turn_one_task_per_group():
    """Every game of an environment may open with the same prompt (Wordle): TRL hands rollout_func the
    prompts only, so the groups of a shared prompt take its tasks in turn, and a group is always one task."""
    twin = ASKER.model_copy(update={"task_id": "twin"})
    r = EpisodeRollout([ASKER, twin], max_turns=6)
    episodes = r.play([ASKER.prompt] * 6, CharCodec(), ScriptedModel(), max_completion_tokens=4000, group_size=2)
    assert [e.task.task_id for e in episodes] == [ASKER.task_id] * 2 + ["twin"] * 2 + [ASKER.task_id] * 2
    assert all(e.record.status == "scored" for e in episodes)
    assert [e.rollout_id for e in episodes][:2] == ["b0-g0-k0", "b0-g0-k1"]


def test_reward_functions_serve_each_component_and_none_for_error_records():
    r, _, episodes = play(["no such task", ASKER.prompt, GUESSER.prompt, GUESSER.prompt])
    out = rollout_output(episodes)
    assert set(out) == {"prompt_ids", "completion_ids", "logprobs", "env_mask", EPISODE_FIELD}
    funcs, weights = r.reward_functions()
    assert [f.__name__ for f in funcs] == [f"ask_before_coding_{n}" for n in r.reward.component_names]
    assert weights == [1.0, 0.6, 0.4, 0.2]
    logged = []
    values = {
        f.rewardpipe_component: f(
            prompts=[""] * 4,
            completions=[""] * 4,
            log_metric=lambda n, v: logged.append((n, v)),
            **{EPISODE_FIELD: out[EPISODE_FIELD]},
        )
        for f in funcs
    }
    assert values["correctness"] == [None, 1.0, 0.0, 0.0]
    assert values["guessed_immediately"] == [None, 0.0, -1.0, -1.0]
    metrics = dict(logged)
    assert metrics["rewardpipe/episode/simulator_replies"] == pytest.approx(len(ASKER.spec) / 4)
    assert 0 < metrics["rewardpipe/episode/simulator_token_fraction"] < 1
    with pytest.raises(ValueError, match="rollout_func"):
        funcs[0](prompts=["x"], completions=["y"])


def test_the_callback_monitors_the_episodes_components_within_groups():
    from rewardpipe.integrations.trl import RewardPipeMonitor

    r, _, episodes = play([ASKER.prompt, ASKER.prompt, GUESSER.prompt, GUESSER.prompt])
    monitor = RewardPipeMonitor(episodes=r, run_id="mt")
    assert monitor.reward.name == "ask_before_coding" and isinstance(monitor.scorer, EpisodeScorer)

    class Trainer:
        reward_funcs, reward_weights, num_generations = monitor.reward_funcs, [1.0, 0.6, 0.4, 0.2], 2
        model = type("M", (), {"training": True})()
        logged: list = []

        def _log_metric(self, name, value):
            self.logged.append((name, value))

    trainer = Trainer()
    rows = rollout_output(episodes)[EPISODE_FIELD]
    for fn in monitor.reward_funcs:
        fn(prompts=[""] * 4, completions=[""] * 4, log_metric=trainer._log_metric, **{EPISODE_FIELD: rows})
    logged = dict(trainer.logged)
    # Each group repeats one behaviour: every component is constant inside both groups.
    assert logged["rewardpipe/correctness/zero_variance_group_fraction"] == 1.0
    assert logged["rewardpipe/episode/committed"] == 1.0
    report = monitor.reports[0]
    assert report.groups == 2 and report.scored == 4
    assert report.components["correctness"].zero_variance_group_fraction == 1.0


def test_cut_at_eos_keeps_the_eos_and_drops_the_padding():
    assert cut_at_eos([5, 6, 0, 0, 7], 0) == [5, 6, 0]
    assert cut_at_eos([5, 6], 0) == [5, 6]
    assert cut_at_eos([5, 6], None) == [5, 6]


def test_a_single_turn_reward_is_refused_for_episodes():
    with pytest.raises(ValueError, match="single-turn"):
        EpisodeRollout(TASKS, reward="gsm8k")


def test_the_callbacks_store_gets_each_episodes_task_and_how_it_went(tmp_path):
    from rewardpipe.integrations.trl import RewardPipeMonitor
    from rewardpipe.store import LocalStore

    r, _, episodes = play([ASKER.prompt, ASKER.prompt, GUESSER.prompt, GUESSER.prompt])
    monitor = RewardPipeMonitor(episodes=r, run_id="mt", store=str(tmp_path))

    class Trainer:
        reward_funcs, reward_weights, num_generations = monitor.reward_funcs, [1.0, 0.6, 0.4, 0.2], 2
        model = type("M", (), {"training": True})()

        def _log_metric(self, name, value):
            pass

    rows = rollout_output(episodes)[EPISODE_FIELD]
    for fn in monitor.reward_funcs:
        fn(prompts=[""] * 4, completions=[""] * 4, log_metric=Trainer()._log_metric, **{EPISODE_FIELD: rows})
    records = sorted(LocalStore(tmp_path).iter_records("mt"), key=lambda rec: rec.rollout_id)
    assert [rec.task_id for rec in records] == [ASKER.task_id] * 2 + [GUESSER.task_id] * 2
    assert (
        records[0].metrics["simulator_replies"] == len(ASKER.spec) and records[0].metrics["end_reason"] == "committed"
    )
    assert records[2].metrics["simulator_replies"] == 0 and records[2].components["guessed_immediately"] == -1.0
