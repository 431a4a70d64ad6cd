"""Deployment settings of the wrong type fail the synth naming the setting, the value and what is allowed
(issue 22 item 3), for every setting: bad values are generated per field from the models' own schemas
(``rewardpipe`` and ``rewardpipe_nova``), not listed by hand, and every context path the CDK CLI can take
(cdk.json, ``-c`` strings in CDK_CONTEXT_JSON, ``build_app(context=...)``) is exercised without a traceback.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stacks.config import (
    CONTEXT_KEY,
    MAX_SETTING_DEPTH,
    DeploymentSettings,
    SettingsError,
    load_context,
    load_settings,
    show_value,
)
from stacks.constructs.nova_bridge import CONTEXT_KEY as NOVA_KEY
from stacks.constructs.nova_bridge import NovaBridgeSettings

ROOT = Path(__file__).resolve().parents[2]
MODELS = [(CONTEXT_KEY, DeploymentSettings), (NOVA_KEY, NovaBridgeSettings)]


# -- generating bad values from the schema -----------------------------------------------------------------


def _resolve(node: dict, defs: dict) -> dict:
    while "$ref" in node:
        node = defs[node["$ref"].rsplit("/", 1)[-1]]
    return node


def _fields(
    schema: dict, node: dict | None = None, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], dict]]:
    """(path, schema) of every setting, objects included, leaves last."""
    defs = schema.get("$defs", {})
    node = _resolve(schema if node is None else node, defs)
    for name, child in node.get("properties", {}).items():
        child = _resolve(child, defs)
        yield (*path, name), child
        if "properties" in child:
            yield from _fields(schema, child, (*path, name))


def _wrong_types(node: dict) -> list[Any]:
    """Values of every JSON type the setting does not take."""
    kinds = {o.get("type") for o in node.get("anyOf", [node])}
    if "enum" in node:
        kinds.add({int: "integer", str: "string"}[type(node["enum"][0])])
    samples = {
        "integer": [7, -3],
        "number": [0.5, 2.75],
        "string": ["8", "true", ""],
        "boolean": [True, False],
        "null": [None],
        "array": [[], [1]],
        "object": [{}, {"x": 1}],
    }
    accepted = set(kinds)
    if "number" in accepted:
        accepted.add("integer")  # strict mode still takes 1 for a float, as JSON has one number type
    bad = [v for kind, values in samples.items() if kind not in accepted for v in values]
    if "integer" in kinds and "number" not in kinds:
        bad.append(8.0)  # a float that equals an integer is still not one
    return bad


def _out_of_range(node: dict) -> list[Any]:
    bad: list[Any] = []
    if "minimum" in node:
        bad.append(node["minimum"] - (1 if node.get("type") == "integer" else 0.001))
    if "exclusiveMinimum" in node:
        bad.append(node["exclusiveMinimum"])
    if "maximum" in node:
        bad.append(node["maximum"] + (1 if node.get("type") == "integer" else 0.001))
    if "exclusiveMaximum" in node:
        bad.append(node["exclusiveMaximum"])
    if "enum" in node:
        bad.append("not-a-choice" if isinstance(node["enum"][0], str) else max(node["enum"]) + 1)
    if "pattern" in node:
        bad.append("has space!")
    if "maxLength" in node:
        bad.append("a" * (node["maxLength"] + 1))
    if isinstance(node.get("additionalProperties"), dict):
        bad.append({"key": "not a number" if node["additionalProperties"].get("type") == "number" else 1})
    return bad


def _place(path: tuple[str, ...], value: Any) -> dict:
    raw: Any = value
    for name in reversed(path):
        raw = {name: raw}
    return raw


def _cases() -> list[tuple[str, type, tuple[str, ...], Any]]:
    cases = []
    for key, model in MODELS:
        schema = model.model_json_schema(by_alias=True)
        cases.append((key, model, ("not_a_setting",), 1))  # a misspelt key at the top...
        for path, node in _fields(schema):
            for value in _wrong_types(node) + _out_of_range(node):
                cases.append((key, model, path, value))
            if "properties" in node:  # ...and in every nested object
                cases.append((key, model, (*path, "not_a_setting"), 1))
    return cases


CASES = _cases()


def test_the_generator_covers_every_setting_of_both_models():
    covered = {(key, path) for key, _m, path, _v in CASES}
    for key, model in MODELS:
        every = {(key, path) for path, _node in _fields(model.model_json_schema(by_alias=True))}
        assert every and every <= covered
    assert len(CASES) > 300


@pytest.mark.parametrize(
    "key, model, path, value", CASES, ids=[f"{k}.{'.'.join(p)}={json.dumps(v)[:20]}" for k, _m, p, v in CASES]
)
def test_every_bad_value_of_every_setting_is_refused_naming_it_its_value_and_what_is_allowed(key, model, path, value):
    with pytest.raises(SettingsError) as info:
        load_context(key, _place(path, value), model)
    message = str(info.value)
    name = ".".join((key, *path))
    line = next((ln for ln in message.splitlines() if name in ln), None)
    assert line is not None, message
    if not isinstance(value, dict):
        assert show_value(value).split(" (")[0] in line, line
    assert "must be" in line or "not a setting" in line or "needs" in line or "cannot" in line, line


@pytest.mark.parametrize("key, model", MODELS)
def test_the_defaults_and_every_settings_own_default_are_accepted(key, model):
    """The generator only produces values the model refuses: the defaults, set explicitly, pass."""
    defaults = model().model_dump(by_alias=True, mode="json")
    assert load_context(key, defaults, model) == model()
    assert load_context(key, json.dumps(defaults), model) == model()


@pytest.mark.parametrize(
    "raw, fragment",
    [
        ({"max_turns": True}, "rewardpipe.max_turns = true (boolean): must be an integer"),
        ({"group_size": "8"}, 'rewardpipe.group_size = "8" (string): must be an integer'),
        ({"group_size": 8.0}, "rewardpipe.group_size = 8.0 (number)"),
        ({"lambda": {"memory_mb": "512"}}, "rewardpipe.lambda.memory_mb"),
        ({"alarms": {"zero_variance_fraction": True}}, "rewardpipe.alarms.zero_variance_fraction = true"),
        ({"alarms": {"email": ["ops@example.com"]}}, "rewardpipe.alarms.email"),
        ({"reward_weights": {"correctness": "1"}}, 'rewardpipe.reward_weights.correctness = "1" (string)'),
        ({"fargate": {"cpu": 1024.0}}, "rewardpipe.fargate.cpu = 1024.0"),
        ({"stack_name": "my stack"}, "rewardpipe.stack_name"),
        ({"stack_name": "9lives"}, "matching ^[A-Za-z][A-Za-z0-9-]*$"),
        ({"stack_name": ""}, "rewardpipe.stack_name"),
        ({"lambda": []}, "rewardpipe.lambda = [] (array): must be an object with the keys architecture"),
        ({"simulator": "gpt"}, 'must be one of "rule_based", "openai"'),
    ],
)
def test_the_reported_examples(raw, fragment):
    with pytest.raises(SettingsError, match=None) as info:
        load_settings(raw)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    "raw, fragment",
    [
        ({"enabled": "maybe"}, 'rewardpipe_nova.enabled = "maybe" (string): must be true or false'),
        ({"enabled": 1}, "rewardpipe_nova.enabled = 1 (integer)"),
        ({"rollout_timeout_s": "600"}, "rewardpipe_nova.rollout_timeout_s"),
        (
            {"group_pattern": "(unclosed"},
            'rewardpipe_nova.group_pattern = "(unclosed" (string): not a regular expression',
        ),
        ({"group_pattern": "^(?P<g>.+)$"}, "needs a named group"),
        ('{"enabled": true, "enabled": false}', 'the key "enabled" is given twice'),
        ("[1, 2]", "rewardpipe_nova' = [1, 2] (array): must be a JSON object"),
    ],
)
def test_nova_bridge_settings_are_as_strict(raw, fragment):
    with pytest.raises(SettingsError) as info:
        load_context(NOVA_KEY, raw, NovaBridgeSettings)
    assert fragment in str(info.value)


# -- JSON and structure ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("{not json", "is not valid JSON: Expecting property name"),
        ('{"group_size": 8,}', "is not valid JSON"),
        ('{"group_size": 8, "group_size": 9}', 'the key "group_size" is given twice'),
        ('{"alarms": {"error_rate": NaN}}', "NaN is not a JSON number"),
        ('{"alarms": {"error_rate": Infinity}}', "Infinity is not a JSON number"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"reward_weights": ' + '{"a": ' * 50 + "1" + "}" * 50 + "}", "nested more than 8 levels deep"),
        ('"a string"', "must be a JSON object"),
        ("12", "must be a JSON object"),
    ],
)
def test_malformed_or_nested_json_is_named_not_a_traceback(text, fragment):
    with pytest.raises(SettingsError) as info:
        load_settings(text)
    assert fragment in str(info.value)


def test_non_finite_numbers_given_as_python_values_are_refused_by_name():
    for value in (math.nan, math.inf, -math.inf):
        with pytest.raises(SettingsError, match=r"rewardpipe\.reward_weights\.correctness = .*finite"):
            load_settings({"reward_weights": {"correctness": value}})


def test_a_value_nested_one_level_too_deep_for_any_setting_is_refused():
    deep: Any = 1
    for _ in range(MAX_SETTING_DEPTH + 1):
        deep = {"a": deep}
    with pytest.raises(SettingsError, match="nested more than"):
        load_settings({"reward_weights": deep})


def test_shown_values_are_short_and_safe_for_a_terminal():
    shown = show_value("\x1b[31mred\u202e" + "x" * 10_000)
    assert "\x1b" not in shown and "\u202e" not in shown and len(shown) < 120


# -- the app: every context path, no traceback -------------------------------------------------------------------


@pytest.mark.parametrize(
    "env_context, fragment",
    [
        ({"rewardpipe": '{"max_turns": true}'}, "rewardpipe.max_turns = true (boolean)"),
        ({"rewardpipe": '{"group_size": "8"}'}, "rewardpipe.group_size"),
        ({"rewardpipe": "{not json"}, "context 'rewardpipe' is not valid JSON"),
        ({"rewardpipe": '{"stack_name": "my stack"}'}, "rewardpipe.stack_name"),
        ({"rewardpipe_nova": '{"enabled": "maybe"}'}, "rewardpipe_nova.enabled"),
        ({"rewardpipe_nova": "{oops"}, "context 'rewardpipe_nova' is not valid JSON"),
        ({"rewardpipe": "[" * 50_000}, "nested too deeply"),
        (
            {"rewardpipe": {"reward_weights": {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": 1}}}}}}}}}},
            "nested more than",
        ),
    ],
)
def test_app_main_exits_2_naming_the_setting_for_cli_context(monkeypatch, capsys, env_context, fragment):
    """As ``cdk synth -c key=...`` runs the app: the CLI passes every context value in CDK_CONTEXT_JSON (a
    ``-c`` value as a string)."""
    import app

    monkeypatch.setenv("CDK_CONTEXT_JSON", json.dumps(env_context))
    assert app.main() == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and fragment in err and "Traceback" not in err


def test_app_main_refuses_a_context_json_nested_too_deeply_to_parse(monkeypatch, capsys):
    import app

    monkeypatch.setenv("CDK_CONTEXT_JSON", '{"other": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert app.main() == 2
    assert "CDK_CONTEXT_JSON" in capsys.readouterr().err


def test_build_app_refuses_deep_context_before_jsii_sees_it():
    """A deeply nested value of any context key (ours or not) would overflow jsii's recursive serialisation."""
    from app import build_app

    deep: Any = []
    for _ in range(5_000):
        deep = [deep]
    with pytest.raises(SettingsError, match=r"^some-key.*nested more than 64"):
        build_app(context={"some-key": deep})


