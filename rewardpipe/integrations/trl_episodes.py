"""Multi-turn GRPO in TRL: the ask-before-coding episode as ``GRPOTrainer``'s ``rollout_func``.

Supported: TRL 1.13 (``rollout_func`` is experimental there: TRL warns once and may change it). The policy is
the trainer's own model, generating each assistant turn; the user is rewardpipe's simulator holding the task's
hidden spec; committed code runs in rewardpipe's sandbox against the hidden tests; the episode is scored by the
multi-turn reward. The turn loop is :func:`rewardpipe.episode.converse` (the loop the local runner and the
state machine use), paused before each policy turn so every live episode's next turn is generated in one
batch; scoring is :func:`rewardpipe.runner.score_episodes`. Nothing here defines a second kind of rollout::

    from rewardpipe.integrations.trl import EpisodeRollout, RewardPipeCallback
    rollout = EpisodeRollout("rewardpipe/data/tasks.jsonl", max_turns=4, max_turn_tokens=256)
    monitor = RewardPipeCallback(episodes=rollout, store="runs")      # store optional
    trainer = GRPOTrainer(model=..., processing_class=tokenizer, rollout_func=rollout,
                          reward_funcs=monitor.reward_funcs, train_dataset=rollout.dataset(),
                          args=GRPOConfig(reward_weights=monitor.reward_weights, max_completion_length=1024, ...),
                          callbacks=[monitor])

What TRL receives per completion (``rollout_func``'s contract, read from TRL 1.13's source):

* ``prompt_ids``: the task prompt, tokenized as TRL tokenizes prompts (the chat template with a generation
  prompt for conversational prompts, the plain tokenizer for strings).
* ``completion_ids``: every turn after the prompt, concatenated: the model's own tokens (each turn cut after
  its EOS), then the simulator's reply rendered as a user turn (the chat template's user-turn tokens, found the
  way TRL finds tool-result tokens; ``PLAIN_FEEDBACK`` for string prompts), then the next model turn...
* ``env_mask``: 1 on the model's tokens, 0 on the simulator's. TRL multiplies it into the loss mask, so the
  policy gradient never flows through text the model did not write (the simulator's tokens are still
  attended to, as context).
* ``logprobs``: ``None``, as TRL's own transformers generation returns: TRL recomputes the old log-probs
  itself when it needs them.
* ``rewardpipe_episode``: one dict per completion (components, error kind, turns, simulator replies, spec
  items revealed), which TRL forwards to the reward functions; :class:`EpisodeScorer` turns it into one
  reward function per component, so the components reach ``RewardPipeCallback`` as the single-turn ones do.

The whole completion (model and simulator tokens) stays within ``GRPOConfig.max_completion_length``: a turn
is cut at the remaining budget, and a simulator reply that would leave no room for another turn ends the
episode there (``end_reason`` "completion_budget"; it is scored as it stands, like the turn limit).
An episode whose prompt names no task, or whose simulator or sandbox failed, is an error record: ``None`` in
every component, which TRL leaves out of the group's baseline (advantage 0), never a score of 0.

Limits: generation goes through ``model.generate`` on the trainer's process (no vLLM: ``use_vllm=True`` is
refused with a clear error); text-only models; the task is found from the prompt's text, because TRL hands
``rollout_func`` the prompts only (two tasks with the same prompt are refused at construction).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from rewardpipe.episode import (
    ConversationError,
    EpisodeError,
    EpisodeState,
    converse,
    end_without_commit,
    error_record,
    failure_record,
    start_episode,
)
from rewardpipe.execution.result import ExecutionResult
from rewardpipe.integrations.trl import BatchScorer, ScoredBatch, resolve_reward
from rewardpipe.models import Record, Task, load_tasks
from rewardpipe.rewards import EPISODE_REWARDS, Reward


#: The extra ``rollout_func`` field TRL forwards to the reward functions, one dict per completion.
EPISODE_FIELD = "rewardpipe_episode"
#: What the callback's stored records say about each episode, besides its components.
EPISODE_RECORD_METRICS = ("assistant_turns", "simulator_replies", "spec_revealed", "committed", "end_reason",
                          "completion_tokens", "simulator_tokens")
#: A simulator reply after a model turn, for prompts given as plain strings (no chat template involved).
PLAIN_FEEDBACK = "\n\nUser: {reply}\n\nAssistant: "
DEFAULT_MAX_TURNS = 4

# (contexts, max_new_tokens) -> the tokens generated after each context (may run past its EOS).
Generate = Callable[[list[list[int]], int], list[list[int]]]


class TokenCodec(Protocol):
    """How an episode's text becomes tokens (:class:`TokenizerCodec` for a transformers tokenizer)."""

    eos_id: int | None

    def prompt_ids(self, prompt: Any) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def feedback_ids(self, reply: str, conversational: bool) -> list[int]: ...


