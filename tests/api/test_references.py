"""Naming a reward or an environment: built-in names, package.module:ATTR, path/file.py:ATTR, and short
names from installed distributions' entry points (real .dist-info folders on sys.path)."""

from __future__ import annotations

import json

import pytest

from rewardpipe import Environment, Reward, load_environment, load_reward
from rewardpipe.references import ReferenceProblem
from rewardpipe.rewards import get_reward
from tests.api.conftest import FIXTURE, install_distribution


def test_built_in_names_resolve_without_reading_entry_points(monkeypatch):
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **_: pytest.fail("entry points were scanned"))
    assert load_reward("gsm8k").name == "gsm8k"
    assert load_environment("ask_before_coding").name == "ask_before_coding"


def test_an_import_reference_names_any_attribute(acme):
    reward = load_reward("acme_rl.json_answer:JSON_ANSWER")
    assert isinstance(reward, Reward) and reward.component_names == ["valid_json", "answer_matches", "too_long"]
    env = load_environment("acme_rl.guess:ENVIRONMENT")
    assert isinstance(env, Environment) and env.version == "2"
    assert load_environment("acme_rl.guess:GuessNumber").name == "guess_number"  # a class is instantiated
    assert load_reward("acme_rl.json_answer:JSON_ANSWER", {"too_long": 0.5}).weights["too_long"] == 0.5


def test_a_file_reference_loads_a_local_file(tmp_path):
    (tmp_path / "helpers.py").write_text("BONUS = 0.25\n")
    (tmp_path / "my_reward.py").write_text(
        "from rewardpipe import Reward, component\nfrom helpers import BONUS\n"
        "@component(range=(0, 1), role='outcome')\ndef short(completion):\n"
        "    return 1.0 if len(completion) < 9 else BONUS\n"
        "SHORT = Reward('short', [short])\n"
    )
    reward = get_reward(f"{tmp_path / 'my_reward.py'}:SHORT")
    assert reward.name == "short"
    with pytest.raises(ReferenceProblem, match="works locally only"):
        get_reward(f"{tmp_path / 'my_reward.py'}:SHORT", allow_files=False)


def test_a_short_name_comes_from_an_installed_distributions_entry_points(acme):
    assert load_reward("json_answer").name == "json_answer"
    assert load_environment("guess").name == "guess_number"


def test_two_distributions_claiming_one_name_is_an_error_naming_both(acme):
    install_distribution(
        acme, "other-rl", "1.0", "[rewardpipe.rewards]\njson_answer = other_rl:R\n", top_level="other_rl"
    )
    with pytest.raises(ReferenceProblem, match="acme-rl 0.3.1.*other-rl 1.0|other-rl 1.0.*acme-rl 0.3.1"):
        load_reward("json_answer")
    assert load_reward("json_flaky").name == "json_flaky"  # the other names are unaffected


def test_a_package_cannot_shadow_a_built_in_name(acme):
    install_distribution(
        acme, "other-rl", "1.0", "[rewardpipe.rewards]\ngsm8k = acme_rl.json_answer:JSON_ANSWER\n", top_level="other_rl"
    )
    assert load_reward("gsm8k").name == "gsm8k"  # still the built-in


def test_an_unknown_name_lists_what_exists_and_how_to_register(acme):
    with pytest.raises(ReferenceProblem) as caught:
        load_environment("wordlee")
    message = str(caught.value)
    assert "unknown environment 'wordlee'" in message and "ask_before_coding" in message and "guess" in message
    assert '[project.entry-points."rewardpipe.environments"]' in message and "pip install" in message


@pytest.mark.parametrize(
    "reference, match",
    [
        ("no_such_pkg.mod:X", "cannot import 'no_such_pkg.mod'.*installed"),
        ("rewardpipe.rewards.gsm8k:NOPE", "has no attribute 'NOPE'"),
        ("rewardpipe.rewards.gsm8k:answer_format", "is a component, not a reward"),
        ("rewardpipe.envs.ask_before_coding:ENVIRONMENT", "is an environment"),
        ("rewardpipe.rewards.gsm8k:reference_value", "not a rewardpipe.Reward"),
    ],
)
def test_a_bad_reward_reference_says_what_is_wrong(reference, match):
    with pytest.raises(ReferenceProblem, match=match):
        load_reward(reference)


def test_an_environment_missing_its_reward_is_refused_naming_it(tmp_path):
    (tmp_path / "half_env.py").write_text(
        "from rewardpipe import Environment\nclass Half(Environment):\n    name = 'half'\n"
    )
    with pytest.raises(ReferenceProblem, match="reward = <a rewardpipe.Reward>"):
        load_environment(f"{tmp_path / 'half_env.py'}:Half")


def test_envs_lists_built_ins_and_installed_names_with_their_problems(acme, cli):
    install_distribution(
        acme,
        "other-rl",
        "1.0",
        "[rewardpipe.rewards]\njson_flaky = other_rl:R\ngsm8k = other_rl:G\n",
        top_level="other_rl",
    )
    result = cli("envs", "--json")
    assert result.exit_code == 0, result.output
    listing = json.loads(result.stdout)
    envs = {row["name"]: row for row in listing["environments"]}
    assert envs["guess"]["reference"] == "acme_rl.guess:ENVIRONMENT" and envs["guess"]["version"] == "2"
    assert envs["guess"]["distribution"] == "acme-rl 0.3.1" and envs["guess"]["problem"] is None
    assert envs["ask_before_coding"]["builtin"] is True
    rewards = [(row["name"], row["distribution"], row["problem"]) for row in listing["rewards"]]
    assert ("json_answer", "acme-rl 0.3.1", None) in rewards
    clashes = [problem for name, _, problem in rewards if name == "json_flaky"]
    assert len(clashes) == 2 and all("claimed by" in p for p in clashes)
    assert any(name == "gsm8k" and problem and "cannot shadow" in problem for name, _, problem in rewards)
    text = cli("envs")
    assert text.exit_code == 0 and "guess" in text.stdout and "entry-points" in text.stdout


def test_the_fixture_is_a_real_distribution(acme):
    from importlib.metadata import distribution

    assert distribution("acme-rl").version == "0.3.1"
    assert (FIXTURE / "acme_rl" / "guess.py").is_file()
