"""Multi-turn GRPO in TRL: any environment's episode as ``GRPOTrainer``'s ``rollout_func``.

Supported: TRL 1.13 (``rollout_func`` is experimental there: TRL warns once and may change it). The policy is
the trainer's own model, generating each assistant turn; the environment (any :class:`rewardpipe.Environment`,
named by reference: ``ask_before_coding``, ``pkg.module:ENV``, an installed short name) answers between them;
its execution jobs run in rewardpipe's sandbox; the episode is scored by the reward. The turn loop is
:func:`rewardpipe.episode.converse` (the loop the local runner and the state machine use), paused before each
policy turn so every live episode's next turn is generated in one batch; scoring is
:func:`rewardpipe.runner.score_episodes`. Nothing here defines a second kind of rollout::

    from rewardpipe.integrations.trl import EpisodeRollout, RewardPipeCallback
    rollout = EpisodeRollout("rewardpipe/data/tasks.jsonl", env="ask_before_coding", max_turns=4,
                             max_turn_tokens=256)
    monitor = RewardPipeCallback(episodes=rollout, store="runs")      # store optional
    trainer = GRPOTrainer(model=..., processing_class=tokenizer, rollout_func=rollout,
                          reward_funcs=monitor.reward_funcs, train_dataset=rollout.dataset(),
                          args=GRPOConfig(reward_weights=monitor.reward_weights, max_completion_length=1024, ...),
                          callbacks=[monitor])

What TRL receives per completion (``rollout_func``'s contract, read from TRL 1.13's source):

* ``prompt_ids``: the task prompt, tokenized as TRL tokenizes prompts (the chat template with a generation
  prompt for conversational prompts, the plain tokenizer for strings).
* ``completion_ids``: every turn after the prompt, concatenated: the model's own tokens (each turn cut after
  its EOS), then the environment's messages rendered with their roles (the chat template's tokens for them,
  found the way TRL finds tool-result tokens; ``PLAIN_FEEDBACK`` for string prompts), then the next model
  turn...
* ``env_mask``: 1 on the model's tokens, 0 on the environment's. TRL multiplies it into the loss mask, so the
  policy gradient never flows through text the model did not write (the environment's tokens are still
  attended to, as context).
* ``logprobs``: ``None``, as TRL's own transformers generation returns: TRL recomputes the old log-probs
  itself when it needs them.
* ``rewardpipe_episode``: one dict per completion (components, error kind, turns, the environment's replies
  and its own metrics), which TRL forwards to the reward functions; :class:`EpisodeScorer` turns it into one
  reward function per component, so the components reach ``RewardPipeCallback`` as the single-turn ones do.

The whole completion (model and environment tokens) stays within ``GRPOConfig.max_completion_length``: a
turn is cut at the remaining budget, and an environment reply that would leave no room for another turn ends
the episode there (``end_reason`` "completion_budget"; it is scored as it stands, like the turn limit).
An episode whose prompt names no task, or whose environment, component or sandbox failed, is an error record:
``None`` in every component, which TRL leaves out of the group's baseline (advantage 0), never a score of 0.

The task is found from the prompt, because TRL hands ``rollout_func`` the prompts only. Tasks may share a
prompt (every Wordle game opens the same way): the ``num_generations`` completions of one group are one
task, and the groups of a shared prompt take its tasks in turn.

An environment's tools (its ``tool_schemas`` for the task, what the local OpenAI policy sends as ``tools=``) are
rendered into a conversational prompt by the chat template (``apply_chat_template(tools=...)``, where GRPOTrainer's
own ``tools`` go), and into each environment turn's rendering; the model calls them in its text, as the environment
parses them. A string prompt has no place for them.

Limits: generation goes through ``model.generate`` on the trainer's process (no vLLM: ``use_vllm=True`` is
refused with a clear error); text-only models.
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

from rewardpipe.environment import Environment, EpisodeState, TaskRow
from rewardpipe.episode import (
    ConversationError,
    EnvServices,
    EpisodeError,
    converse,
    each_with_bounded_hooks,
    end_without_commit,
    env_tool_schemas,
    error_record,
    failure_record,
    hook_failure,
    start_episode,
)
from rewardpipe.episode import episode_metrics as environment_metrics
from rewardpipe.execution.result import ExecutionResult
from rewardpipe.integrations.trl import (
    ERROR_MESSAGE,
    TRANSCRIPT,
    BatchScorer,
    ScoredBatch,
    _as_messages,
    completion_transcript,
    gather_across_processes,
    resolve_reward,
    transcript_messages,
)
from rewardpipe.models import Message, Record, load_task_rows

logger = logging.getLogger("rewardpipe.trl")

#: The extra ``rollout_func`` field TRL forwards to the reward functions, one dict per completion.
EPISODE_FIELD = "rewardpipe_episode"
#: What the callback's stored records say about each episode, besides its components (and the environment's
#: own metrics). ``simulator_*`` counts the environment's replies and tokens (the name older runs used).
EPISODE_RECORD_METRICS = (
    "assistant_turns",
    "simulator_replies",
    "committed",
    "end_reason",
    "completion_tokens",
    "simulator_tokens",
)
#: An environment's reply after a model turn, for prompts given as plain strings (no chat template involved).
PLAIN_FEEDBACK = "\n\nUser: {reply}\n\nAssistant: "

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
    task: TaskRow | None
    tokens: EpisodeTokens
    state: EpisodeState | None = None
    record: Record | None = None
    execution: ExecutionResult | None = None
    # The environment's metrics() as read once for this episode (its record and its row share them).
    env_metrics: dict[str, Any] | None = None
    # The environment's tools for the task (its tool_schemas), rendered into the model's prompt by the chat template.
    tools: list[dict[str, Any]] | None = None

    @property
    def conversational(self) -> bool:
        return isinstance(self.prompt, list)

    @property
    def live(self) -> bool:
        return self.record is None and self.state is not None and self.state.next_action == "policy"

    def row(self, env: Environment | None = None) -> dict[str, Any]:
        """What the reward functions receive for this completion: its record's components and how the
        episode went (the environment's own metrics too: ``spec_revealed`` for ask-before-coding)."""
        record = self.record
        assert record is not None, "an episode is summarised once it is scored"
        state = self.state
        messages = state.messages if state is not None else []
        opening = len(self.task.prompt_messages()) if self.task is not None else 1
        row = {
            "rollout_id": self.rollout_id,
            "task_id": record.task_id,
            "status": record.status,
            "error": record.error.kind if record.error else None,
            "error_message": record.error.message if record.error else None,
            "components": dict(record.components),
            # the model's turns: after the task's prompt, whose few-shot assistant examples are not the model's
            "assistant_turns": sum(1 for m in messages[opening:] if m.role == "assistant"),
            "simulator_replies": sum(1 for m in messages[opening:] if m.role != "assistant"),
            "committed": bool(state is not None and state.next_action == "execute"),
            "end_reason": state.end_reason if state is not None else None,
            "completion_tokens": len(self.tokens.completion_ids),
            "simulator_tokens": self.tokens.env_mask.count(0),
        }
        if env is not None and state is not None and self.task is not None:
            # Read as a record reads them: a hook that raised, timed out or returned no dict (None) is an
            # env_metrics_error text, and a value no record takes (a list) is left out. Taken as returned, a
            # None raised here and failed TRL's whole rollout batch.
            if self.env_metrics is None:
                self.env_metrics = environment_metrics(state, self.task, env)
            extra = self.env_metrics
            row.update({k: v for k, v in extra.items() if k not in row})
        return row


class _QueuedTurn:
    """A policy holding one already generated turn: ``converse`` plays it, then pauses for the next batch."""

    def __init__(self, text: str) -> None:
        self.text: str | None = text

    @property
    def spent(self) -> bool:
        return self.text is None

    def next_turn(self, state: EpisodeState, task: Any) -> str:  # noqa: ARG002 - the policy interface's next_turn(state, task)
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
        users = [
            m.get("content") if isinstance(m, dict) else getattr(m, "content", None)
            for m in prompt
            if (m.get("role") if isinstance(m, dict) else getattr(m, "role", None)) == "user"
        ]
        return users[-1] if users and isinstance(users[-1], str) else None
    return None


def _task_text(task: TaskRow) -> str | None:
    return _prompt_text(task.prompt if isinstance(task.prompt, str) else [m.model_dump() for m in task.prompt])


class EpisodeRollout:
    """An environment's episode as a TRL ``rollout_func`` (see the module docstring).

    ``tasks``: a task JSONL path (rows of the environment's ``task_model``) or task rows. ``env``: the
    environment, by reference or object (default ``ask_before_coding``). ``reward``: a reward by reference or
    object (default: the environment's); ``weights`` override its component weights. ``executor`` defaults to
    rewardpipe's sandbox. ``max_turns`` (default: the environment's) limits the model's turns,
    ``max_turn_tokens`` one model turn (default: the whole completion budget). ``instructions`` is put in
    front of each task prompt by :meth:`dataset` (a system message for a conversational dataset).
    ``seed`` and ``chat`` are what the environment's turns get (``ctx.seed``, ``ctx.chat``).
    """

    def __init__(
        self,
        tasks: str | Path | Iterable[TaskRow],
        *,
        env: Any = "ask_before_coding",
        reward: Any = None,
        weights: Mapping[str, float] | None = None,
        executor: Any = None,
        max_turns: int | None = None,
        max_turn_tokens: int | None = None,
        instructions: str | None = None,
        run_id: str = "trl",
        workers: int | None = None,
        seed: int = 0,
        chat: Callable[..., str] | None = None,
    ) -> None:
        from rewardpipe.references import resolve_environment
        from rewardpipe.rewards import reads_reference

        self.env = resolve_environment(env)
        self.tasks = load_task_rows(tasks, self.env.task_model) if isinstance(tasks, (str, Path)) else list(tasks)
        if not self.tasks:
            raise ValueError("EpisodeRollout needs at least one task")
        if max_turns is not None and max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        if max_turn_tokens is not None and max_turn_tokens < 1:
            raise ValueError("max_turn_tokens must be at least 1")
        self.reward = resolve_reward(reward if reward is not None else self.env.reward, weights)
        if reads_reference(self.reward):
            raise ValueError(
                f"reward '{self.reward.name}' scores single-turn samples against their own reference "
                f"answer; an episode of '{self.env.name}' is scored by a reward that reads no "
                f"reference (its own: '{self.env.reward.name}')"
            )
        self._executor = executor
        self.max_turns = max_turns
        self.max_turn_tokens = max_turn_tokens
        self.instructions = instructions
        self.run_id = run_id
        self.workers = workers
        self.services = EnvServices(seed=seed, chat=chat)
        self.batches = 0
        self.last_episodes: list[Episode] = []  # the latest batch, for inspection
        self._by_text: dict[str, list[TaskRow]] = {}
        self._by_rendered: dict[str, list[TaskRow]] = {}
        for task in self.tasks:
            text = _task_text(task)
            if text is not None:
                self._by_text.setdefault(text, []).append(task)
            for conversational in (False, True):
                candidates = self._by_rendered.setdefault(_prompt_key(self.prompt_for(task, conversational)), [])
                if task not in candidates:
                    candidates.append(task)
        self._turn: dict[str, int] = {}  # a shared prompt's next task, in turn

    @property
    def executor(self) -> Any:
        if self._executor is None:
            from rewardpipe.execution import get_executor

            self._executor = get_executor()
        return self._executor

    # -- the dataset -------------------------------------------------------------------------------------

    def prompt_for(self, task: TaskRow, conversational: bool = False) -> Any:
        if conversational or not isinstance(task.prompt, str):
            system = [{"role": "system", "content": self.instructions}] if self.instructions else []
            return [*system, *(m.model_dump(mode="json") for m in task.prompt_messages())]
        return f"{self.instructions}\n\n{task.prompt}" if self.instructions else task.prompt

    def dataset_rows(self, conversational: bool = False) -> list[dict[str, Any]]:
        return [{"prompt": self.prompt_for(t, conversational), "task_id": t.task_id} for t in self.tasks]

    def dataset(self, conversational: bool = False):
        """A ``datasets.Dataset`` with one row per task (``prompt``, ``task_id``) for ``train_dataset``."""
        from datasets import Dataset

        return Dataset.from_list(self.dataset_rows(conversational))

    def tasks_for(self, prompt: Any) -> list[TaskRow]:
        """The tasks a prompt may have been made from: as :meth:`prompt_for` renders them, or whose text is
        the prompt's (string prompt, or last user message)."""
        tasks = self._by_rendered.get(_prompt_key(prompt))
        if not tasks:
            text = _prompt_text(prompt)
            tasks = self._by_text.get(text, []) if text is not None else []
        return tasks

    def task_for(self, prompt: Any) -> TaskRow | None:
        """The next task of ``prompt`` (its tasks taken in turn when several share it), or None."""
        tasks = self.tasks_for(prompt)
        if not tasks:
            return None
        key = _prompt_key(prompt)
        turn = self._turn.get(key, 0)
        self._turn[key] = turn + 1
        return tasks[turn % len(tasks)]

    # -- the episodes ------------------------------------------------------------------------------------

    def play(
        self,
        prompts: Sequence[Any],
        codec: TokenCodec,
        generate: Generate,
        *,
        max_completion_tokens: int,
        group_size: int = 1,
        offset: int = 0,
        batch_prompts: Sequence[Any] | None = None,
    ) -> list[Episode]:
        """One episode per prompt (TRL's prompts already hold each prompt ``num_generations`` times), every
        live episode's next turn generated in one ``generate`` call per round. A failure of ``generate`` is
        the trainer's own (the model could not run) and propagates; everything after it is per episode.

        Under several processes ``prompts`` is this process's slice of the batch: ``offset`` is where it starts in
        the whole batch and ``batch_prompts`` the whole batch's prompts (every process's, in process order), so a
        completion's group is its place in the whole batch and every process chooses the same task for a group."""
        if max_completion_tokens < 1:
            raise ValueError("max_completion_tokens must be at least 1")
        step = self.batches
        self.batches += 1
        episodes = []
        size = max(1, group_size)
        group_task: dict[tuple[int, str], TaskRow | None] = {}
        # One task per group (a GRPO group is K answers to one task), chosen over the whole batch in its order: every
        # process makes the same choices (its own slice alone split a group or chose its task apart).
        if batch_prompts is not None:
            for index, prompt in enumerate(batch_prompts):
                key = (index // size, _prompt_key(prompt))
                if key not in group_task:
                    group_task[key] = self.task_for(prompt)
        else:
            offset = 0
        picked: list[tuple[int, str, TaskRow | None]] = []
        for local, prompt in enumerate(prompts):
            index = offset + local
            key = (index // size, _prompt_key(prompt))
            if key not in group_task:  # (a slice that is not the batch's at its offset: chosen here, as alone)
                group_task[key] = self.task_for(prompt)
            picked.append((index, f"b{step}-g{index // size}", group_task[key]))
        # The environment's hooks of every episode at once (each_with_bounded_hooks): its tools, then its start.
        offered = each_with_bounded_hooks(self.env, self._tools, [task for _, _, task in picked])
        for prompt, (index, group, task), (tools, tools_problem) in zip(prompts, picked, offered, strict=True):
            try:
                prompt_ids, render_problem = list(_with_tools(codec.prompt_ids, tools)(prompt)), None
            except Exception as exc:  # noqa: BLE001 - a prompt the tokenizer refuses (a chat template raising on
                # its roles, a content that is not text) is its own episode's error, not the batch's: TRL stops
                prompt_ids, render_problem = [], f"{type(exc).__name__}: {exc}"
            episode = Episode(f"{group}-k{index % size}", prompt, task, EpisodeTokens(prompt_ids), tools=tools)
            if tools_problem is not None and task is not None:  # the environment's tool_schemas failed
                episode.record = failure_record(
                    run_id=self.run_id,
                    step=step,
                    group_id=group,
                    rollout_id=episode.rollout_id,
                    task_id=task.task_id,
                    kind="simulator_error",
                    message=tools_problem,
                    reward=self.reward,
                )
                episode.tokens = EpisodeTokens(prompt_ids or [self._filler(codec)])
                episode.tokens.add_feedback([self._filler(codec)])
            elif render_problem is not None:
                episode.record = failure_record(
                    run_id=self.run_id,
                    step=step,
                    group_id=group,
                    rollout_id=episode.rollout_id,
                    task_id=task.task_id if task is not None else "unknown",
                    kind="prompt_render_error",
                    message=f"the prompt cannot be tokenized: {render_problem}",
                    reward=self.reward,
                )
                # TRL needs one token per completion at least (and a prompt to pad): both masked out of the loss.
                episode.tokens = EpisodeTokens([self._filler(codec)])
                episode.tokens.add_feedback([self._filler(codec)])
            elif episode.task is None:
                text = _prompt_text(prompt) or repr(prompt)
                episode.record = failure_record(
                    run_id=self.run_id,
                    step=step,
                    group_id=group,
                    rollout_id=episode.rollout_id,
                    task_id="unknown",
                    kind="unknown_task",
                    message=f"no task has this prompt: {text[:200]!r}",
                    reward=self.reward,
                )
                # TRL needs one token per completion at least; it is masked out of the loss.
                episode.tokens.add_feedback([self._filler(codec)])
            episodes.append(episode)
        starting = [(e, group, step) for e, (_, group, _) in zip(episodes, picked, strict=True) if e.record is None]
        for (episode, _, _), failed in zip(
            starting, each_with_bounded_hooks(self.env, self._start, starting), strict=True
        ):
            if failed:  # the environment's start failed (its error record): one token for TRL, masked out of the loss
                episode.tokens.add_feedback([self._filler(codec)])

        while waiting := [e for e in episodes if e.live]:
            budgets = [self._turn_budget(e, max_completion_tokens) for e in waiting]
            for episode, budget in zip(waiting, budgets, strict=True):
                if budget < 1 and episode.state is not None:  # (a live episode has its state)
                    episode.state = end_without_commit(episode.state, "completion_budget")
            ready = [(e, b) for e, b in zip(waiting, budgets, strict=True) if b >= 1]
            if not ready:
                continue
            generated = generate([e.tokens.context for e, _ in ready], max(b for _, b in ready))
            if len(generated) != len(ready):
                raise RuntimeError(f"generate returned {len(generated)} turns for {len(ready)} contexts")
            turns = []
            for (episode, budget), new in zip(ready, generated, strict=True):
                ids = cut_at_eos(list(new)[:budget], codec.eos_id) or [self._filler(codec)]
                episode.tokens.add_policy_turn(ids)
                turns.append((episode, codec.decode(ids)))
            # every episode's environment turn at once; their replies tokenized here, one after another
            replies = each_with_bounded_hooks(self.env, self._converse, turns)
            for (episode, _), reply in zip(turns, replies, strict=True):
                if reply is not None:
                    self._take_reply(episode, reply, codec, max_completion_tokens)

        ended = [e for e in episodes if e.record is None]
        for episode, (record, execution) in zip(ended, self._score(ended), strict=True):
            episode.record, episode.execution = record, execution
        # The metrics of the episodes that failed on the way (their rows report them), read together too.
        unread = [e for e in episodes if e.env_metrics is None and e.state is not None and e.task is not None]
        for episode, read in zip(
            unread,
            each_with_bounded_hooks(self.env, lambda e: environment_metrics(e.state, e.task, self.env), unread),
            strict=True,
        ):
            episode.env_metrics = read
        self.last_episodes = episodes
        return episodes

    def _tools(self, task: TaskRow | None) -> tuple[list[dict[str, Any]] | None, str | None]:
        """The environment's tools for ``task`` (its ``tool_schemas``, asked as the local policy asks it), or the
        failure of that hook: the episode's ``simulator_error``, never the batch's."""
        if task is None:
            return None, None
        try:
            schemas = env_tool_schemas(self.env)
            tools = schemas(task) if callable(schemas) else schemas
            return ([dict(tool) for tool in tools] if tools else None), None
        except Exception as exc:  # noqa: BLE001 - the environment's hook (raised, hung, or no list of dicts)
            return None, hook_failure(self.env, "tool_schemas", exc)

    @staticmethod
    def _filler(codec: TokenCodec) -> int:
        """The one token an episode with nothing of its own still hands TRL (end of sequence, else 0)."""
        return codec.eos_id if codec.eos_id is not None else 0

    def _turn_budget(self, episode: Episode, max_completion_tokens: int) -> int:
        left = max_completion_tokens - len(episode.tokens.completion_ids)
        return min(left, self.max_turn_tokens) if self.max_turn_tokens else left

    def _start(self, starting: tuple[Episode, str, int]) -> bool:
        """Open the episode (``env.start``) of ``(episode, group, step)``; False when it started, True when the
        environment's start failed (the episode's error record)."""
        episode, group, step = starting
        assert episode.task is not None
        try:
            episode.state = start_episode(
                episode.task,
                env=self.env,
                run_id=self.run_id,
                step=step,
                group_id=group,
                rollout_id=episode.rollout_id,
                max_turns=self.max_turns,
            )
        except Exception as exc:  # noqa: BLE001 - the environment's start failed: this episode's error
            episode.record = failure_record(
                run_id=self.run_id,
                step=step,
                group_id=group,
                rollout_id=episode.rollout_id,
                task_id=episode.task.task_id,
                kind="simulator_error",
                message=hook_failure(self.env, "start", exc),
                reward=self.reward,
            )
            return True
        return False

    def _converse(self, turn: tuple[Episode, str]) -> tuple[EpisodeState, list[Message]] | None:
        """Play the generated turn and the environment's reply through ``converse``; stop before the next turn. The
        environment's hooks only (no tokenizer: :meth:`_take_reply` renders the reply). Returns the state before the
        reply and the reply's messages when the model is next, else None (the episode ended, or failed: its record)."""
        episode, text = turn
        assert episode.state is not None and episode.task is not None
        policy = _QueuedTurn(text)
        before_reply: list[EpisodeState] = []

        def pause(state: EpisodeState) -> bool:
            if state.next_action == "env":
                before_reply.append(state)
            return state.next_action == "policy" and policy.spent

        try:
            state = converse(episode.state, episode.task, policy, self.env, pause, self.services)
        except ConversationError as exc:  # the environment failed: an error record, never a score
            episode.state = exc.state
            episode.record = error_record(exc.state, exc.kind, str(exc), self.reward)
            return None
        episode.state = state
        if state.next_action == "policy" and before_reply:  # the environment replied; the model is next
            return before_reply[-1], state.messages[len(before_reply[-1].messages) :]
        return None

    def _take_reply(
        self,
        episode: Episode,
        reply: tuple[EpisodeState, list[Message]],
        codec: TokenCodec,
        max_completion_tokens: int,
    ) -> None:
        """The environment's reply as the episode's tokens (masked out of the loss), or the end of the episode when
        it leaves no room for another turn."""
        before, messages = reply
        try:
            ids = list(env_message_ids(codec, messages, episode.conversational, episode.tools))
        except Exception as exc:  # noqa: BLE001 - the reply cannot be tokenized (a chat template refusing
            # its role or content): this episode's error record, never the batch's (TRL would stop)
            episode.state = before
            episode.record = error_record(before, "env_render_error", f"{type(exc).__name__}: {exc}", self.reward)
            return
        if len(episode.tokens.completion_ids) + len(ids) >= max_completion_tokens:
            episode.state = end_without_commit(before, "completion_budget")
        else:
            episode.tokens.add_feedback(ids)

    def _score(self, episodes: Sequence[Episode]) -> list[tuple[Record, ExecutionResult | None]]:
        from rewardpipe.runner import score_episodes

        if not episodes:
            return []
        executor = self.executor if self.env.runs_code else None
        # cast: an episode without a record started (one whose task or start failed has its error record)
        played = [(cast(EpisodeState, e.state), e.task) for e in episodes]
        # The environment's metrics() once per episode: its record takes them, and so does its row (reading
        # them again there called every environment's metrics() twice per episode).
        metrics = each_with_bounded_hooks(
            self.env, lambda pair: environment_metrics(pair[0], pair[1], self.env), played
        )
        for episode, read in zip(episodes, metrics, strict=True):
            episode.env_metrics = read
        return score_episodes(
            played,
            executor=executor,
            reward=self.reward,
            env=self.env,
            workers=self.workers,
            env_metrics=[cast(dict, e.env_metrics) for e in episodes],
        )

    # -- TRL ---------------------------------------------------------------------------------------------

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list | None]:
        """``rollout_func(prompts, trainer)`` for ``GRPOTrainer``."""
        if getattr(trainer, "use_vllm", False):
            raise NotImplementedError(
                "EpisodeRollout generates each turn with the trainer's model through "
                "transformers' generate; set use_vllm=False"
            )
        codec = TokenizerCodec(
            trainer.processing_class,
            getattr(trainer, "chat_template", None),
            getattr(trainer, "chat_template_kwargs", None),
        )
        training = bool(getattr(trainer.model, "training", True))
        group = trainer.num_generations if training else getattr(trainer, "num_generations_eval", 1)
        offset, everyone = batch_slice(prompts, getattr(trainer, "accelerator", None))
        episodes = self.play(
            prompts,
            codec,
            trainer_generate(trainer, codec.tokenizer),
            max_completion_tokens=int(trainer.max_completion_length),
            group_size=group or 1,
            offset=offset,
            batch_prompts=everyone,
        )
        return rollout_output(episodes, self.env)

    def reward_functions(self) -> tuple[list[Callable[..., list]], list[float]]:
        """``(reward_funcs, reward_weights)`` reading each episode's components (without the callback)."""
        scorer = EpisodeScorer(self.reward)
        return scorer.functions(), [c.weight for c in self.reward.components]


def batch_slice(prompts: Sequence[Any], accelerator: Any) -> tuple[int, list[Any] | None]:
    """``(offset, whole batch's prompts)`` of this process's ``prompts`` under several processes (every process's
    prompts gathered in process order, as TRL gathers its completions); ``(0, None)`` for one process."""
    processes = int(getattr(accelerator, "num_processes", 1) or 1)
    if processes <= 1:
        return 0, None
    from accelerate.utils import gather_object

    slices = gather_object([list(prompts)])  # a collective: every process's rollout_func calls it
    rank = int(accelerator.process_index)
    return sum(len(part) for part in slices[:rank]), [prompt for part in slices for prompt in part]


def rollout_output(episodes: Sequence[Episode], env: Environment | None = None) -> dict[str, list | None]:
    """The dict ``rollout_func`` returns to TRL (see the module docstring)."""
    return {
        "prompt_ids": [e.tokens.prompt_ids for e in episodes],
        "completion_ids": [e.tokens.completion_ids for e in episodes],
        "logprobs": None,
        "env_mask": [e.tokens.env_mask for e in episodes],
        EPISODE_FIELD: [e.row(env) for e in episodes],
    }


def env_message_ids(
    codec: Any, messages: Sequence[Message], conversational: bool, tools: list[dict[str, Any]] | None = None
) -> list[int]:
    """The tokens of the environment's messages after a model turn: the codec's own rendering of them
    (``env_ids``, with their roles, and the episode's ``tools`` where it takes them) when it has one, else each
    message's text as a user reply."""
    if hasattr(codec, "env_ids"):
        return list(_with_tools(codec.env_ids, tools)([m.model_dump(mode="json") for m in messages], conversational))
    ids: list[int] = []
    for message in messages:
        ids.extend(codec.feedback_ids(message.content, conversational))
    return ids


@functools.cache
def _takes_tools(method: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "tools" or p.kind is p.VAR_KEYWORD for p in parameters)


def _with_tools(method: Callable[..., Any], tools: list[dict[str, Any]] | None) -> Callable[..., Any]:
    """``method`` (a codec's ``prompt_ids`` / ``env_ids``) handed the episode's tools when there are some and it takes
    a ``tools`` keyword (a codec of your own written before it need not); the method as it is otherwise."""
    if not tools:
        return method
    if not _takes_tools(getattr(method, "__func__", method)):
        _warn_tools_dropped(type(getattr(method, "__self__", method)).__name__)
        return method
    return functools.partial(method, tools=tools)


@functools.cache
def _warn_tools_dropped(codec: str) -> None:
    logger.warning(
        "rewardpipe: the environment offers the model tools, but the codec %s takes no tools= keyword: its prompts "
        "are rendered without them",
        codec,
    )


class EpisodeScorer(BatchScorer):
    """Serves each component of the episodes :class:`EpisodeRollout` scored (the ``rewardpipe_episode``
    field TRL forwards) to its reward function, and logs the episodes' shape through TRL's ``log_metric``:
    ``rewardpipe/episode/assistant_turns``, ``simulator_replies`` (the environment's replies), ``committed``,
    every numeric metric the environment adds (means over the process's completions) and
    ``simulator_token_fraction``."""

    def __init__(self, reward: Any, *, episodes: EpisodeRollout | None = None, **kwargs: Any) -> None:
        super().__init__(reward, **kwargs)
        # The rollout whose episodes these are: their conversations are the stored transcripts (keeps_transcripts).
        self.episodes = episodes
        # Every process's names of the episodes' figures (a collective): see _log_episode_metrics.
        self.gather: Callable[[list[Any]], list[Any]] = gather_across_processes
        self._inputs: tuple[Sequence[Any], Sequence[Any]] = ((), ())

    def read_batch(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        kwargs: Mapping[str, Any],
    ) -> tuple[Any, str]:
        self._inputs = (prompts, completions)  # a completion whose episode is not at hand: its transcript, as given
        rows = kwargs.get(EPISODE_FIELD)
        if not isinstance(rows, (list, tuple)) or len(rows) != len(completions):
            raise ValueError(
                f"the reward functions of EpisodeRollout need the '{EPISODE_FIELD}' field of its "
                f"rollout_func: pass rollout_func=<the EpisodeRollout> to GRPOTrainer"
            )
        # a row that is not a mapping (TRL forwards the field as given) is that completion's error, below
        rows = [row if isinstance(row, Mapping) else {"status": "error", "error": "malformed_row"} for row in rows]
        return rows, json.dumps([row.get("rollout_id") for row in rows], default=repr)

    def _score(self, rows: list[dict], fingerprint: str, kwargs: Mapping[str, Any]) -> ScoredBatch:  # type: ignore[override]  # this scorer's read_batch keys a batch by its episode rows, not a BatchKey
        names = self.reward.component_names
        values: list[dict[str, float | None]] = []
        errors: list[str | None] = []
        for row in rows:
            # what TRL served back is read, not trusted: a component that is not a number is the row's error
            served, kind = _served(row, names)
            values.append(served)
            errors.append(kind)
        self.batches_scored += 1
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            self._log_episode_metrics(rows, log_metric)
        details = [
            {
                "task_id": row.get("task_id"),
                "metrics": {
                    k: v
                    for k, v in row.items()
                    if k not in _ROW_FIELDS and v is not None and isinstance(v, (int, float, str, bool))
                },
                # what the episode's error said (which hook or component, and where), for its stored record
                **({ERROR_MESSAGE: row["error_message"]} if isinstance(row.get("error_message"), str) else {}),
            }
            for row in rows
        ]
        if self.keeps_transcripts:
            for detail, transcript in zip(details, self._transcripts(rows), strict=True):
                detail[TRANSCRIPT] = transcript
        return ScoredBatch(fingerprint, values, errors, details=details)

    def _log_episode_metrics(self, rows: Sequence[Mapping[str, Any]], log_metric: Callable[[str, float], Any]) -> None:
        """The episodes' means through TRL's ``log_metric``, under the same names on every process. TRL averages each
        name over the processes with one collective per name, in name order: a name one process logs and another does
        not (an environment's metric only some episodes report, ``env_observations_cut``; none of them on a process
        whose episodes all failed) paired the values of different metrics, or waited for ever. The names are the union
        over the processes (a collective, taken by every process's same reward call); a process whose rows have none
        of a metric logs its mean, 0."""
        try:  # monitoring: a row's metric that is not a number never costs the batch its rewards
            local = episode_metrics(rows) if rows else {}
        except Exception:  # logged, the rewards are still served (and the names still gathered)
            logger.exception("rewardpipe: the episodes' metrics could not be logged")
            local = {}
        try:
            names = sorted({name for name in self.gather(sorted(local)) if isinstance(name, str)})
        except Exception:  # a gather that failed: no figure, rather than names that differ
            logger.exception("rewardpipe: the episodes' metric names could not be gathered across processes")
            return
        for name in names:
            log_metric(name, local.get(name, 0.0))

    def _transcripts(self, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Each row's transcript: its episode's conversation (the rollout's latest batch, on this process) and
        verdict, else the prompt and completion TRL gave (an episode this scorer's rollout did not play)."""
        from rewardpipe.transcripts import verdict_of

        rollout = self.episodes
        played = {e.rollout_id: e for e in rollout.last_episodes} if rollout is not None else {}
        prompts, completions = self._inputs
        out = []
        for index, row in enumerate(rows):
            episode = played.get(row.get("rollout_id"))  # type: ignore[arg-type]
            if episode is None or rollout is None:
                prompt = prompts[index] if index < len(prompts) else ""
                out.append(completion_transcript(prompt, completions[index] if index < len(completions) else ""))
                continue
            messages = episode.state.messages if episode.state is not None else _as_messages(episode.prompt, "user")
            verdict = verdict_of(episode.execution, None, episode.record, rollout.env.runs_code)
            out.append({"messages": transcript_messages(messages), "verdict": verdict.model_dump(mode="json")})
        return out


def _served(row: Mapping[str, Any], names: Sequence[str]) -> tuple[dict[str, float | None], str | None]:
    """A row's components for TRL and its error kind: an error row's are ``None``, and so are those of a
    scored row whose components are not all numbers (``malformed_row``, never a TypeError out of the batch nor a
    partial reward)."""
    empty: dict[str, float | None] = dict.fromkeys(names)
    if row.get("status") != "scored":
        error = row.get("error")
        return empty, error if isinstance(error, str) and error else "unscored"
    components = row.get("components")
    if not isinstance(components, Mapping):
        return empty, "malformed_row"
    out: dict[str, float | None] = {}
    for name in names:
        value = components.get(name)
        # a scored row has every component (None is an error record's): one missing would be summed as a partial
        # reward by TRL (nansum over the functions that have a value)
        if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
            return empty, "malformed_row"
        out[name] = float(value)
    return out, None


#: Fields of an episode row that are not record metrics.
_ROW_FIELDS = frozenset({"rollout_id", "task_id", "status", "error", "error_message", "components"})
_TOKEN_FIELDS = ("completion_tokens", "simulator_tokens")


def _metric_number(value: Any) -> float:
    """An episode's metric as its mean reads it: a finite number (a boolean as 0 or 1); anything else (absent, NaN,
    an infinity, a text where other episodes report a number) counts 0, as an episode that does not report it. Read
    as given, one episode's NaN made the batch's mean NaN, and a text raised, which logged every figure of the batch
    as 0."""
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, (int, float)):
        return 0.0
    try:
        number = float(value)
    except OverflowError:  # an integer past a float's range
        return 0.0
    return number if math.isfinite(number) else 0.0


def _unread_kind(value: Any) -> str | None:
    """What an episode's metric is when its mean cannot read it as a number (``None`` when it can, or is absent)."""
    if value is None or _metric_number(value) != 0.0 or value == 0:
        return None
    return "NaN or an infinity" if isinstance(value, float) else type(value).__name__


@functools.cache
def _warn_unread_metric(name: str, kinds: str) -> None:
    logger.warning(
        "rewardpipe: the episodes' metrics could not be logged as given: %s of some episodes is no finite number (%s); "
        "those episodes count as not reporting it",
        name,
        kinds,
    )


def episode_metrics(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Means over the process's completions: turns, the environment's replies, committed episodes, and every
    numeric metric the environment adds (``spec_revealed`` for ask-before-coding); a value that is no finite number
    counts as not reported (:func:`_metric_number`)."""
    count = len(rows)
    names = ["assistant_turns", "simulator_replies", "committed"]
    names += sorted(
        {
            k
            for row in rows
            for k, v in row.items()
            if k not in _ROW_FIELDS
            and k not in names
            and k not in _TOKEN_FIELDS
            and isinstance(v, (int, float))
            and not isinstance(v, bool)
        }
    )
    for name in names:
        unread = {kind for row in rows if (kind := _unread_kind(row.get(name))) is not None}
        if unread:
            _warn_unread_metric(name, ", ".join(sorted(unread)))
    out = {f"rewardpipe/episode/{name}": sum(_metric_number(row.get(name)) for row in rows) / count for name in names}
    tokens = sum(int(row.get("completion_tokens") or 0) for row in rows)
    out["rewardpipe/episode/simulator_token_fraction"] = (
        sum(int(row.get("simulator_tokens") or 0) for row in rows) / tokens if tokens else 0.0
    )
    return out


# --------------------------------------------------------------------------------------------------
# The transformers side (imported only when TRL calls the rollout)


class TokenizerCodec:
    """:class:`TokenCodec` for a transformers tokenizer (or a processor wrapping one)."""

    def __init__(
        self,
        processing_class: Any,
        chat_template: str | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.tokenizer = getattr(processing_class, "tokenizer", processing_class)
        self.chat_template = chat_template
        self.template_kwargs = dict(chat_template_kwargs or {})
        self.eos_id = self.tokenizer.eos_token_id
        self._feedback_cache: dict[tuple[str, bool], list[int]] = {}

    def _render(
        self, messages: list[dict], generation_prompt: bool, tools: list[dict[str, Any]] | None = None
    ) -> list[int]:
        ids = self.tokenizer.apply_chat_template(
            messages,
            add_generation_prompt=generation_prompt,
            tokenize=True,
            return_dict=False,
            # the environment's tools, where the chat template renders them (as GRPOTrainer's own tools=): never an
            # empty list, for which some templates render tool boilerplate
            **({"tools": tools} if tools else {}),
            **({"chat_template": self.chat_template} if self.chat_template else {}),
            **self.template_kwargs,
        )
        if isinstance(ids, Mapping):
            ids = ids["input_ids"]
        return list(ids)

    def prompt_ids(self, prompt: Any, tools: list[dict[str, Any]] | None = None) -> list[int]:
        """A conversational prompt through the chat template (with the environment's ``tools``); a string prompt
        through the plain tokenizer, where tools have no place (use a conversational dataset for a tool env)."""
        if isinstance(prompt, list):
            return self._render(prompt, True, tools)
        return list(self.tokenizer(text=prompt)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def feedback_ids(self, reply: str, conversational: bool) -> list[int]:
        return self.env_ids([{"role": "user", "content": reply}], conversational)

    def env_ids(
        self, messages: list[dict[str, Any]], conversational: bool, tools: list[dict[str, Any]] | None = None
    ) -> list[int]:
        if not conversational:
            text = "".join(PLAIN_FEEDBACK.format(reply=m.get("content") or "") for m in messages)
            return list(self.tokenizer(text=text, add_special_tokens=False)["input_ids"])
        # The chat template's turns for the messages plus generation prompt, after an assistant turn that ended
        # in EOS: a conversation rendered with and without them (the way TRL renders tool results).
        dummy = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "dummy"}]
        prefix = self._render(dummy, False, tools)
        full = self._render([*dummy, *messages], True, tools)
        if self.eos_id in prefix:
            prefix = prefix[: len(prefix) - prefix[::-1].index(self.eos_id)]
        if full[: len(prefix)] != prefix:
            raise ValueError(
                "the chat template does not render the environment's turn as a suffix of the conversation before it"
            )
        return full[len(prefix) :]


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
        with (
            unwrap_model_for_generation(
                trainer.model_wrapped,
                trainer.accelerator,
                gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
                generation_kwargs=getattr(trainer, "generation_kwargs", None),
            ) as model,
            torch.no_grad(),
        ):
            out = model.generate(input_ids=input_ids, attention_mask=attention, generation_config=config)
        return [row[width:].tolist() for row in out.cpu()]

    return generate