@dataclass
class EpisodeTokens:
    """One completion as TRL trains on it: the model's tokens (mask 1) and the simulator's (mask 0)."""

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)

    def add_policy_turn(self, ids: Sequence[int]) -> None:
        self.completion_ids.extend(ids)
        self.env_mask.extend([1] * len(ids))

    def add_feedback(self, ids: Sequence[int]) -> None:
        self.completion_ids.extend(ids)
        self.env_mask.extend([0] * len(ids))

    @property
    def context(self) -> list[int]:
        return self.prompt_ids + self.completion_ids


@dataclass
class Episode:
    """One completion of the batch: its task (``None`` when the prompt names none), conversation and tokens."""

    rollout_id: str
    prompt: Any
    task: Task | None
    tokens: EpisodeTokens
    state: EpisodeState | None = None
    record: Record | None = None
    execution: ExecutionResult | None = None

    @property
    def conversational(self) -> bool:
        return isinstance(self.prompt, list)

    @property
    def live(self) -> bool:
        return self.record is None and self.state is not None and self.state.next_action == "policy"

    def row(self) -> dict[str, Any]:
        """What the reward functions receive for this completion."""
        record = self.record
        assert record is not None, "an episode is summarised once it is scored"
        messages = self.state.messages if self.state is not None else []
        return {
            "rollout_id": self.rollout_id,
            "task_id": record.task_id,
            "status": record.status,
            "error": record.error.kind if record.error else None,
            "components": dict(record.components),
            "assistant_turns": sum(1 for m in messages if m.role == "assistant"),
            "simulator_replies": max(0, sum(1 for m in messages if m.role == "user") - 1),
            "spec_revealed": len(self.state.revealed) if self.state is not None else 0,
            "committed": bool(self.state is not None and self.state.final_code is not None),
            "end_reason": self.state.end_reason if self.state is not None else None,
            "completion_tokens": len(self.tokens.completion_ids),
            "simulator_tokens": self.tokens.env_mask.count(0),
        }


class _QueuedTurn:
    """A policy holding one already generated turn: ``converse`` plays it, then pauses for the next batch."""

    def __init__(self, text: str) -> None:
        self.text: str | None = text

    @property
    def spent(self) -> bool:
        return self.text is None

    def next_turn(self, state: EpisodeState, task: Task) -> str:
        if self.text is None:
            raise EpisodeError(f"rollout {state.rollout_id}: no generated turn queued")
        text, self.text = self.text, None
        return text


def cut_at_eos(ids: Sequence[int], eos_id: int | None) -> list[int]:
    """The tokens of one turn: up to and including the first EOS (what follows is padding)."""
    ids = list(ids)
    if eos_id is not None and eos_id in ids:
        return ids[: ids.index(eos_id) + 1]
    return ids


def _prompt_key(prompt: Any) -> str:
    return json.dumps(prompt, sort_keys=True, ensure_ascii=False)


