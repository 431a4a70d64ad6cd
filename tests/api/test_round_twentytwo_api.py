"""Round twenty-two, public API (an independent review): a user's environment, reward, dataset or input that cost
more than its own sample, or was blamed on the wrong party.

* TRL episodes called the environment's ``metrics()`` twice per episode: once for the record (scoring), once
  again for the row handed to the reward functions. A ``metrics()`` that counts, samples or calls a service did
  it twice, and the row could disagree with the record. It is read once; the record and the row share it.
* The calls of an environment's hooks past ``hook_timeout_s`` were counted per environment *class*: two
  environments of one class (two configurations, each its own backend) shared the cap of 32, so one's hung
  hooks refused every call of the other's (its rollouts all ``simulator_error``). Counted per environment.
* verl: ``extra_info["question"]`` (or ``["prompt"]``) was read by its truth value: a dataset column read with
  numpy gives an array, whose ``bool()`` raises, so ``compute_score`` raised and verl's reward manager failed
  the whole batch on that one sample. Read by type.
* gsm8k read a numeric reference only when it was an ``int`` or a ``float``: ``numpy.int64`` (a parquet or
  pandas integer column, verl's ``ground_truth``) and ``Decimal`` were unreadable references, every sample of
  such a dataset an error record. Any real number is read.
* ``Reward.score(messages)`` took OpenAI-style dicts as they were: every component of the sample then "raised
  AttributeError: 'dict' object has no attribute 'role'", the caller's input blamed on the user's reward.
  Dicts are read as messages; anything else is a ValueError naming the message.
* A hook could change ``state.max_turns``: the turn limit the platform enforces (the environment's, or
  ``--max-turns``, or on AWS ``MAX_TURNS`` at most 20, which keeps an execution inside Step Functions' 25,000
  history events) was the environment's to raise, and an episode whose hook raised it ran past every limit. Such
  a hook is its rollout's ``simulator_error``, like one that changes the rollout's ids.
* An environment's ``metrics()`` (and a reward's diagnostics) returning numpy's integers or booleans
  (``numpy.int64`` from a count over an array) had them left out of the record ("'count' is a int64"), numpy's
  floats kept. Numbers of any library are kept as the Python number they are.
* An environment's metric named ``end_reason`` or ``env_metrics_error`` replaced the platform's: the record said
  the environment's own reason, not how the episode ended, or claimed a failure of ``metrics()``. Left out and
  said in ``env_metrics_error``.
* A weight or a time limit computed with numpy (``numpy.float32(0.5)``, ``numpy.int64(2)``), a Fraction or a
  Decimal was refused as "weight must be a finite number" (``timeout_s``, ``hook_timeout_s``,
  ``Reward(weights=...)`` alike): only Python's int and float were numbers. Any real number is taken, as a float.
* TRL's reward functions took a dataset column only as a list or a tuple: an ``answer`` column handed over as a
  numpy array (or a pandas Series, by a caller outside TRL) was dropped without a word, every sample without its
  reference and an error record. A one-dimensional array is read as its list.
"""

from __future__ import annotations

import threading
from decimal import Decimal

import pytest

from rewardpipe import Environment, EpisodeState, Message, Reward, TaskRow, component
from rewardpipe.episode import HookTimeout, call_hook
from tests.api.test_round_twentyone_api import Quits, Quitting


@component(range=(0, 1), role="outcome")
def said_a(completion: str) -> float:
    return float(completion == "a")


# -- TRL episodes: metrics() once per episode -------------------------------------------------------------


def test_trl_episodes_read_the_environments_metrics_once_per_episode():
    from rewardpipe.envs.ask_before_coding.environment import AskBeforeCoding
    from rewardpipe.integrations.trl_episodes import EPISODE_FIELD, EpisodeRollout, rollout_output
    from tests.test_trl_episodes import TASKS, CharCodec, ScriptedModel

    calls: list[str] = []

    class Counting(AskBeforeCoding):
        def metrics(self, state, task):
            calls.append(state.rollout_id)
            return {**super().metrics(state, task), "metrics_calls": len(calls)}

    env = Counting()
    rollout = EpisodeRollout(TASKS, env=env, max_turns=6)
    prompts = [TASKS[0].prompt, TASKS[0].prompt, TASKS[1].prompt, TASKS[1].prompt]
    episodes = rollout.play(prompts, CharCodec(), ScriptedModel(), max_completion_tokens=4000, group_size=2)
    rows = rollout_output(episodes, env)[EPISODE_FIELD]
    # Before: 8 calls (each episode's twice), and the row said a later call than its record.
    assert sorted(calls) == sorted(e.rollout_id for e in episodes)
    for episode, row in zip(episodes, rows, strict=True):
        assert row["metrics_calls"] == episode.record.metrics["metrics_calls"]


# -- hook_timeout_s: counted per environment --------------------------------------------------------------


