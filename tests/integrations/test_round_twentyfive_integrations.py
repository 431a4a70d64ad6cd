"""Round twenty-five: an independent review of the trainer integrations (TRL, verl, verifiers, Nova Forge).
Each class's docstring names the bug it pins."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rewardpipe.integrations.verl import compute_score


class TestVerlBatchRewardManager:
    """verl's ``reward_model.reward_manager=batch`` (``BatchRewardManager``) calls the custom reward function once
    per batch, with keywords only: ``compute_score(data_sources=..., solution_strs=..., ground_truths=...,
    extra_infos=..., **reward_kwargs)`` (numpy object arrays for the non-tensor columns), and reads back one score
    or dict per sample. ``compute_score`` required ``data_source``, ``solution_str`` and ``ground_truth`` as
    positionals, so that call raised ``TypeError`` out of the reward manager and stopped training (verl 0.3's
    manager caught it and scored the whole batch 0.0). It now answers such a call with one dict per sample, each
    the one the per-sample call gives, one bad sample flagged without the others."""

    def _batch(self):
        return {
            "data_sources": np.array(["openai/gsm8k"] * 4, dtype=object),
            "solution_strs": ["6 * 7 = 42\n#### 42", "It is 41.", None, "#### 42"],
            "ground_truths": ["42", "42", "42", "forty-two"],
            "extra_infos": np.array([{"index": i, "question": "What is 6 * 7?"} for i in range(4)], dtype=object),
        }

    def test_a_batch_call_answers_one_dict_per_sample_as_the_per_sample_call_does(self):
        batch = self._batch()
        scores = compute_score(**batch)
        assert isinstance(scores, list) and len(scores) == 4
        for index, score in enumerate(scores):
            alone = compute_score(
                batch["data_sources"][index],
                batch["solution_strs"][index],
                batch["ground_truths"][index],
                batch["extra_infos"][index],
            )
            assert score.keys() == alone.keys()
            for key, value in alone.items():
                assert (math.isnan(value) and math.isnan(score[key])) or score[key] == value, (index, key)
        assert scores[0]["score"] > 0 and scores[0]["reward_error"] == 0.0
        assert scores[2]["reward_error"] == 1.0  # no answer: flagged, the batch still scored

    def test_reward_kwargs_and_missing_extra_infos_are_taken(self):
        batch = self._batch()
        batch["extra_infos"] = [None] * 4  # what verl passes when the dataset has no extra_info column
        scores = compute_score(**batch, sandbox_fusion_url=None)  # reward_model.reward_kwargs arrive as keywords
        assert [s["reward_error"] for s in scores] == [0.0, 0.0, 1.0, 1.0]

    def test_columns_of_different_lengths_are_refused_naming_them(self):
        batch = self._batch()
        batch["ground_truths"] = ["42"]
        with pytest.raises(ValueError, match="ground_truths"):
            compute_score(**batch)

    def test_the_per_sample_call_is_unchanged(self):
        out = compute_score("openai/gsm8k", "#### 42", "42", extra_info={"question": "q"})
        assert isinstance(out, dict) and out["reward_error"] == 0.0 and out["score"] > 0