def _prompt_text(prompt: Any) -> str | None:
    """A string prompt, or the last user message of a conversational one."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        return users[-1] if users and isinstance(users[-1], str) else None
    return None


class EpisodeRollout:
    """The ask-before-coding episode as a TRL ``rollout_func`` (see the module docstring).

    ``tasks``: a task JSONL path or Task objects (each prompt must be unique: TRL hands ``rollout_func`` only
    the prompts). ``reward``: a multi-turn reward name or :class:`Reward` (``ask_before_coding``); ``weights``
    override its component weights. ``simulator`` defaults to the rule-based simulator, ``executor`` to
    rewardpipe's sandbox. ``max_turn_tokens`` caps one model turn (default: the whole completion budget).
    ``instructions`` is put in front of each task prompt by :meth:`dataset` (a system message for a
    conversational dataset).
    """

    def __init__(
        self,
        tasks: str | Path | Iterable[Task],
        *,
        reward: str | Reward = "ask_before_coding",
        weights: Mapping[str, float] | None = None,
        simulator: Any = None,
        executor: Any = None,
        max_turns: int = DEFAULT_MAX_TURNS,
        max_turn_tokens: int | None = None,
        instructions: str | None = None,
        run_id: str = "trl",
        workers: int | None = None,
    ) -> None:
        from rewardpipe.simulator import RuleBasedSimulator

        self.tasks = load_tasks(tasks) if isinstance(tasks, (str, Path)) else list(tasks)
        if not self.tasks:
            raise ValueError("EpisodeRollout needs at least one task")
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        if max_turn_tokens is not None and max_turn_tokens < 1:
            raise ValueError("max_turn_tokens must be at least 1")
        if isinstance(reward, str) and reward not in EPISODE_REWARDS:
            raise ValueError(f"reward '{reward}' scores single-turn samples against their own reference answer; "
                             f"an episode is scored by one of {sorted(EPISODE_REWARDS)} (or a Reward object)")
        self.reward = resolve_reward(reward, weights)
        self.simulator = simulator or RuleBasedSimulator()
        self._executor = executor
        self.max_turns = max_turns
        self.max_turn_tokens = max_turn_tokens
        self.instructions = instructions
        self.run_id = run_id
        self.workers = workers
        self.batches = 0
        self.last_episodes: list[Episode] = []  # the latest batch, for inspection
        by_text: dict[str, Task] = {}
        for task in self.tasks:
            other = by_text.setdefault(task.prompt, task)
            if other is not task:
                raise ValueError(f"tasks '{other.task_id}' and '{task.task_id}' have the same prompt: TRL gives "
                                 f"rollout_func only the prompt, so it could not tell which hidden spec to use")
        self._by_text = by_text
        self._by_rendered = {_prompt_key(self.prompt_for(t, conversational)): t
                             for t in self.tasks for conversational in (False, True)}

    @property
    def executor(self) -> Any:
        if self._executor is None:
            from rewardpipe.execution import get_executor

            self._executor = get_executor()
        return self._executor

    # -- the dataset -------------------------------------------------------------------------------------

    def prompt_for(self, task: Task, conversational: bool = False) -> Any:
        if conversational:
            system = [{"role": "system", "content": self.instructions}] if self.instructions else []
            return [*system, {"role": "user", "content": task.prompt}]
        return f"{self.instructions}\n\n{task.prompt}" if self.instructions else task.prompt

    def dataset_rows(self, conversational: bool = False) -> list[dict[str, Any]]:
        return [{"prompt": self.prompt_for(t, conversational), "task_id": t.task_id} for t in self.tasks]

    def dataset(self, conversational: bool = False):
        """A ``datasets.Dataset`` with one row per task (``prompt``, ``task_id``) for ``train_dataset``."""
        from datasets import Dataset

        return Dataset.from_list(self.dataset_rows(conversational))

    def task_for(self, prompt: Any) -> Task | None:
        """The task a prompt was made from: as :meth:`prompt_for` renders it, or whose text is the prompt's
        (string prompt, or last user message)."""
        task = self._by_rendered.get(_prompt_key(prompt))
        if task is None:
            text = _prompt_text(prompt)
            task = self._by_text.get(text) if text is not None else None
        return task

    # -- the episodes ------------------------------------------------------------------------------------

    def play(self, prompts: Sequence[Any], codec: TokenCodec, generate: Generate, *, max_completion_tokens: int,
             group_size: int = 1) -> list[Episode]:
        """One episode per prompt (TRL's prompts already hold each prompt ``num_generations`` times), every
        live episode's next turn generated in one ``generate`` call per round. A failure of ``generate`` is
        the trainer's own (the model could not run) and propagates; everything after it is per episode."""
        if max_completion_tokens < 1:
            raise ValueError("max_completion_tokens must be at least 1")
        step = self.batches
        self.batches += 1
        episodes = []
        for index, prompt in enumerate(prompts):
            group = f"b{step}-g{index // max(1, group_size)}"
            episode = Episode(f"{group}-k{index % max(1, group_size)}", prompt, self.task_for(prompt),
                              EpisodeTokens(list(codec.prompt_ids(prompt))))
            if episode.task is None:
                text = _prompt_text(prompt) or repr(prompt)
                episode.record = failure_record(
                    run_id=self.run_id, step=step, group_id=group, rollout_id=episode.rollout_id, task_id="unknown",
                    kind="unknown_task", message=f"no task has this prompt: {text[:200]!r}", reward=self.reward)
                # TRL needs one token per completion at least; it is masked out of the loss.
                episode.tokens.add_feedback([codec.eos_id if codec.eos_id is not None else 0])
            else:
                episode.state = start_episode(episode.task, run_id=self.run_id, step=step, group_id=group,
                                              rollout_id=episode.rollout_id, max_turns=self.max_turns)
            episodes.append(episode)

        while waiting := [e for e in episodes if e.live]:
            budgets = [self._turn_budget(e, max_completion_tokens) for e in waiting]
            for episode, budget in zip(waiting, budgets):
                if budget < 1:
                    episode.state = end_without_commit(episode.state, "completion_budget")
            ready = [(e, b) for e, b in zip(waiting, budgets) if b >= 1]
            if not ready:
                continue
            generated = generate([e.tokens.context for e, _ in ready], max(b for _, b in ready))
            if len(generated) != len(ready):
                raise RuntimeError(f"generate returned {len(generated)} turns for {len(ready)} contexts")
            for (episode, budget), new in zip(ready, generated):
                ids = cut_at_eos(list(new)[:budget], codec.eos_id) or [codec.eos_id if codec.eos_id is not None else 0]
                episode.tokens.add_policy_turn(ids)
                self._advance(episode, codec.decode(ids), codec, max_completion_tokens)

        ended = [e for e in episodes if e.record is None]
        for episode, (record, execution) in zip(ended, self._score(ended)):
            episode.record, episode.execution = record, execution
        self.last_episodes = episodes
        return episodes

    def _turn_budget(self, episode: Episode, max_completion_tokens: int) -> int:
        left = max_completion_tokens - len(episode.tokens.completion_ids)
        return min(left, self.max_turn_tokens) if self.max_turn_tokens else left

    def _advance(self, episode: Episode, text: str, codec: TokenCodec, max_completion_tokens: int) -> None:
        """Play the generated turn and the simulator's reply through ``converse``; stop before the next turn."""
        assert episode.state is not None and episode.task is not None
        policy = _QueuedTurn(text)
        before_reply: list[EpisodeState] = []

        def pause(state: EpisodeState) -> bool:
            if state.next_action == "simulator":
                before_reply.append(state)
            return state.next_action == "policy" and policy.spent

        try:
            state = converse(episode.state, episode.task, policy, self.simulator, pause)
        except ConversationError as exc:  # the simulator failed: an error record, never a score
            episode.state = exc.state
            episode.record = error_record(exc.state, exc.kind, str(exc), self.reward)
            return
        if state.next_action == "policy" and before_reply:  # the simulator replied; the model is next
            reply = state.messages[-1].content
            ids = list(codec.feedback_ids(reply, episode.conversational))
            if len(episode.tokens.completion_ids) + len(ids) >= max_completion_tokens:
                state = end_without_commit(before_reply[-1], "completion_budget")
            else:
                episode.tokens.add_feedback(ids)
        episode.state = state

    def _score(self, episodes: Sequence[Episode]) -> list[tuple[Record, ExecutionResult | None]]:
        from rewardpipe.runner import score_episodes

        if not episodes:
            return []
        return score_episodes([(e.state, e.task) for e in episodes], executor=self.executor, reward=self.reward,
                              workers=self.workers)

    # -- TRL ---------------------------------------------------------------------------------------------

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list]:
        """``rollout_func(prompts, trainer)`` for ``GRPOTrainer``."""
        if getattr(trainer, "use_vllm", False):
            raise NotImplementedError("EpisodeRollout generates each turn with the trainer's model through "
                                      "transformers' generate; set use_vllm=False")
        codec = TokenizerCodec(trainer.processing_class, getattr(trainer, "chat_template", None),
                               getattr(trainer, "chat_template_kwargs", None))
        training = bool(getattr(trainer.model, "training", True))
        group = trainer.num_generations if training else getattr(trainer, "num_generations_eval", 1)
        episodes = self.play(prompts, codec, trainer_generate(trainer, codec.tokenizer),
                             max_completion_tokens=int(trainer.max_completion_length), group_size=group or 1)
        return rollout_output(episodes)

    def reward_functions(self) -> tuple[list[Callable[..., list]], list[float]]:
        """``(reward_funcs, reward_weights)`` reading each episode's components (without the callback)."""
        scorer = EpisodeScorer(self.reward)
        return scorer.functions(), [c.weight for c in self.reward.components]


