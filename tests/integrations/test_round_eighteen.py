"""Round eighteen, integrations: a failure in monitoring (the cross-process gather, a rank's rows, the store)
is a logged failure, never an exception out of a reward function, and one bad row costs only itself."""

from __future__ import annotations

import logging
import math

import pytest

from tests.test_trl_integration import _FakeTrainer, _gsm8k_batch


def _monitor(gather=None, store=None, run_id="r18"):
    from rewardpipe.integrations.trl import RewardPipeMonitor

    return RewardPipeMonitor(reward="gsm8k", gather=gather, store=store, run_id=run_id)


def _run(callback, group_size=4, groups=2):
    prompts, completions, columns = _gsm8k_batch(groups=groups, size=4)
    trainer = _FakeTrainer(callback.reward_funcs, [0.5, 1.0], group_size)
    out = [
        fn(prompts=prompts, completions=completions, log_metric=trainer._log_metric, trainer_state=None, **columns)
        for fn in callback.reward_funcs
    ]
    return out, trainer


# -- T1: the gather runs inside the monitor's guard ----------------------------------------------------


@pytest.mark.parametrize(
    "gather",
    [
        pytest.param(lambda rows: (_ for _ in ()).throw(RuntimeError("NCCL watchdog timeout")), id="gather-raises"),
        pytest.param(lambda rows: None, id="gather-returns-none"),
        pytest.param(lambda rows: rows + rows[:3], id="ranks-of-unequal-lengths"),
    ],
)
def test_t1_a_failing_gather_is_a_logged_failure_and_the_rewards_are_still_returned(gather, caplog):
    callback = _monitor(gather=gather)
    with caplog.at_level(logging.WARNING, logger="rewardpipe.trl"):
        out, _ = _run(callback)
    assert out[0] == [1.0] * 8 and out[1] == [0.0, 1.0] * 4  # TRL gets its rewards, training goes on
    assert callback.failures and callback.batches == 1
    assert "within-group monitor failed" in caplog.text


def test_t1_an_unknown_group_size_is_a_logged_failure_not_a_stopped_run(caplog):
    from rewardpipe.integrations.trl import RewardPipeMonitor

    callback = RewardPipeMonitor(reward="gsm8k")
    prompts, completions, columns = _gsm8k_batch(groups=1, size=4)
    fmt, correct = callback.reward_funcs
    fmt(prompts=prompts, completions=completions, **columns)  # no trainer behind the hook, no on_train_begin
    assert correct(prompts=prompts, completions=completions, **columns) == [0.0, 1.0] * 2
    assert callback.failures and "group size" in callback.failures[0]


# -- T2: a rank's malformed rows are error records of their own -----------------------------------------


def _bad_rank(row):
    return lambda rows: rows + [row] * 4


@pytest.mark.parametrize(
    ("row", "kind"),
    [
        pytest.param(({"format": math.nan, "answer_correct": 1.0}, None, {}), "non_finite_score", id="nan"),
        pytest.param(({"format": math.inf, "answer_correct": 1.0}, None, {}), "non_finite_score", id="inf"),
        pytest.param(({"format": 1e300, "answer_correct": 1.0}, None, {}), "component_out_of_range", id="huge"),
        pytest.param(({"format": "1.0", "answer_correct": 1.0}, None, {}), "malformed_row", id="text-value"),
        pytest.param(None, "malformed_row", id="none-row"),
        pytest.param(({"format": 1.0, "answer_correct": 1.0}, 5, {}), "malformed_row", id="kind-not-text"),
        pytest.param(({"format": 1.0, "answer_correct": 1.0}, None, {"metrics": "zz"}), None, id="metrics-text"),
    ],
)
def test_t2_one_ranks_malformed_row_is_its_own_error_record(row, kind, tmp_path):
    from rewardpipe.store import LocalStore

    callback = _monitor(gather=_bad_rank(row), store=str(tmp_path))
    _run(callback)
    assert callback.failures == []  # the batch was judged and stored
    report = callback.reports[0]
    assert report.groups == 3
    records = sorted(LocalStore(tmp_path).iter_records("r18"), key=lambda r: int(r.rollout_id[1:]))
    assert len(records) == 12
    assert all(r.status == "scored" for r in records[:8])
    if kind is None:
        assert all(r.status == "scored" for r in records[8:])
    else:
        assert [(r.status, r.error.kind) for r in records[8:]] == [("error", kind)] * 4
        assert all(v is None for r in records[8:] for v in r.components.values())
        assert report.error_rate == pytest.approx(4 / 12)


# -- T3: a failing store loses what it refused, never the alarms and state after it, never the run ------


