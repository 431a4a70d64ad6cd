"""verl adapter: ``compute_score(data_source, solution_str, ground_truth, extra_info=None)``.

Supported: verl 0.9.1 (the ``[verl]`` extra; ``make test-verl`` scores a real ``DataProto`` with verl's
``NaiveRewardManager`` and this function loaded by verl's ``get_custom_reward_fn``).

verl's reward managers call one function per sample and, when it returns a dict, use ``score`` as the
reward and keep every other key as ``reward_extra_info`` (written to ``rollout_data_dir`` and usable by
DAPO's ``filter_groups.metric``). The dict here carries each component's value, ``reward_error``
(1 for a sample that could not be scored) and the reward's diagnostics::

    # verl config: verl 0.9.1's trainer reads it under ``reward`` (a top-level custom_reward_function is not read)
    reward:
      custom_reward_function:
        path: <site-packages>/rewardpipe/integrations/verl.py
        name: compute_score

verl 0.9.1's trainer calls it once per sample (its reward loop, in worker threads). Called the way verl's older
batch reward manager calls it (``verl.workers.reward_manager.BatchRewardManager``: the keywords ``data_sources``,
``solution_strs``, ``ground_truths`` and ``extra_infos``), it answers the list of the per-sample dicts
(:func:`compute_scores`).

Which reward scores a sample: ``extra_info["rewardpipe_reward"]`` if given (any reference: a built-in name,
``package.module:ATTR``, ``file.py:ATTR``, an installed short name), else the ``data_source`` (``openai/gsm8k``
and ``gsm8k`` → ``gsm8k``; a built-in reward name is used as is), else ``gsm8k`` (said once per data source, in a
warning). A ``rewardpipe_reward`` that is not text is a ValueError.
verl has no "no reward" value, so an unscorable sample (a component that raised or could not compute) scores
0.0 with ``reward_error`` = 1 and NaN in every component (drop such rows from your statistics). The number it
scores is the ``error_reward`` setting, given in verl's ``reward.custom_reward_function.reward_kwargs`` (verl passes
them to every call): ``zero`` (the default), ``neutral`` (called with a batch, the mean score of the batch's
scored samples of the same prompt and ``extra_info["index"]``, verl's row, so its GRPO advantage is about 0;
called per sample, as verl 0.9.1's trainer calls it, with no other sample to take a mean of, 0.0) or
``fail_batch`` (``BatchFailed`` is raised and verl's step fails). ``reward_error`` is not a
``filter_groups.metric``: DAPO keeps a group only when the metric varies inside it, so it would keep the groups
with a failure and drop every healthy one (use ``score``; not a component either: its NaN makes the standard
deviation of a group holding an unscorable sample NaN, and verl 0.9.1 drops a group only when that deviation is
exactly 0, so it keeps that group, its unscorable sample scored 0.0).

The ``ground_truth`` is the reward's ``reference``, numpy values inside it read as Python ones (:func:`plain`:
verl reads it from parquet, where a list is an array). A reward that reads the conversation gets
``extra_info["question"]`` (else ``extra_info["prompt"]``, a chat prompt's messages as they are) before the answer.

Every sample of a reward returns the same keys (``score``, each component, ``reward_error``): verl's reward
managers append each key's value to a per-key list (``reward_extra_info``), so a key missing from one sample
would shift every later value of that list onto the wrong sample. For the same reason a batch should be
scored by one reward (samples choosing different rewards return different component keys). A component named
``score`` or ``reward_error`` shares its key with verl's own: the dict holds the score and the flag there. One
named ``reward`` is left out of the dict too: verl's validation files every sample's score under ``reward`` and
then the dict's keys, and a second value a sample failed its check that each list has one.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from rewardpipe.models import nova_fields
from rewardpipe.rewards import REWARDS, get_reward
from rewardpipe.safe_text import printable
from rewardpipe.single_turn import apply_error_reward, prompt_key, score_samples

DATA_SOURCE_REWARDS = {"openai/gsm8k": "gsm8k", "gsm8k": "gsm8k"}
DEFAULT_REWARD = "gsm8k"


logger = logging.getLogger("rewardpipe.verl")


def _shown(value: Any, limit: int) -> str:
    """``value`` as a message shows it: its repr, cut at ``limit`` characters, on one line, controls escaped."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a value whose repr fails is named by its type
        text = f"<{type(value).__name__}>"
    return printable(text[:limit] + ("..." if len(text) > limit else ""), keep_newlines=False)


#: The data sources :func:`reward_for` has said it scores with the default reward (each is said once).
_WARNED_SOURCES: set[str] = set()


