"""Round thirty-three, part 3: the trainer integrations (without TRL: a recording tokenizer and a scripted model).

Each test failed before its fix (see docs/changelog.md, round thirty-three). The real GRPOTrainer run is
``make test-trl``."""

from __future__ import annotations

import json
import logging
from typing import Any

from rewardpipe.envs.tool_call.environment import ToolCallEnvironment
from rewardpipe.integrations.trl_episodes import EpisodeRollout, TokenizerCodec
from rewardpipe.models import load_task_rows

EOS = 0


class RecordingTokenizer:
    """A chat template over characters that records the ``tools`` each rendering was given."""

    eos_token_id = EOS
    pad_token_id = EOS

    def __init__(self) -> None:
        self.tools_seen: list[Any] = []

    def apply_chat_template(self, messages, add_generation_prompt, tokenize, return_dict, tools=None, **_):  # type: ignore[no-untyped-def]
        self.tools_seen.append(tools)
        text = "".join(f"<{m['role']}>{m.get('content') or ''}{chr(1)}" for m in messages)
        if tools:
            text = "<tools>" + json.dumps([t["function"]["name"] for t in tools]) + text
        return [ord(c) for c in text + ("<assistant>" if add_generation_prompt else "")]

    def __call__(self, text, add_special_tokens=True):  # type: ignore[no-untyped-def]
        return {"input_ids": [ord(c) for c in text]}

    def decode(self, ids, skip_special_tokens=True):  # type: ignore[no-untyped-def]
        return "".join(chr(i) for i in ids if i != EOS)


def _answer(contexts, max_new_tokens):  # type: ignore[no-untyped-def]
    return [[*[ord(c) for c in "<answer>0</answer>"][:max_new_tokens], EOS] for _ in contexts]


def _rollout(env: Any) -> EpisodeRollout:
    tasks = load_task_rows("rewardpipe/data/tool_call_tasks.jsonl", env.task_model)[:2]
    return EpisodeRollout(tasks, env=env, max_turns=2)


class TestTheEnvironmentsToolsReachTheModel:
    """``EpisodeRollout`` rendered every prompt without the environment's tools: a tool environment's model (the
    trainer's own) was never told which tools it had, where a local run's OpenAI policy sends them as ``tools=`` and a
    callback turn hands them to the trainer. The chat template now renders them (``apply_chat_template(tools=...)``,
    the place GRPOTrainer's own ``tools`` go), for the prompt and for every environment turn after it."""

    def test_the_chat_template_is_given_the_tools(self):
        env = ToolCallEnvironment()
        rollout = _rollout(env)
        tokenizer = RecordingTokenizer()
        prompts = [row["prompt"] for row in rollout.dataset_rows(conversational=True)]
        episodes = rollout.play(prompts, TokenizerCodec(tokenizer), _answer, max_completion_tokens=400)
        names = [tool["function"]["name"] for tool in env.tool_schemas()]
        assert tokenizer.tools_seen and all(
            tools is not None and [t["function"]["name"] for t in tools] == names for tools in tokenizer.tools_seen
        )
        assert all(e.record is not None and e.record.status == "scored" for e in episodes)
        assert "".join(chr(i) for i in episodes[0].tokens.prompt_ids).startswith("<tools>")

    def test_a_failing_tool_schemas_is_that_episodes_error_only(self):
        class Flaky(ToolCallEnvironment):
            def tool_schemas(self, task=None):  # type: ignore[no-untyped-def]
                if task is not None and task.task_id.startswith("tc-002"):
                    raise RuntimeError("no tools today")
                return super().tool_schemas(task)

        rollout = _rollout(Flaky())
        prompts = [row["prompt"] for row in rollout.dataset_rows(conversational=True)]
        episodes = rollout.play(prompts, TokenizerCodec(RecordingTokenizer()), _answer, max_completion_tokens=400)
        assert episodes[0].record is not None and episodes[0].record.status == "scored"
        failed = episodes[1].record
        assert failed is not None and failed.status == "error" and failed.error is not None
        assert failed.error.kind == "simulator_error" and "tool_schemas" in failed.error.message
        assert episodes[1].tokens.completion_ids and set(episodes[1].tokens.env_mask) == {0}

    def test_a_codec_of_your_own_without_tools_still_plays_and_says_so(self, caplog):
        class Plain:
            eos_id = EOS

            def prompt_ids(self, prompt):  # type: ignore[no-untyped-def]
                return [ord(c) for c in prompt[-1]["content"]]

            def decode(self, ids):  # type: ignore[no-untyped-def]
                return "".join(chr(i) for i in ids if i != EOS)

            def feedback_ids(self, reply, conversational):  # type: ignore[no-untyped-def]
                return [ord(c) for c in reply]

        rollout = _rollout(ToolCallEnvironment())
        prompts = [row["prompt"] for row in rollout.dataset_rows(conversational=True)]
        with caplog.at_level(logging.WARNING, logger="rewardpipe.trl"):
            episodes = rollout.play(prompts, Plain(), _answer, max_completion_tokens=400)
        assert all(e.record is not None and e.record.status == "scored" for e in episodes)
        assert "takes no tools= keyword" in caplog.text