def test_python_app_py_exits_2_without_a_traceback():
    """The real entry point, as ``cdk synth -c rewardpipe_nova='{"enabled": "maybe"}'`` would run it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        CDK_CONTEXT_JSON=json.dumps({"rewardpipe_nova": '{"enabled": "maybe"}', "rewardpipe": "[" * 30_000}),
        JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20",
    )
    proc = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "nested too deeply" in proc.stderr


def _extremes(which: str) -> dict:
    """Every bounded number of the model at its ``which`` bound (generated from the schema)."""
    raw: dict = {}
    for path, node in _fields(DeploymentSettings.model_json_schema(by_alias=True)):
        if node.get("type") not in ("integer", "number"):
            continue
        bound = node.get("maximum" if which == "max" else "minimum")
        if bound is None:
            exclusive = node.get("exclusiveMaximum" if which == "max" else "exclusiveMinimum")
            if exclusive is None:
                continue
            bound = exclusive - 0.01 if which == "max" else exclusive + 0.01
        target = raw
        for name in path[:-1]:
            target = target.setdefault(name, {})
        target[path[-1]] = bound
    return raw


# What the checks across settings need on top of the single bounds (each named in its own error message).
COMPATIBLE = {
    "max": {"execution_routing_threshold_s": 840, "policy": {"http_timeout_s": 865, "http_retries": 0}},
    "min": {
        "lambda": {
            "code_runner_memory_mb": 512,
            "single_turn_memory_mb": 640,
            "code_runner_timeout_s": 61,
            "policy_timeout_s": 36,
        },
        "storage": {"expire_runs_days": 31},
    },
}


@pytest.mark.xdist_group("cdk")
@pytest.mark.parametrize("which", ["max", "min"])
def test_every_setting_at_its_bound_synthesizes(tmp_path, which):
    """A value the settings accept never fails later in a construct (max_turns 21-50 used to pass the settings and
    raise a ValueError traceback inside the rollout workflow)."""
    from app import build_app, synth_errors

    raw = _extremes(which)
    for key, value in COMPATIBLE[which].items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    settings = load_settings(raw)
    app, stack = build_app(
        context={"rewardpipe": {**raw, "stack_name": f"Bounds{which.title()}"}}, outdir=str(tmp_path)
    )
    assert synth_errors(app, stack) == []
    assert stack.settings.max_turns == settings.max_turns