class _FlakyStore:
    """A store refusing its ``refuse``-th record write (a throttled bucket); ``refuse_json`` refuses every
    JSON write (the alarm objects and the monitor state: access denied on the prefix)."""

    def __init__(self, refuse=3, refuse_json=False):
        self.refuse, self.refuse_json = refuse, refuse_json
        self.records, self.json, self.calls = [], [], 0

    def put_record(self, record):
        self.calls += 1
        if self.calls == self.refuse:
            raise RuntimeError("SlowDown: please reduce your request rate")
        self.records.append(record)

    def get_bytes(self, key):
        raise KeyError(key)

    def put_json(self, key, obj):
        if self.refuse_json:
            raise PermissionError("AccessDenied")
        self.json.append(key)
        return key


def test_t3_a_refused_record_write_still_stores_the_alarms_and_the_monitor_state(caplog):
    store = _FlakyStore(refuse=3)
    callback = _monitor(store=store)
    with caplog.at_level(logging.WARNING, logger="rewardpipe.trl"):
        out, trainer = _run(callback, groups=4)  # 4 groups: format (1.0 everywhere) is dead at once
    assert out[1] == [0.0, 1.0] * 8 and callback.batches == 1
    assert "rewardpipe/error_rate" in dict(trainer.logged)
    assert len(store.records) == 2 and store.calls == 3  # the batch's writes stop at the refusal (no stall)
    assert callback.alarms
    alarms = [k for k in store.json if "/alarms/" in k or "alarm" in k]
    assert len(alarms) == len(callback.alarms)  # before: no alarm was stored
    assert "runs/r18/monitor/state.json" in store.json  # nor the monitor state
    assert any("14 record(s) from c2 on" in f for f in callback.failures)
    assert "not stored" in caplog.text
    _run(callback, groups=4)  # the next batch is written in full
    assert len(store.records) == 2 + 16


def test_t3_a_refused_alarm_and_state_are_reported_and_training_goes_on():
    store = _FlakyStore(refuse=0, refuse_json=True)
    callback = _monitor(store=store)
    out, _ = _run(callback, groups=4)
    assert out[0] == [1.0] * 16 and len(store.records) == 16
    assert callback.alarms and callback.batches == 1
    assert any("monitor state" in f for f in callback.failures)
    assert any(f.startswith("not stored: alarm") for f in callback.failures)


# -- T4-T6: a completion with no answer is malformed trainer input: an error, never an empty answer's 0 ---

NO_ANSWER = [
    pytest.param(None, id="none"),
    pytest.param(5, id="number"),
    pytest.param([], id="empty-list"),
    pytest.param([{"role": "user", "content": "#### 1"}], id="user-turns-only"),
    pytest.param([{"role": "assistant", "content": 5}], id="assistant-content-not-text"),
]


@pytest.mark.parametrize("completion", NO_ANSWER)
@pytest.mark.parametrize("reward", ["gsm8k", "code_correctness"])
def test_t4_trl_a_completion_without_an_answer_is_none_not_zero(completion, reward):
    from rewardpipe.integrations.trl import reward_functions

    funcs, _ = reward_functions(reward)
    columns = [f(prompts=["q", "q"], completions=[completion, "#### 1"], answer=["1", "1"]) for f in funcs]
    assert all(column[0] is None for column in columns)  # TRL leaves it out of the group's baseline
    if reward == "gsm8k":
        assert [column[1] for column in columns] == [1.0, 1.0]  # its neighbour is scored


def test_t4_trl_an_empty_answer_is_still_scored():
    from rewardpipe.integrations.trl import reward_functions

    funcs, _ = reward_functions("gsm8k")
    for empty in ("", [{"role": "assistant", "content": ""}]):
        assert [f(prompts=["q"], completions=[empty], answer=["1"]) for f in funcs] == [[0.0], [0.0]]


@pytest.mark.parametrize("solution", [None, 5, 1.5])
def test_t5_verl_a_solution_that_is_not_text_is_reward_error_not_zero(solution):
    from rewardpipe.integrations.verl import compute_score

    out = compute_score("gsm8k", solution, "1")
    assert out["reward_error"] == 1.0 and math.isnan(out["format"]) and math.isnan(out["answer_correct"])
    assert compute_score("gsm8k", "", "1")["reward_error"] == 0.0  # an empty answer is scored (a 0)


@pytest.mark.parametrize("completion", [None, 5])
def test_t6_verifiers_a_completion_that_is_not_text_is_nan_not_zero(completion):
    from rewardpipe.integrations.verifiers import rubric_functions

    funcs, _ = rubric_functions("gsm8k")
    assert all(math.isnan(f(completion=completion, answer="1", prompt="q")) for f in funcs)
    assert [f(completion="", answer="1", prompt="q") for f in funcs] == [0.0, 0.0]


# -- T7: the TRL multi-turn rollout: an environment reply the tokenizer refuses costs its own episode ------


