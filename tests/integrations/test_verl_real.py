"""The verl adapter through verl itself (0.9.1, the pinned ``[verl]`` extra; ``make test-verl``, own venv).

verl loads ``compute_score`` from its file the way ``custom_reward_function.path/name`` does, and its
``NaiveRewardManager`` (the default reward manager) decodes a real ``DataProto`` batch, calls the function
per sample, puts each score on the sample's last response token and collects the other keys as
``reward_extra_info``. Skipped when verl is absent.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytestmark = pytest.mark.verl

import numpy as np  # noqa: E402
import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.ppo.reward import get_custom_reward_fn  # noqa: E402
from verl.workers.reward_manager.naive import NaiveRewardManager  # noqa: E402

import rewardpipe.integrations.verl as adapter  # noqa: E402

PAD = 0


class ByteTokenizer:
    """Token = byte; 0 pads. The reward manager only decodes."""

    def decode(self, ids, skip_special_tokens=True):
        return bytes(int(i) for i in ids if int(i) != PAD).decode("utf-8")


def batch(samples, reward=None):
    """A DataProto as verl's rollout hands it to the reward manager: left-padded prompts, right-padded
    responses, one attention mask over both, and the dataset's non-tensor fields (``reward``: the reward
    reference each sample's extra_info names)."""
    prompts = [list(p.encode()) for p, _, _ in samples]
    responses = [list(r.encode()) for _, r, _ in samples]
    width_p, width_r = max(map(len, prompts)), max(map(len, responses))
    prompt_ids = torch.tensor([[PAD] * (width_p - len(p)) + p for p in prompts])
    response_ids = torch.tensor([r + [PAD] * (width_r - len(r)) for r in responses])
    mask = torch.tensor(
        [
            [0] * (width_p - len(p)) + [1] * len(p) + [1] * len(r) + [0] * (width_r - len(r))
            for p, r in zip(prompts, responses)
        ]
    )
    return DataProto.from_dict(
        tensors={
            "prompts": prompt_ids,
            "responses": response_ids,
            "attention_mask": mask,
            "input_ids": torch.cat([prompt_ids, response_ids], dim=1),
        },
        non_tensors={
            "data_source": np.array(["openai/gsm8k"] * len(samples), dtype=object),
            "reward_model": np.array([{"ground_truth": g} for _, _, g in samples], dtype=object),
            "extra_info": np.array(
                [
                    {"index": i, "question": p, **({"rewardpipe_reward": reward} if reward else {})}
                    for i, (p, _, _) in enumerate(samples)
                ],
                dtype=object,
            ),
        },
    )


def test_verls_reward_manager_scores_a_batch_with_rewardpipes_compute_score():
    config = OmegaConf.create(
        {"reward": {"custom_reward_function": {"path": str(Path(adapter.__file__)), "name": "compute_score"}}}
    )
    compute_score = get_custom_reward_fn(config)  # loaded from the file, as verl loads it
    manager = NaiveRewardManager(tokenizer=ByteTokenizer(), num_examine=0, compute_score=compute_score)
    samples = [("3 + 4?", "3 + 4 = 7\n#### 7", "7"), ("3 + 4?", "It is 8", "7"), ("5 + 5?", "#### 10", "ten")]
    out = manager(batch(samples), return_dict=True)

    rewards, extra = out["reward_tensor"], out["reward_extra_info"]
    # The score sits on each sample's last response token, zeros elsewhere.
    for i, (_, response, _) in enumerate(samples):
        last = len(response.encode()) - 1
        assert rewards[i].nonzero().flatten().tolist() in ([last], [])
    assert rewards[0].sum().item() == pytest.approx(1.5) and rewards[1].sum().item() == 0.0
    # Every key has one value per sample, in sample order (a key missing from one sample would shift them).
    assert set(extra) == {"score", "format", "answer_correct", "reward_error"}
    assert all(len(values) == len(samples) for values in extra.values())
    assert extra["answer_correct"][:2] == [1.0, 0.0] and extra["reward_error"] == [0.0, 0.0, 1.0]
    assert math.isnan(extra["answer_correct"][2]) and math.isnan(extra["format"][2])  # not a fake zero
    assert rewards[2].sum().item() == 0.0  # verl needs a number: the error is flagged in reward_error
    assert {k: np.array(v).shape for k, v in extra.items()} == {k: (3,) for k in extra}  # how verl stores them


def test_a_user_reward_by_reference_and_a_raising_component_through_verls_reward_manager(monkeypatch):
    # tests/fixtures/user_pkg/acme_rl's reward whose third component raises on "BOOM": that sample is flagged
    # (reward_error 1, NaN components), the others are scored, the batch goes through.
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "fixtures" / "user_pkg"))
    config = OmegaConf.create(
        {"reward": {"custom_reward_function": {"path": str(Path(adapter.__file__)), "name": "compute_score"}}}
    )
    manager = NaiveRewardManager(tokenizer=ByteTokenizer(), num_examine=0, compute_score=get_custom_reward_fn(config))
    samples = [
        ("Answer in JSON: 3 + 4?", '{"answer": 7}', "7"),
        ("Answer in JSON: 3 + 4?", '{"answer": "BOOM"}', "7"),
        ("Answer in JSON: 2 + 2?", "four", "4"),
    ]
    out = manager(batch(samples, reward="acme_rl.json_answer:FLAKY"), return_dict=True)
    rewards, extra = out["reward_tensor"], out["reward_extra_info"]
    assert set(extra) == {"score", "valid_json", "answer_matches", "explodes_on_boom", "reward_error"}
    assert extra["reward_error"] == [0.0, 1.0, 0.0]
    assert extra["valid_json"][0] == 1.0 and extra["answer_matches"][0] == 1.0 and extra["explodes_on_boom"][0] == 1.0
    assert all(math.isnan(extra[name][1]) for name in ("valid_json", "answer_matches", "explodes_on_boom"))
    assert extra["valid_json"][2] == 0.0 and extra["answer_matches"][2] == 0.0  # a wrong answer is a real 0
    assert rewards[0].sum().item() == pytest.approx(2.5) and rewards[2].sum().item() == pytest.approx(1.0)
    assert rewards[1].sum().item() == 0.0  # verl needs a number: reward_error says this one is not a score