class Slow(Environment):
    name = "slow_backend"
    version = "1"
    max_turns = 2
    hook_timeout_s = 0.05
    reward = Reward("slow", [said_a])

    def __init__(self, hangs: bool) -> None:
        self.hangs = hangs
        self.release = threading.Event()

    def start(self, task):
        if self.hangs:
            self.release.wait(5)
        return super().start(task)


def test_one_environments_hung_hooks_do_not_refuse_another_of_the_same_class(monkeypatch):
    from rewardpipe import bounded

    monkeypatch.setattr(bounded, "MAX_ABANDONED_CALLS", 1)
    hung, healthy = Slow(hangs=True), Slow(hangs=False)
    task = TaskRow(task_id="t", prompt="p")
    try:
        with pytest.raises(HookTimeout, match="did not return"):
            call_hook(hung, "start", task)
        with pytest.raises(HookTimeout, match="not called: 1 earlier"):
            call_hook(hung, "start", task)  # its own cap still holds
        # Before: HookTimeout "not called: 1 earlier calls still running", the other backend's hung call.
        assert isinstance(call_hook(healthy, "start", task), EpisodeState)
    finally:
        hung.release.set()


# -- verl and gsm8k: a dataset's numpy values -------------------------------------------------------------


@pytest.mark.parametrize("key", ["question", "prompt"])
def test_verl_scores_a_sample_whose_question_is_a_numpy_array(key):
    np = pytest.importorskip("numpy")
    from rewardpipe.integrations.verl import compute_score

    out = compute_score("gsm8k", "#### 4", "#### 4", {key: np.array(["What is 2+2?", "(twice)"])})
    assert out["reward_error"] == 0.0 and out["score"] > 0


def test_verl_still_reads_the_question_before_the_prompt_and_skips_an_empty_one():
    from rewardpipe.integrations.verl import _prompt

    def user(text):
        return [{"role": "user", "content": text}]

    assert _prompt({"question": "q", "prompt": "p"}) == user("q")
    assert _prompt({"question": "", "prompt": "p"}) == user("p")
    assert _prompt({"question": 7}) == user("7") and _prompt({}) == user("")


def test_gsm8k_reads_a_numpy_integer_or_a_decimal_reference():
    np = pytest.importorskip("numpy")
    from rewardpipe.rewards.gsm8k import reference_value

    for reference in (np.int64(4), np.int32(4), np.float32(4.0), Decimal("4"), 4, 4.0):
        assert reference_value(reference) == Decimal(4), reference
    for reference in (True, np.bool_(True), None, Decimal("NaN"), float("inf")):
        assert reference_value(reference) is None, reference


def test_a_verl_sample_with_a_numpy_integer_ground_truth_is_scored():
    np = pytest.importorskip("numpy")
    from rewardpipe.integrations.verl import compute_score

    out = compute_score("gsm8k", "#### 4", np.int64(4), {})
    assert out["reward_error"] == 0.0 and out["answer_correct"] == 1.0


# -- Reward.score: dict messages ---------------------------------------------------------------------------


def test_reward_score_reads_openai_style_dicts_as_messages():
    reward = Reward("r", [said_a])
    score = reward.score([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])
    assert score.error is None and score.components == {"said_a": 1.0}
    mixed = [Message(role="user", content="q"), {"role": "assistant", "content": "b"}]
    assert reward.score(mixed).components == {"said_a": 0.0}


@pytest.mark.parametrize(
    ("messages", "said"),
    [
        ("a", "messages must be a list of messages, got str"),
        ({"role": "user", "content": "q"}, "got dict"),
        ([{"role": "user", "content": "q"}, 3], r"messages\[1\] is a int"),
        ([{"role": "nobody", "content": "q"}], r"messages\[0\] is not a message"),
    ],
)
def test_reward_score_refuses_what_is_no_message_naming_it(messages, said):
    """Before: no error for the caller; every component 'raised AttributeError', the reward blamed."""
    with pytest.raises(ValueError, match=said):
        Reward("r", [said_a]).score(messages)


# -- an environment's hooks and metrics -------------------------------------------------------------------


class Odd(Quits):
    odd: str = ""  # what this task's episode does wrong ("" for nothing)


class Misbehaving(Quitting):
    """Round twenty-one's game (the model's "stop" ends it, else the user says "go on"), misbehaving otherwise."""

    name = "misbehaving"
    task_model = Odd

    def on_policy_turn(self, state, task, text):
        if task.odd == "raises_max_turns":  # "the game is not over yet": more turns than the platform's limit
            return state.evolve(max_turns=53, next_action="env")
        return super().on_policy_turn(state, task, text)

    def metrics(self, state, task):
        np = pytest.importorskip("numpy")
        if task.odd == "numpy_metrics":
            turns = np.array([1, 2, 3])
            return {"count": np.int64(turns.sum()), "any": np.bool_(turns.any()), "mean": np.float64(2.0)}
        if task.odd == "own_end_reason":
            return {"end_reason": "player_quit", "env_metrics_error": "none", "moves": 2}
        return {}


class Never:
    def next_turn(self, state, task):
        return "go"