def test_t7_an_environment_reply_the_codec_cannot_tokenize_is_that_episodes_error_record():
    from tests.test_trl_episodes import ASKER, GUESSER, CharCodec, ScriptedModel, rollout

    class RefusingCodec(CharCodec):
        """A chat template that raises on the environment's reply (jinja's raise_exception on its role)."""

        def feedback_ids(self, reply, conversational):
            raise ValueError("Conversation roles must alternate user/assistant/user/assistant/...")

    r = rollout()
    episodes = r.play([ASKER.prompt, GUESSER.prompt], RefusingCodec(), ScriptedModel(), max_completion_tokens=4000)
    asker, guesser = episodes
    assert asker.record.status == "error" and asker.record.error.kind == "env_render_error"
    assert set(asker.record.components.values()) == {None}
    assert len(asker.tokens.completion_ids) == len(asker.tokens.env_mask)
    assert guesser.record.status == "scored"


def test_t7b_a_prompt_the_codec_cannot_tokenize_is_that_episodes_error_record():
    """Round nineteen (left open in round eighteen): the prompt's own tokens were taken outside any guard, so
    one prompt the chat template refused stopped the whole multi-turn batch. It is that episode's error
    record (prompt_render_error), with one filler token each side for TRL; the others play on."""
    from tests.test_trl_episodes import ASKER, GUESSER, CharCodec, ScriptedModel, rollout

    class RefusingCodec(CharCodec):
        def prompt_ids(self, prompt):
            if prompt == ASKER.prompt:
                raise ValueError("Conversation roles must alternate user/assistant/user/assistant/...")
            return super().prompt_ids(prompt)

    r = rollout()
    episodes = r.play([ASKER.prompt, GUESSER.prompt], RefusingCodec(), ScriptedModel(), max_completion_tokens=4000)
    asker, guesser = episodes
    assert asker.record.status == "error" and asker.record.error.kind == "prompt_render_error"
    assert "roles must alternate" in asker.record.error.message and asker.record.task_id == ASKER.task_id
    assert set(asker.record.components.values()) == {None}
    assert len(asker.tokens.prompt_ids) == 1 and len(asker.tokens.completion_ids) == len(asker.tokens.env_mask) == 1
    assert guesser.record.status == "scored"
    from rewardpipe.integrations.trl_episodes import rollout_output

    output = rollout_output(episodes)
    assert len(output["prompt_ids"][0]) == 1 and len(output["completion_ids"]) == 2


# -- T8: a process whose own view failed still takes part in the gather (a collective) ---------------------


def test_t8_a_rank_that_fails_before_the_gather_still_joins_it_and_its_rows_are_errors():
    from rewardpipe.integrations.trl import RewardPipeMonitor

    prompts, completions, columns = _gsm8k_batch(groups=4, size=4)
    pending: dict[int, list] = {}
    joined: list[int] = []

    def gather_from(rank):
        def gather(rows):
            joined.append(rank)
            pending[rank] = list(rows)
            return pending.get(0, []) + pending.get(1, [])

        return gather

    ranks = {r: RewardPipeMonitor(reward="gsm8k", gather=gather_from(r)) for r in (0, 1)}

    def broken_view(trainer):
        raise AttributeError("'NoneType' object has no attribute 'tolist'")

    ranks[1]._trainer_view = broken_view
    for rank in (1, 0):
        cb = ranks[rank]
        half = slice(8 * rank, 8 * rank + 8)
        trainer = _FakeTrainer(cb.reward_funcs, [0.5, 1.0], 4)
        for fn in cb.reward_funcs:
            fn(
                prompts=prompts[half],
                completions=completions[half],
                log_metric=trainer._log_metric,
                answer=columns["answer"][half],
            )
    assert joined == [1, 0]  # before: rank 1 raised before the gather and rank 0 waited in it
    assert ranks[1].failures and "tolist" in ranks[1].failures[0]
    assert ranks[0].failures == [] and ranks[0].reports[0].groups == 4


# -- T9: what TRL serves back of the episode field is read, not trusted ------------------------------------


def test_t9_a_malformed_episode_row_is_its_own_error_and_the_others_are_served(caplog):
    from rewardpipe.integrations.trl_episodes import EPISODE_FIELD, rollout_output
    from tests.test_trl_episodes import ASKER, GUESSER, play

    r, _, episodes = play([ASKER.prompt, GUESSER.prompt])
    rows = rollout_output(episodes)[EPISODE_FIELD]
    scored = dict(rows[0])
    rows = [
        {**scored, "assistant_turns": "many"},  # a metric that is not a number: logging it fails, not the batch
        "garbage",  # not a row at all
        {**scored, "components": {**scored["components"], "correctness": "1.0"}},  # a component that is text
        {**scored, "components": {**scored["components"], "correctness": math.nan}},
        dict(rows[1]),
    ]
    funcs, _ = r.reward_functions()
    logged = []
    with caplog.at_level(logging.WARNING, logger="rewardpipe.trl"):
        values = {
            f.rewardpipe_component: f(
                prompts=[""] * 5,
                completions=[""] * 5,
                log_metric=lambda n, v: logged.append(n),
                **{EPISODE_FIELD: rows},
            )
            for f in funcs
        }
    assert values["correctness"] == [1.0, None, None, None, 0.0]
    assert values["guessed_immediately"] == [0.0, None, None, None, -1.0]
    assert "metrics could not be logged" in caplog.text