def rollout_output(episodes: Sequence[Episode]) -> dict[str, list]:
    """The dict ``rollout_func`` returns to TRL (see the module docstring)."""
    return {
        "prompt_ids": [e.tokens.prompt_ids for e in episodes],
        "completion_ids": [e.tokens.completion_ids for e in episodes],
        "logprobs": None,
        "env_mask": [e.tokens.env_mask for e in episodes],
        EPISODE_FIELD: [e.row() for e in episodes],
    }


class EpisodeScorer(BatchScorer):
    """Serves each component of the episodes :class:`EpisodeRollout` scored (the ``rewardpipe_episode``
    field TRL forwards) to its reward function, and logs the episodes' shape through TRL's ``log_metric``:
    ``rewardpipe/episode/assistant_turns``, ``simulator_replies``, ``spec_revealed``, ``committed`` (means over
    the process's completions) and ``simulator_token_fraction``."""

    def read_batch(self, prompts: Sequence[Any], completions: Sequence[Any],
                   kwargs: Mapping[str, Any]) -> tuple[Any, str]:
        rows = kwargs.get(EPISODE_FIELD)
        if not isinstance(rows, (list, tuple)) or len(rows) != len(completions):
            raise ValueError(f"the reward functions of EpisodeRollout need the '{EPISODE_FIELD}' field of its "
                             f"rollout_func: pass rollout_func=<the EpisodeRollout> to GRPOTrainer")
        return list(rows), json.dumps([row.get("rollout_id") for row in rows])

    def _score(self, rows: list[dict], fingerprint: str, kwargs: Mapping[str, Any]) -> ScoredBatch:
        names = self.reward.component_names
        values = [{name: (row.get("components") or {}).get(name) if row.get("status") == "scored" else None
                   for name in names} for row in rows]
        errors = [None if row.get("status") == "scored" else (row.get("error") or "unscored") for row in rows]
        self.batches_scored += 1
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and rows:
            for name, value in episode_metrics(rows).items():
                log_metric(name, value)
        details = [{"task_id": row.get("task_id"),
                    "metrics": {k: row.get(k) for k in EPISODE_RECORD_METRICS if row.get(k) is not None}}
                   for row in rows]
        return ScoredBatch(fingerprint, values, errors, details=details)


