"""Round thirty-seven, trainer integrations' monitoring: the TRL callback and the verifiers GroupWatch as a GRPO user
runs them (several processes, the store given to the main process only, resumed runs, rewards that return no number,
a store that stops taking writes mid-run)."""

from __future__ import annotations

import pytest

from rewardpipe.store import open_store, transcript_key


@pytest.mark.trl
def test_two_real_processes_with_the_store_on_the_main_process_only_store_every_transcript(tmp_path):
    """The store given to the main process's callback only (``store=... if RANK == 0 else None``): before, the other
    process kept no transcripts, so its half of every batch was stored without one and the alarms named examples
    (``rewardpipe show``, ``report``) that did not exist."""
    pytest.importorskip("trl")
    from tests.integrations.trl_toys import launch_two_processes

    store_dir = tmp_path / "store"
    main, other = launch_two_processes(tmp_path / "out", store_dir, main_only=True)
    assert main["failures"] == other["failures"] == []
    store = open_store(str(store_dir))
    records = list(store.iter_records("trl-two-processes"))
    assert len(records) == 40  # 2 steps x 20 completions, half of them the other process's
    for record in records:
        key = transcript_key(record.run_id, record.step, record.group_id, record.rollout_id)
        transcript = store.get_transcript(key)  # raises when it is missing
        assert [m.role for m in transcript.messages] == ["user", "assistant"]
    examples = [e for a in main["alarm_examples"] for e in a if e.get("transcript_key")]
    assert examples, main["alarm_steps"]
    for example in examples:
        store.get_transcript(example["transcript_key"])


# --------------------------------------------------------------------------------------------------
# verifiers: the within-group figures TRL's callback logs, as rollout metrics

VF_WEIGHTS = {"format": 0.5, "answer_correct": 1.0}


def _vf_group(right: list[float], form: float = 1.0) -> list[dict[str, float]]:
    return [{"format": form, "answer_correct": r, "reward_error": 0.0} for r in right]


def test_a_watched_groups_figures_average_over_the_batch_to_the_monitors_figures():
    """GroupWatch logged nothing a trainer sees (TRL's callback logs each component's within-group figures); each
    group's figures are now rollout metrics, whose mean over a step's rollouts is the step's figure."""
    from rewardpipe.integrations.verifiers_watch import GroupWatch

    watch = GroupWatch(groups_per_step=4)
    groups = [
        _vf_group([1.0, 0.0, 1.0, 1.0]),
        _vf_group([1.0] * 4),
        _vf_group([0.0, 1.0, 0.0, 1.0]),
        _vf_group([0.0] * 4),
    ]
    metrics = []
    for group in groups:
        figures = watch.group_metrics(group, VF_WEIGHTS)
        metrics += [figures] * len(group)
        report = watch.add_group(group, VF_WEIGHTS)
    for name in ("format", "answer_correct", "aggregate"):
        stats = report.aggregate if name == "aggregate" else report.components[name]
        fraction = sum(m[f"rewardpipe/{name}/zero_variance_group_fraction"] for m in metrics) / len(metrics)
        spread = sum(m[f"rewardpipe/{name}/within_group_std"] for m in metrics) / len(metrics)
        assert fraction == pytest.approx(stats.zero_variance_group_fraction)
        assert spread == pytest.approx(stats.within_group_std_mean)
    assert metrics[0]["rewardpipe/format/zero_variance_group_fraction"] == 1.0  # format is 1.0 everywhere


def test_a_group_with_one_scored_rollout_compares_nothing_and_an_unscorable_one_is_left_out():
    import math

    from rewardpipe.integrations.verifiers_watch import GroupWatch

    watch = GroupWatch()
    unscorable = {"format": math.nan, "answer_correct": math.nan, "reward_error": 1.0}
    lone = watch.group_metrics([_vf_group([1.0])[0], unscorable], VF_WEIGHTS)
    assert lone["rewardpipe/answer_correct/zero_variance_group_fraction"] == 1.0
    assert lone["rewardpipe/answer_correct/within_group_std"] == 0.0
    both = watch.group_metrics([*_vf_group([1.0, 0.0]), unscorable], VF_WEIGHTS)
    assert both["rewardpipe/answer_correct/within_group_std"] == pytest.approx(0.5)  # the NaN one is no value
    assert all(math.isfinite(value) for value in both.values())


@pytest.mark.verifiers
def test_a_real_rubric_gives_every_rollout_its_groups_figures():
    import asyncio

    vf = pytest.importorskip("verifiers")
    from openai import AsyncOpenAI
    from verifiers.clients.openai_chat_completions_client import OpenAIChatCompletionsClient

    from rewardpipe.integrations.verifiers import rubric
    from rewardpipe.integrations.verifiers_watch import GroupWatch
    from tests.integrations.test_verifiers_real import _dataset, chat_server

    watch = GroupWatch(groups_per_step=2, run_id="vf-figures")
    answers = iter(["#### 12", "#### 13"] * 4)  # well formed (format constant), right half the time
    server, url, _ = chat_server(lambda messages: next(answers))
    try:
        env = vf.SingleTurnEnv(dataset=_dataset(), rubric=rubric("gsm8k", watch=watch))
        client = OpenAIChatCompletionsClient(AsyncOpenAI(base_url=url, api_key="local"))
        group = [{"prompt": [{"role": "user", "content": "5 + 7?"}], "example_id": 0, "answer": "12"}] * 4
        outputs = asyncio.run(env.run_group(group, client, "scripted", {}))
    finally:
        server.shutdown()
    for output in outputs:
        metrics = output["metrics"]
        assert metrics["rewardpipe/format/zero_variance_group_fraction"] == 1.0
        assert metrics["rewardpipe/answer_correct/zero_variance_group_fraction"] == 0.0
        assert metrics["rewardpipe/answer_correct/within_group_std"] == pytest.approx(0.5)
        assert metrics["reward_error"] == 0.0