def reward_for(data_source: Any, extra_info: Mapping[str, Any] | None) -> str:
    """The reward a sample asks for. A ``rewardpipe_reward`` that is not text is a ValueError (as an unknown name
    is); a data source rewardpipe does not know is scored by :data:`DEFAULT_REWARD`, said once per data source."""
    chosen = (extra_info or {}).get("rewardpipe_reward")
    if isinstance(chosen, str):
        return chosen  # an unknown name is a configuration error: score_samples raises naming it
    if chosen is not None and not (isinstance(chosen, float) and math.isnan(chosen)):  # NaN: pandas' missing value
        raise ValueError(
            f"verl sample: extra_info['rewardpipe_reward'] must be a reward's name, got {type(chosen).__name__} "
            f"{_shown(chosen, 80)}"
        )
    if isinstance(data_source, str):
        if data_source in DATA_SOURCE_REWARDS:
            return DATA_SOURCE_REWARDS[data_source]
        if data_source in REWARDS:
            return data_source
    if data_source is not None:
        shown = _shown(data_source, 120)
        if shown not in _WARNED_SOURCES and len(_WARNED_SOURCES) < 1000:
            _WARNED_SOURCES.add(shown)
            logger.warning(
                "rewardpipe: data_source %s names no reward rewardpipe knows; its samples are scored by %r. Give "
                "extra_info['rewardpipe_reward'] (a reward's name or reference) to choose another",
                shown,
                DEFAULT_REWARD,
            )
    return DEFAULT_REWARD