def episode_metrics(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    count = len(rows)
    out = {f"rewardpipe/episode/{name}": sum(float(row.get(name) or 0) for row in rows) / count
           for name in ("assistant_turns", "simulator_replies", "spec_revealed", "committed")}
    tokens = sum(int(row.get("completion_tokens") or 0) for row in rows)
    out["rewardpipe/episode/simulator_token_fraction"] = (
        sum(int(row.get("simulator_tokens") or 0) for row in rows) / tokens if tokens else 0.0)
    return out


# --------------------------------------------------------------------------------------------------
# The transformers side (imported only when TRL calls the rollout)


class TokenizerCodec:
    """:class:`TokenCodec` for a transformers tokenizer (or a processor wrapping one)."""

    def __init__(self, processing_class: Any, chat_template: str | None = None,
                 chat_template_kwargs: Mapping[str, Any] | None = None) -> None:
        self.tokenizer = getattr(processing_class, "tokenizer", processing_class)
        self.chat_template = chat_template
        self.template_kwargs = dict(chat_template_kwargs or {})
        self.eos_id = self.tokenizer.eos_token_id
        self._feedback_cache: dict[tuple[str, bool], list[int]] = {}

    def _render(self, messages: list[dict], generation_prompt: bool) -> list[int]:
        ids = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=generation_prompt, tokenize=True, return_dict=False,
            **({"chat_template": self.chat_template} if self.chat_template else {}), **self.template_kwargs)
        if isinstance(ids, Mapping):
            ids = ids["input_ids"]
        return list(ids)

    def prompt_ids(self, prompt: Any) -> list[int]:
        if isinstance(prompt, list):
            return self._render(prompt, True)
        return list(self.tokenizer(text=prompt)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def feedback_ids(self, reply: str, conversational: bool) -> list[int]:
        if not conversational:
            return list(self.tokenizer(text=PLAIN_FEEDBACK.format(reply=reply), add_special_tokens=False)["input_ids"])
        # The chat template's user turn plus generation prompt, after an assistant turn that ended in EOS: a
        # two-message conversation rendered with and without the reply (the way TRL renders tool results).
        dummy = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "dummy"}]
        prefix = self._render(dummy, False)
        full = self._render([*dummy, {"role": "user", "content": reply}], True)
        if self.eos_id in prefix:
            prefix = prefix[: len(prefix) - prefix[::-1].index(self.eos_id)]
        if full[: len(prefix)] != prefix:
            raise ValueError("the chat template does not render a user turn as a suffix of the conversation before it")
        return full[len(prefix):]


def trainer_generate(trainer: Any, tokenizer: Any) -> Generate:
    """Generate with the trainer's model and generation settings (``GRPOConfig`` temperature, top_p...)."""
    import torch
    from trl.models import unwrap_model_for_generation

    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def generate(contexts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        device = trainer.accelerator.device
        width = max(len(c) for c in contexts)
        input_ids = torch.tensor([[pad_id] * (width - len(c)) + c for c in contexts], device=device)
        attention = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in contexts], device=device)
        config = copy.deepcopy(trainer.generation_config)
        config.max_new_tokens = max_new_tokens
        with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                         gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
                                         generation_kwargs=getattr(trainer, "generation_kwargs", None)) as model, \
                torch.no_grad():
            out = model.generate(input_ids=input_ids, attention_mask=attention, generation_config=config)
        return [row[width:].tolist() for row in out.cpu()]

    return generate