class StopAtOnce:
    def next_turn(self, state, task):
        return "stop"


def _records(policy, *tasks: Odd):
    from rewardpipe.runner import plan_step, run_slots

    records = run_slots(
        plan_step(list(tasks), 0, len(tasks), 1), policy=policy, env=Misbehaving(), executor=None, run_id="run"
    )
    return {record.task_id: record for record in records}


def test_a_hook_raising_the_turn_limit_is_its_rollouts_simulator_error():
    """Before: the episode went on for 53 turns where the platform's limit was 3 (on AWS, MAX_TURNS caps it at 20
    so that an execution stays inside Step Functions' 25,000 history events: a hook raising it to thousands kept
    the execution going until Step Functions failed it, with no record)."""
    records = _records(Never(), Odd(task_id="fine", prompt="p"), Odd(task_id="odd", prompt="p", odd="raises_max_turns"))
    assert records["fine"].status == "scored" and records["fine"].metrics["end_reason"] == "turn_limit"
    odd = records["odd"]
    assert odd.status == "error" and odd.error.kind == "simulator_error"
    assert "on_policy_turn() changed max_turns (3 -> 53)" in odd.error.message


def test_an_environments_numpy_metrics_are_kept_as_numbers():
    """Before: numpy.int64 and numpy.bool_ were left out ("'count' is a int64"), numpy.float64 kept."""
    record = _records(StopAtOnce(), Odd(task_id="t", prompt="p", odd="numpy_metrics"))["t"]
    assert record.status == "scored"
    assert record.metrics["count"] == 6 and type(record.metrics["count"]) is int
    assert record.metrics["any"] is True and type(record.metrics["mean"]) is float
    assert "env_metrics_error" not in record.metrics
    assert '"count":6' in record.to_json().replace(" ", "")


def test_an_environments_metric_named_like_the_platforms_is_left_out_and_said():
    """Before: the environment's "end_reason" replaced how the episode ended (the record said player_quit for
    an episode the environment ended), and its "env_metrics_error" claimed a failure."""
    record = _records(StopAtOnce(), Odd(task_id="t", prompt="p", odd="own_end_reason"))["t"]
    assert record.metrics["end_reason"] == "ended_by_env" and record.metrics["moves"] == 2
    assert "platform's own names (left out: end_reason, env_metrics_error)" in record.metrics["env_metrics_error"]


# -- numbers a user computed with numpy -------------------------------------------------------------------


def test_a_weight_or_a_time_limit_computed_with_numpy_is_taken():
    """Before: ComponentDefinitionError "weight must be a finite number, got np.float32(0.5)" (and the same for
    numpy.int64, a Fraction, a Decimal, and for timeout_s and Reward(weights=...)): only Python's int and float,
    and numpy.float64 (a float subclass), were numbers."""
    from fractions import Fraction

    np = pytest.importorskip("numpy")
    for weight in (np.float32(0.5), np.int64(2), Fraction(1, 2), Decimal("0.5")):
        made = component(range=(0, 1), role="outcome", name="w", weight=weight, timeout_s=np.float32(5))(
            lambda completion: 1.0
        )
        assert made.weight == float(weight) and type(made.weight) is float and made.timeout_s == 5.0
        reward = Reward("r", [said_a], weights={"said_a": weight})
        assert reward.weights == {"said_a": float(weight)}
        assert reward.score([{"role": "assistant", "content": "a"}]).aggregate == float(weight)
    for bad in (np.bool_(True), True, np.float32("nan"), Decimal("Infinity"), "0.5"):
        with pytest.raises(ValueError, match="must be a finite number"):
            Reward("r", [said_a], weights={"said_a": bad})


def test_an_environments_hook_timeout_s_computed_with_numpy_bounds_its_hooks():
    np = pytest.importorskip("numpy")

    class NumpyLimit(Slow):
        hook_timeout_s = np.float32(0.05)

    env = NumpyLimit(hangs=True)
    try:
        with pytest.raises(HookTimeout, match=r"did not return within hook_timeout_s=0\.05"):
            call_hook(env, "start", TaskRow(task_id="t", prompt="p"))
    finally:
        env.release.set()


# -- TRL's reward functions: a column given as an array ----------------------------------------------------


@pytest.mark.parametrize("reward", ["gsm8k", Reward("said_a_or_reference", [said_a])])
def test_trl_reward_functions_read_a_reference_column_given_as_a_numpy_array(reward):
    """Before: only lists and tuples were columns; the array was dropped without a word and every sample had no
    reference (gsm8k: [None, None] from each function, an error record each)."""
    np = pytest.importorskip("numpy")
    from rewardpipe.integrations.trl import reward_functions

    functions, _ = reward_functions(reward)
    listed = [fn(prompts=["q", "q"], completions=["#### 4", "a"], answer=["4", "5"]) for fn in functions]
    arrayed = [fn(prompts=["q", "q"], completions=["#### 4", "a"], answer=np.array(["4", "5"])) for fn in functions]
    assert arrayed == listed and None not in listed[0][:1]