def _prompt(info: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The sample's question (``extra_info["question"]``, else ``["prompt"]``) as the conversation before the
    answer. Read by type, never by truth value: a dataset column read with numpy gives an array, whose
    ``bool()`` raises (the whole batch of verl's reward manager failed on that one sample), and is read as its
    list. A chat prompt (verl's own ``prompt`` format: ``[{"role": ..., "content": ...}, ...]``) is those
    messages; a list of strings is their lines; other text is the user's message."""
    for key in ("question", "prompt"):
        value = info.get(key)
        tolist = getattr(value, "tolist", None)
        if value is not None and not isinstance(value, (str, list)) and callable(tolist):
            value = tolist()  # a numpy array or scalar: its Python value
        if isinstance(value, list) and value:
            if all(isinstance(m, Mapping) and isinstance(m.get("role"), str) for m in value):
                return [dict(m) for m in value]
            if all(isinstance(line, str) for line in value):
                value = "\n".join(value)
        if isinstance(value, (str, list)):
            if value:
                return [{"role": "user", "content": value}]
        elif value is not None:
            return [{"role": "user", "content": str(value)}]
    return [{"role": "user", "content": ""}]


#: How deep :func:`plain` converts; a value nested deeper is left as it is (no RecursionError out of a batch).
_PLAIN_DEPTH = 64


def plain(value: Any, depth: int = 0) -> Any:
    """``value`` with every numpy array and scalar inside it (dict values, list and tuple items, at any depth up to
    ``_PLAIN_DEPTH``) as its Python value. verl reads ``reward_model.ground_truth`` and ``extra_info`` from parquet:
    a list there arrives as a numpy array, a struct as a dict whose lists are arrays, and a reward reading the
    reference as the dataset wrote it (a list of test cases, a list of accepted answers) found an array instead."""
    if depth > _PLAIN_DEPTH or value is None or isinstance(value, (str, bytes, bool, int, float)):
        return value
    if isinstance(value, Mapping):
        return {key: plain(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain(item, depth + 1) for item in value) if type(value) in (list, tuple) else value
    tolist = getattr(value, "tolist", None)
    if callable(tolist) and hasattr(value, "dtype"):  # a numpy array or scalar
        return plain(tolist(), depth + 1)
    return value


def _sample(solution_str: Any, ground_truth: Any, extra_info: Any) -> dict[str, Any]:
    info = extra_info if isinstance(extra_info, Mapping) else {}
    messages = _prompt(info)
    if isinstance(solution_str, (str, list)):
        messages.append({"role": "assistant", "content": solution_str})
    # else (None, a number): no answer to score, a malformed sample (reward_error), never an empty answer's 0
    return {
        "id": plain(info.get("index")),
        "messages": messages,
        "metadata": {"reference_answer": plain(ground_truth)},
    }


#: The keys of the dict that are verl's (the reward it trains on, the key its validation files the score under) and
#: rewardpipe's flag, whatever the components: a component of one of these names is not a key of the dict.
_VERL_KEYS = frozenset({"score", "reward", "reward_error"})


def _scores(reward: Any, result: Mapping[str, Any]) -> dict[str, float]:
    values, flags = nova_fields(result)  # components and flags apart, whatever their names
    failed = bool(flags.get("reward_error"))
    out: dict[str, float] = {"score": float(result["aggregate_reward_score"])}
    for name in reward.component_names:
        if name in _VERL_KEYS:  # verl's own key: the score (the flag, or verl's own), never the component's value
            continue
        value = values.get(name)
        out[name] = math.nan if failed or not isinstance(value, (int, float)) else float(value)
    out["reward_error"] = 1.0 if failed else 0.0
    return out


def compute_score(
    data_source: Any = None,
    solution_str: Any = None,
    ground_truth: Any = None,
    extra_info: Mapping[str, Any] | None = None,
    error_reward: str = "zero",
    **kwargs: Any,
) -> dict[str, float] | list[dict[str, float]]:
    """``{"score": aggregate, <component>: value, ..., "reward_error": 0|1}``, the same keys for every sample.

    Called by verl's batch reward manager (``reward_model.reward_manager: batch``: keywords ``data_sources``,
    ``solution_strs``, ``ground_truths``, ``extra_infos``), it answers the list of those dicts, one per sample
    in order (:func:`compute_scores`). ``error_reward`` (a ``reward_kwargs`` entry) is what an unscorable
    sample scores: ``zero``, ``neutral`` or ``fail_batch`` (:func:`rewardpipe.single_turn.apply_error_reward`)."""
    _warn_unread(kwargs)
    if "solution_strs" in kwargs:
        return compute_scores(
            kwargs.get("data_sources"),
            kwargs["solution_strs"],
            kwargs.get("ground_truths"),
            kwargs.get("extra_infos"),
            error_reward=error_reward,
        )
    info = extra_info if isinstance(extra_info, Mapping) else {}
    reward = get_reward(reward_for(data_source, info))
    sample = _sample(solution_str, ground_truth, info)
    return _scores(reward, score_samples([sample], reward, error_reward=error_reward)[0])


#: Keywords verl itself passes (the batch reward manager's columns, the reward loop's reward model): read or not,
#: never warned of.
_VERL_KWARGS = frozenset(
    {"data_sources", "solution_strs", "ground_truths", "extra_infos", "reward_router_address", "reward_model_tokenizer"}
)
#: The keywords :func:`compute_score` has said it does not read (each is said once).
_WARNED_KWARGS: set[str] = set()


def _warn_unread(kwargs: Mapping[str, Any]) -> None:
    """A warning, once per name, for a keyword (a ``reward_kwargs`` entry) :func:`compute_score` does not read: a
    misspelt ``error_reward`` was dropped without a word."""
    for name in kwargs:
        if name in _VERL_KWARGS or name in _WARNED_KWARGS or len(_WARNED_KWARGS) >= 100:
            continue
        _WARNED_KWARGS.add(name)
        logger.warning(
            "rewardpipe: compute_score does not read the keyword %s (a reward_kwargs entry?); the one it reads is "
            "error_reward",
            _shown(name, 80),
        )


def _column(name: str, values: Any, count: int) -> list[Any]:
    if values is None:
        return [None] * count
    values = list(values.tolist() if callable(getattr(values, "tolist", None)) else values)
    if len(values) != count:
        raise ValueError(f"verl batch: {name} has {len(values)} values for {count} solution_strs")
    return values


def _row(index: Any) -> str | None:
    """A sample's ``extra_info["index"]`` as part of its group's key; None (its prompt alone) when it has no repr (a
    list nested past the recursion limit), never an exception out of the batch."""
    try:
        return repr(index)
    except (RecursionError, ValueError):
        return None


def compute_scores(
    data_sources: Any,
    solution_strs: Any,
    ground_truths: Any = None,
    extra_infos: Any = None,
    *,
    error_reward: str = "zero",
) -> list[dict[str, float]]:
    """verl's batch reward manager's call: one :func:`compute_score` dict per sample, in order. The columns may
    be lists or numpy arrays (verl's non-tensor batch); ``extra_infos`` ``None`` (no such column) is no extra
    info. Each reward's samples are scored together (a code reward's jobs run side by side); one bad sample is
    flagged by its ``reward_error``, never the batch. Columns of different lengths are a ValueError naming
    them."""
    solutions = _column("solution_strs", solution_strs, len(solution_strs))
    count = len(solutions)
    sources = _column("data_sources", data_sources, count)
    truths = _column("ground_truths", ground_truths, count)
    infos = [i if isinstance(i, Mapping) else {} for i in _column("extra_infos", extra_infos, count)]
    chosen = [reward_for(source, info) for source, info in zip(sources, infos, strict=True)]
    out: list[dict[str, float] | None] = [None] * count
    for name in dict.fromkeys(chosen):
        reward = get_reward(name)
        indices = [i for i in range(count) if chosen[i] == name]
        samples = [_sample(solutions[i], truths[i], infos[i]) for i in indices]
        results = score_samples(samples, reward, error_reward="zero" if error_reward == "neutral" else error_reward)
        if (
            error_reward == "neutral"
        ):  # verl's group: its prompt and its row (each rollout repeats the row's extra_info)
            apply_error_reward(results, [(prompt_key(sample), _row(sample["id"])) for sample in samples], "neutral")
        for index, result in zip(indices, results, strict=True):
            out[index] = _scores(reward, result)
    return [score for score in out if score is not None]
