"""What a deployed function reads of the user's code (issue 20): explicit references, imported by reference
only, and a clear ConfigurationError naming the variable for anything else."""

from __future__ import annotations

import json

import pytest

from rewardpipe.aws.settings import ConfigurationError, Settings
from tests.aws import harness

harness.use_user_package()


@pytest.fixture
def no_entry_point_scan(monkeypatch):
    """Any read of the installed distributions' entry points fails the test: a cold start must not scan them."""
    import importlib.metadata

    from rewardpipe import references

    def refuse(*args, **kwargs):
        raise AssertionError("entry points were scanned at cold start")

    monkeypatch.setattr(importlib.metadata, "entry_points", refuse)
    references._registrations.cache_clear()
    yield
    references._registrations.cache_clear()


def test_the_users_environment_and_rewards_are_imported_by_reference(no_entry_point_scan):
    settings = Settings.from_env(
        {
            "ENVIRONMENT_REF": "acme_rewards.guess:ENVIRONMENT",
            "ENVIRONMENT_VERSION": "1.2",
            "REWARD_REF": "acme_rewards.guess:GUESS",
            "REWARD_WEIGHTS": json.dumps({"closeness": 0.25}),
        }
    )
    assert settings.environment_tag == "acme_guess@1.2" and settings.environment_version == "1.2"
    assert settings.environment.task_model.__name__ == "GuessTask"
    assert settings.reward.name == "acme_guess" and settings.reward.weights["closeness"] == 0.25
    # The single-turn reward Lambda's own variables: a reference may name a factory, which is called.
    single = Settings.from_env(
        {"SINGLE_TURN_REWARD_REF": "acme_rewards.single:make_exact", "REWARD_WEIGHTS": json.dumps({"rambling": 2})}
    )
    assert single.single_turn_reward.name == "acme_exact_factory" and single.single_turn_reward.weights["rambling"] == 2


def test_without_a_reward_setting_the_environment_brings_its_own(no_entry_point_scan):
    settings = Settings.from_env({"ENVIRONMENT_REF": "acme_rewards.pycheck:ENVIRONMENT"})
    assert settings.reward.component_names == ["tests_pass", "first_try"]


def test_old_deployments_keep_the_built_in_environment_and_reward_name():
    settings = Settings.from_env({"REWARD_NAME": "ask_before_coding"})
    assert settings.environment_tag.startswith("ask_before_coding@")
    assert settings.reward.name == "ask_before_coding"
    assert Settings.from_env({}).single_turn_reward.name == "gsm8k"
    assert Settings.from_env({"REWARD_NAME": "code_correctness"}).single_turn_reward.name == "code_correctness"
    # REWARD_REF wins over the older REWARD_NAME.
    both = Settings.from_env({"REWARD_NAME": "gsm8k", "REWARD_REF": "acme_rewards.guess:GUESS"})
    assert both.reward.name == "acme_guess"


@pytest.mark.parametrize(
    "env, variable, says",
    [
        ({"ENVIRONMENT_REF": "acme_rewards/guess.py:ENVIRONMENT"}, "ENVIRONMENT_REF", "package.module:ATTR"),
        ({"ENVIRONMENT_REF": "acme_guess"}, "ENVIRONMENT_REF", "package.module:ATTR"),  # a short name: no scan
        ({"REWARD_REF": "acme rewards:GUESS"}, "REWARD_REF", "package.module:ATTR"),
        ({"SINGLE_TURN_REWARD_REF": "acme_rewards.single"}, "SINGLE_TURN_REWARD_REF", "package.module:ATTR"),
        ({"REWARD_COMPONENTS": '{"solved": 1}'}, "REWARD_COMPONENTS", "JSON list"),
        (
            {"REWARD_COMPONENTS": '[{"name": "solved", "range": [0, 1], "role": "bonus"}]'},
            "REWARD_COMPONENTS[0]",
            "role",
        ),
        (
            {"REWARD_COMPONENTS": '[{"name": "s", "range": [0, "1"], "role": "outcome"}]'},
            "REWARD_COMPONENTS[0]",
            "range",
        ),
        ({"JUDGE_BASE_URL": "https://judge.example/v1"}, "JUDGE_MODEL", "not set"),
        (
            {"JUDGE_BEDROCK_MODEL_ID": "m", "JUDGE_MODEL": "x", "JUDGE_BASE_URL": "https://j/v1"},
            "JUDGE_BEDROCK_MODEL_ID",
            "one judge",
        ),
    ],
)
def test_a_bad_value_is_a_configuration_error_naming_the_variable(env, variable, says):
    with pytest.raises(ConfigurationError) as info:
        Settings.from_env(env)
    assert variable in str(info.value) and says in str(info.value)


@pytest.mark.parametrize(
    "env, variable, says",
    [
        ({"ENVIRONMENT_REF": "acme_rewards.missing:ENVIRONMENT"}, "ENVIRONMENT_REF", "acme_rewards.missing"),
        ({"ENVIRONMENT_REF": "acme_rewards.guess:NOPE"}, "ENVIRONMENT_REF", "no attribute 'NOPE'"),
        ({"ENVIRONMENT_REF": "acme_rewards.guess:GUESS"}, "ENVIRONMENT_REF", "not an environment"),
        ({"REWARD_REF": "acme_rewards.guess:ENVIRONMENT"}, "REWARD_REF", "not a rewardpipe.Reward"),
        ({"REWARD_REF": "acme_rewards.guess:solved"}, "REWARD_REF", "not a rewardpipe.Reward"),
        ({"REWARD_REF": "acme_rewards.guess:GUESS", "REWARD_WEIGHTS": '{"speed": 1}'}, "REWARD_REF", "speed"),
    ],
)
def test_a_reference_that_does_not_load_is_a_configuration_error_naming_the_variable(env, variable, says):
    settings = Settings.from_env(env)
    with pytest.raises(ConfigurationError) as info:
        _ = settings.environment if variable == "ENVIRONMENT_REF" else settings.reward
    assert variable in str(info.value) and says in str(info.value)


def test_reward_components_are_read_as_data():
    from acme_rewards.guess import GUESS

    settings = Settings.from_env(harness.user_code_env(components=GUESS))
    assert settings.reward_components == {
        name: {"range": tuple(info["range"]), "role": info["role"], "weight": info["weight"]}
        for name, info in GUESS.describe().items()
    }
    assert settings.reward_components["invalid_turns"]["role"] == "penalty"


def test_judge_settings():
    assert not Settings.from_env({}).judge.configured
    bedrock = Settings.from_env({"JUDGE_BEDROCK_MODEL_ID": "anthropic.claude-3-haiku-20240307-v1:0"})
    assert bedrock.judge.configured and bedrock.judge.bedrock_model_id.startswith("anthropic.")
    openai = Settings.from_env(
        {"JUDGE_BASE_URL": "https://j.example/v1", "JUDGE_MODEL": "judge", "JUDGE_API_KEY_SECRET": "rewardpipe/judge"}
    )
    assert (openai.judge.base_url, openai.judge.model, openai.judge.api_key_secret) == (
        "https://j.example/v1",
        "judge",
        "rewardpipe/judge",
    )