class TestVerifiersToolDefinitionsAsOpenAISchemas:
    """The pure half of ``VerifiersEnvironment.tool_schemas`` (the real package: test_round_thirtythree_verifiers.py):
    verifiers' provider-agnostic tool definitions become the OpenAI schema rewardpipe's policies send."""

    def test_a_vf_tool_dict_and_an_openai_one(self):
        from rewardpipe.integrations.verifiers_env import openai_tool

        plain = {"name": "lookup", "description": "d", "parameters": {"type": "object"}}
        made = {"type": "function", "function": plain}
        assert openai_tool(plain) == made and openai_tool(made) == made

    def test_a_definition_that_is_none_is_named(self):
        import pytest

        from rewardpipe.integrations.verifiers_env import VerifiersError, openai_tool

        with pytest.raises(VerifiersError, match="needs a name"):
            openai_tool({"description": "nameless"})
        with pytest.raises(VerifiersError, match=r"vf\.Tool or a dict"):
            openai_tool(["lookup"])


class TestAGroupSplitAcrossProcessesPlaysOneTask:
    """TRL hands each process its slice of the batch; ``EpisodeRollout`` grouped a slice's completions from its own
    index 0 and took a shared prompt's tasks in turn by a counter of its own. A slice not starting at a group's
    first completion (6 completions a process, 4 a group) put one group's completions in two local groups, and the
    processes chose their tasks apart: one GRPO group played two Wordle games (advantages across different tasks;
    the monitor set the group aside). The tasks are now chosen over the whole batch (every process's prompts,
    gathered), the same way on every process, and each completion's group is its place in the whole batch."""

    def _rollout(self) -> EpisodeRollout:
        from rewardpipe.envs.wordle.environment import Wordle

        env = Wordle()
        tasks = load_task_rows("rewardpipe/data/wordle_tasks.jsonl", env.task_model)[:3]
        return EpisodeRollout(tasks, env=env, max_turns=1)

    def test_the_processes_agree_on_each_groups_task(self):
        from rewardpipe.integrations.trl_episodes import TokenizerCodec

        size, per_process = 4, 6
        everyone = [row["prompt"] for row in self._rollout().dataset_rows(conversational=True)[:1]] * 12
        played = []
        for rank in range(2):  # each process has its own EpisodeRollout, as under accelerate
            rollout = self._rollout()
            local = everyone[rank * per_process : (rank + 1) * per_process]
            played += rollout.play(
                local,
                TokenizerCodec(RecordingTokenizer()),
                _answer,
                max_completion_tokens=200,
                group_size=size,
                offset=rank * per_process,
                batch_prompts=everyone,
            )
        groups: dict[int, set[str]] = {}
        for index, episode in enumerate(played):
            assert episode.task is not None
            groups.setdefault(index // size, set()).add(episode.task.task_id)
            assert episode.rollout_id == f"b0-g{index // size}-k{index % size}"
        assert all(len(tasks) == 1 for tasks in groups.values()), groups
        assert len({next(iter(tasks)) for tasks in groups.values()}) == 3  # the shared prompt's tasks in turn

    def test_each_process_finds_its_offset_in_the_gathered_batch(self, monkeypatch):
        import pytest

        accelerate_utils = pytest.importorskip("accelerate.utils")
        from rewardpipe.integrations.trl_episodes import batch_slice

        class Accelerator:
            num_processes = 2

            def __init__(self, rank: int) -> None:
                self.process_index = rank

        slices = [["a", "a", "b"], ["b", "c", "c"]]
        monkeypatch.setattr(accelerate_utils, "gather_object", lambda mine: slices)
        assert batch_slice(slices[1], Accelerator(1)) == (3, ["a", "a", "b", "b", "c", "c"])
        assert batch_slice(slices[0], Accelerator(0)) == (0, ["a", "a", "b", "b", "c", "c"])
        assert batch_slice(["x"], None) == (0, None)


class TestAScoredEpisodeRowMissingAComponentIsAnError:
    """``EpisodeScorer`` served a scored row's missing component as ``None`` beside the others' values, with no error:
    TRL sums the functions that have a value (``nansum``), so the completion trained on a partial reward (the
    missing component read as 0), and the monitor stored it as scored. Such a row (a reward of other components than
    the rollout's, a row edited on its way) is that completion's ``malformed_row`` now: ``None`` in every function."""

    def test_the_row_is_an_error_in_every_function(self):
        from rewardpipe.integrations.trl_episodes import EPISODE_FIELD, EpisodeScorer
        from rewardpipe.rewards import get_reward

        reward = get_reward("ask_before_coding")
        names = reward.component_names
        full = dict.fromkeys(names, 1.0)
        partial = dict(full)
        partial.pop(names[-1])
        rows = [
            {"rollout_id": "a", "task_id": "t", "status": "scored", "components": full},
            {"rollout_id": "b", "task_id": "t", "status": "scored", "components": partial},
        ]
        funcs = EpisodeScorer(reward).functions()
        served = [fn(prompts=["p", "p"], completions=["x", "y"], **{EPISODE_FIELD: rows}) for fn in funcs]
        assert [column[0] for column in served] == [1.0] * len(names)
        assert [column[1] for column in served] == [None] * len(names)
