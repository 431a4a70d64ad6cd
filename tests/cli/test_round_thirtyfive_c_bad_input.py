"""Round thirty-five (third wave), bad input on the command line: a `--weight` whose number reads as something other
than the value used, or a component weighted twice with two values, is a usage error (exit 2) naming it."""

import json

import pytest

from tests.cli.conftest import write_jsonl

SAMPLE = {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "#### 4"}], "reference": 4}


@pytest.mark.parametrize("value", ["1_0", "\u0663", "0x1", "1,5", "1/2"])
def test_a_weight_that_is_not_a_plain_number_is_a_usage_error(cli, tmp_path, value):
    samples = write_jsonl(tmp_path / "s.jsonl", [SAMPLE])
    result = cli("score", samples, "--reward", "gsm8k", "--out", tmp_path / "o", "--weight", f"format={value}")
    assert result.exit_code == 2
    assert "--weight must look like NAME=NUMBER" in result.stderr and result.stdout == ""
    assert not (tmp_path / "o").exists()  # refused before anything was written


def test_a_component_weighted_twice_with_two_values_is_a_usage_error(cli, tmp_path):
    samples = write_jsonl(tmp_path / "s.jsonl", [SAMPLE])
    out = tmp_path / "o"
    twice = cli("score", samples, "--reward", "gsm8k", "--out", out, "--weight", "format=1", "--weight", "format=2")
    assert twice.exit_code == 2
    assert "--weight format is given twice, as 1 and 2" in twice.stderr
    same = cli(
        "score", samples, "--reward", "gsm8k", "--out", out, "--weight", "format=1", "--weight", " format = 1.0 "
    )
    assert same.exit_code == 0, same.stderr  # the same value twice is no contradiction; spaces around are fine


@pytest.mark.parametrize("value", [".5", "+1.", "-2e-3", "3"])
def test_plain_numbers_still_weigh(cli, tmp_path, value):
    samples = write_jsonl(tmp_path / "s.jsonl", [SAMPLE])
    result = cli(
        "score", samples, "--reward", "gsm8k", "--out", tmp_path / "o", "--weight", f"format={value}", "--json"
    )
    assert result.exit_code == 0, result.stderr
    (record,) = map(json.loads, result.stdout.splitlines())
    assert record["weights"]["format"] == float(value)


def test_an_environment_option_given_twice_with_two_values_is_a_usage_error(cli, tmp_path):
    from rewardpipe.cli.common import parse_options

    assert parse_options(["simulator=openai", "simulator=openai"], "--env-option") == {"simulator": "openai"}
    result = cli(
        "run", "--env", "wordle", "--tasks", tmp_path / "none.jsonl", "--out", tmp_path / "o",
        "--env-option", "simulator=openai", "--env-option", "simulator=rule_based",
    )  # fmt: skip
    assert result.exit_code == 2
    assert "--env-option simulator is given twice, as 'openai' and 'rule_based'" in result.stderr
    assert not (tmp_path / "o").exists()
