"""Issue 20, the stack's half: a user's package deploys with the stack.

One synth (module scope) with the user package of tests/fixtures/one_module_pkg as the rollout and single-turn
reward, the Nova bridge on and a Bedrock judge, checked on the synthesized template and on the staged layer; the
default synth (no package, no judge) is the control. Settings problems are checked without a synth.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from stacks.config import SettingsError, load_settings
from tests.aws import harness

pytestmark = pytest.mark.xdist_group("cdk")

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "one_module_pkg"
REWARD_REF = "one_module_reward:BREVITY"
JUDGE_MODEL = "anthropic.claude-3-5-haiku-20241022-v1:0"
USER_CONTEXT = json.dumps(
    {
        "rewardpipe": {
            "reward": REWARD_REF,
            "single_turn_reward": REWARD_REF,
            "packages": [str(FIXTURE)],
            "judge": {"bedrock_model_id": JUDGE_MODEL},
        },
        "rewardpipe_nova": {"enabled": True},
    },
    sort_keys=True,
)


@pytest.fixture(scope="module")
def fixture_importable():
    """The fixture's module importable in this Python, as `pip install -e` would make it."""
    sys.path.insert(0, str(FIXTURE))
    yield
    sys.path.remove(str(FIXTURE))


@pytest.fixture
def importable(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURE))


@pytest.fixture(scope="module")
def user_synth(fixture_importable) -> harness.Synth:
    return harness.synthesized(USER_CONTEXT)


@pytest.fixture(scope="module")
def brevity(fixture_importable):
    from one_module_reward import BREVITY

    return BREVITY


def _functions(template: dict) -> dict[str, dict]:
    return {k: r["Properties"] for k, r in template["Resources"].items() if r["Type"] == "AWS::Lambda::Function"}


def _layer_ids(template: dict, description_start: str) -> list[str]:
    return [
        k
        for k, r in template["Resources"].items()
        if r["Type"] == "AWS::Lambda::LayerVersion"
        and r["Properties"].get("Description", "").startswith(description_start)
    ]


def _ours(template: dict) -> dict[str, dict]:
    """The rewardpipe functions (every one has the rewardpipe layer), by logical id."""
    (layer,) = _layer_ids(template, "rewardpipe package")
    return {k: p for k, p in _functions(template).items() if {"Ref": layer} in p.get("Layers", [])}


def _by_prefix(functions: dict[str, dict], prefix: str) -> dict:
    (found,) = [p for k, p in functions.items() if k.startswith(prefix)]
    return found


# -- the layer goes where the user's code is imported, and nowhere else -----------------------------------


USER_CODE_FUNCTIONS = (
    "RolloutWorkflowStartEpisode",
    "RolloutWorkflowConverse",
    "RolloutWorkflowScore",
    "RolloutWorkflowRecordError",
    "SingleTurnRewardFunction",
    "NovaBridgeRolloutProxy",
    "NovaBridgeIntake",
    "NovaBridgeForwarder",
    "NovaBridgeRouter",
    "NovaBridgeResponder",
    "NovaBridgeSweeper",
)


def test_the_user_layer_is_on_every_function_importing_user_code_and_not_on_the_code_runner(user_synth):
    (user_layer,) = _layer_ids(user_synth.template, "rewardpipe user packages")
    ours = _ours(user_synth.template)
    with_it = {k for k, p in ours.items() if {"Ref": user_layer} in p.get("Layers", [])}
    expected = {k for k in ours if k.startswith(USER_CODE_FUNCTIONS) and not k.endswith(("Role", "Logs"))}
    assert len(expected) == len(USER_CODE_FUNCTIONS)
    assert with_it == expected
    runner = _by_prefix(ours, "CodeRunnerFunction")
    assert {"Ref": user_layer} not in runner["Layers"]
    layer = user_synth.template["Resources"][user_layer]["Properties"]
    assert layer["CompatibleArchitectures"] == ["arm64"] and layer["CompatibleRuntimes"] == ["python3.13"]


def test_no_user_layer_without_packages(synth):
    assert _layer_ids(synth.template, "rewardpipe user packages") == []
    assert all(len(p["Layers"]) == 1 for p in _ours(synth.template).values())


def test_the_staged_user_layer_holds_the_package_compiled_for_313_and_nothing_of_rewardpipes(user_synth):
    from stacks.packaging import foreign_bytecode

    (user_layer,) = _layer_ids(user_synth.template, "rewardpipe user packages")
    (rp_layer,) = _layer_ids(user_synth.template, "rewardpipe package")
    staged = harness.asset_dir(user_synth, user_layer) / "python"
    shipped = harness.asset_dir(user_synth, rp_layer) / "python"
    assert (staged / "one_module_reward.py").is_file()
    assert list((staged / "__pycache__").glob("one_module_reward.cpython-313.pyc"))
    assert foreign_bytecode(staged) == []
    names = {p.name for p in staged.iterdir()} - {"__pycache__"}
    assert names & {p.name for p in shipped.iterdir()} == set()
    assert not any(n.startswith("rewardpipe") for n in names)  # the stub standing in for rewardpipe is gone


# -- references resolved at synth --------------------------------------------------------------------------


def test_functions_get_explicit_references_and_the_environment_version(user_synth):
    from rewardpipe.envs.ask_before_coding import ENVIRONMENT

    ours = _ours(user_synth.template)
    for prefix in ("RolloutWorkflowStartEpisode", "RolloutWorkflowScore", "NovaBridgeIntake"):
        env = _by_prefix(ours, prefix)["Environment"]["Variables"]
        assert env["REWARD_REF"] == REWARD_REF
        assert env["ENVIRONMENT_REF"] == "rewardpipe.envs.ask_before_coding:ENVIRONMENT"
        assert env["ENVIRONMENT_VERSION"] == ENVIRONMENT.version
        assert "REWARD_NAME" not in env  # a reference, not a name: nothing to fall back to
    single = _by_prefix(ours, "SingleTurnRewardFunction")["Environment"]["Variables"]
    assert single["SINGLE_TURN_REWARD_REF"] == REWARD_REF


def test_builtin_names_are_resolved_to_their_references(synth):
    from rewardpipe.references import BUILTIN_ENVIRONMENTS, BUILTIN_REWARDS

    ours = _ours(synth.template)
    score = _by_prefix(ours, "RolloutWorkflowScore")["Environment"]["Variables"]
    assert score["REWARD_REF"] == BUILTIN_REWARDS["ask_before_coding"]
    assert score["REWARD_NAME"] == "ask_before_coding"
    assert score["ENVIRONMENT_REF"] == BUILTIN_ENVIRONMENTS["ask_before_coding"]
    single = _by_prefix(ours, "SingleTurnRewardFunction")["Environment"]["Variables"]
    assert single["SINGLE_TURN_REWARD_REF"] == BUILTIN_REWARDS["gsm8k"]


def test_the_variance_check_gets_the_user_rewards_components_as_data(user_synth, brevity):
    from stacks.user_code import component_metadata

    env = _by_prefix(_ours(user_synth.template), "MonitoringVarianceCheck")["Environment"]["Variables"]
    components = json.loads(env["REWARD_COMPONENTS"])
    assert components == [dict(c) for c in component_metadata(brevity)]
    assert {c["name"] for c in components} == set(brevity.component_names)
    assert {c["role"] for c in components} == {"outcome", "shaping", "penalty"}
    assert "REWARD_REF" not in env  # judging needs no import of user code


def _dead_component_alarms(template: dict) -> list[str]:
    return sorted(
        next(d["Value"] for d in r["Properties"]["Dimensions"] if d["Name"] == "component")
        for r in template["Resources"].values()
        if r["Type"] == "AWS::CloudWatch::Alarm" and r["Properties"].get("MetricName") == "DeadStreak"
    )


def test_one_dead_component_alarm_per_component_of_the_configured_reward(user_synth, synth, brevity):
    from rewardpipe.rewards import get_reward

    builtin = get_reward("ask_before_coding").component_names
    assert not set(brevity.component_names) & set(builtin)  # the fixture differs from the built-in
    assert _dead_component_alarms(user_synth.template) == sorted(brevity.component_names)
    assert _dead_component_alarms(synth.template) == sorted(builtin)


# -- the judge ------------------------------------------------------------------------------------------------


def _role_of(template: dict, function_id: str) -> str:
    return template["Resources"][function_id]["Properties"]["Role"]["Fn::GetAtt"][0]


def _statements_of_role(template: dict, role: str) -> list[dict]:
    return [
        st
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy" and {"Ref": role} in r["Properties"].get("Roles", [])
        for st in r["Properties"]["PolicyDocument"]["Statement"]
    ]


def _as_list(value: object) -> list:
    return value if isinstance(value, list) else [value]


def _bedrock_statements(template: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for fid in _functions(template):
        role = _role_of(template, fid)
        found = [
            st
            for st in _statements_of_role(template, role)
            if any(str(a).startswith("bedrock:") for a in _as_list(st["Action"]))
        ]
        if found:
            out[fid] = found
    return out


def test_a_bedrock_judge_may_invoke_exactly_its_model_from_the_functions_that_score(user_synth):
    granted = _bedrock_statements(user_synth.template)
    assert {fid.rstrip("0123456789ABCDEF") for fid in granted} == {
        "RolloutWorkflowStartEpisode",
        "RolloutWorkflowConverse",
        "RolloutWorkflowScore",
        "SingleTurnRewardFunction",
    }
    expected = {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                ":bedrock:",
                {"Ref": "AWS::Region"},
                f"::foundation-model/{JUDGE_MODEL}",
            ],
        ]
    }
    for statements in granted.values():
        assert statements == [
            {"Action": "bedrock:InvokeModel", "Effect": "Allow", "Resource": expected, "Sid": "JudgeInvokesItsModel"}
        ]
    for fid in granted:
        assert (
            user_synth.template["Resources"][fid]["Properties"]["Environment"]["Variables"]["JUDGE_BEDROCK_MODEL_ID"]
            == JUDGE_MODEL
        )


def test_no_judge_no_bedrock_permission_and_no_judge_variable(synth):
    assert _bedrock_statements(synth.template) == {}
    for props in _functions(synth.template).values():
        assert not any(k.startswith("JUDGE_") for k in props.get("Environment", {}).get("Variables", {}))


# -- settings: what fails the synth, and how it is named ----------------------------------------------------


@pytest.mark.parametrize(
    "raw, fragments",
    [
        (
            {"reward": "acme_missing.rewards:R"},
            ["rewardpipe.reward", "cannot import 'acme_missing.rewards'", "pip install", "rewardpipe.packages"],
        ),
        (
            {"environment": "acme_missing.env:ENV", "packages": [str(FIXTURE)]},
            ["rewardpipe.environment", "pip install -e", str(FIXTURE)],
        ),
        ({"reward": "rewards/mine.py:R"}, ["rewardpipe.reward", "file reference works locally only"]),
        ({"single_turn_reward": "./mine.py:R"}, ["rewardpipe.single_turn_reward", "file reference"]),
        ({"reward": "nope"}, ["rewardpipe.reward", "unknown reward 'nope'"]),
        ({"reward": "gsm8k", "reward_name": "gsm8k"}, ["reward and reward_name are the same setting"]),
        ({"packages": ["acme-rewards"]}, ["packages", "name==version"]),
        ({"packages": ["acme-rewards>=1.0"]}, ["packages", "name==version"]),
        ({"packages": ["./no/such/project"]}, ["does not exist"]),
        ({"packages": [str(FIXTURE / "one_module_reward.py")]}, ["not a wheel"]),
        ({"judge": {"bedrock_model_id": f"us.{JUDGE_MODEL}"}}, ["cross-region inference profile"]),
        ({"judge": {"bedrock_model_id": "arn:aws:bedrock:us-east-1::foundation-model/x.y"}}, ["not an ARN"]),
        ({"judge": {"bedrock_model_id": JUDGE_MODEL, "base_url": "https://x", "model": "m"}}, ["keep one"]),
        ({"judge": {"base_url": "https://judge.example.com/v1"}}, ["go together"]),
        ({"judge": {"api_key_secret": "judge-key"}}, ["set judge.base_url"]),
        ({"reward_weights": {"loudness": 1}}, ["rewardpipe.environment", "reward_weights", "loudness"]),
    ],
)
def test_a_bad_setting_fails_naming_it(raw, fragments):
    with pytest.raises(SettingsError) as caught:
        load_settings(raw)
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_reward_name_is_the_old_name_of_reward():
    # (round thirty-five: the name, not the reward, is what this checks; gsm8k is refused for an episode now)
    settings = load_settings({"reward_name": "ask_before_coding"})
    assert settings.reward == "ask_before_coding"
    assert settings.user_code.reward_ref == "rewardpipe.envs.ask_before_coding.reward:ASK_BEFORE_CODING"


@pytest.mark.parametrize(
    "raw",
    [
        {"reward": "gsm8k"},
        {"reward_name": "gsm8k"},
        {"environment": "wordle", "reward": "gsm8k"},
        {"environment": "tool_call", "reward": "rewardpipe.rewards.gsm8k:GSM8K"},
    ],
)
def test_a_reward_of_single_turn_samples_is_refused_for_the_episodes(raw):
    """Round thirty-five: the synth took a reward reading 'reference' as the environment's reward, which the CLI's
    run refuses (an episode has no reference answer): on AWS every rollout would have been an error record."""
    with pytest.raises(SettingsError) as caught:
        load_settings(raw)
    message = str(caught.value)
    assert "rewardpipe.reward" in message and "answer_correct" in message and "single_turn_reward" in message


def test_a_reward_of_single_turn_samples_is_taken_as_the_single_turn_reward():
    assert load_settings({"single_turn_reward": "gsm8k"}).user_code.single_turn_name == "gsm8k"


def test_the_environments_own_reward_is_the_default():
    from rewardpipe.envs.wordle import ENVIRONMENT
    from rewardpipe.references import BUILTIN_ENVIRONMENTS

    code = load_settings({"environment": "wordle"}).user_code
    assert code.environment_ref == BUILTIN_ENVIRONMENTS["wordle"]
    assert code.environment_version == ENVIRONMENT.version
    assert [c["name"] for c in code.reward_components] == ENVIRONMENT.reward.component_names


def test_a_short_name_a_package_registers_is_resolved_to_its_reference(tmp_path, monkeypatch, importable):
    dist = tmp_path / "one_module_reward-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: one-module-reward\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text("[rewardpipe.rewards]\none_module = one_module_reward:BREVITY\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code = load_settings({"reward": "one_module", "packages": [str(FIXTURE)]}).user_code
    assert code.reward_ref == REWARD_REF and code.reward_name == "one_module"


def test_an_importable_reference_no_package_ships_fails_the_synth(importable, tmp_path):
    from app import build_app

    unshipped = r"rewardpipe\.reward = .*one_module_reward.*no entry of rewardpipe\.packages"
    with pytest.raises(SettingsError, match=unshipped):
        build_app({"rewardpipe": {"reward": REWARD_REF}}, outdir=str(tmp_path))


def _bedrock_endpoints(template: dict) -> list[dict]:
    return [
        r["Properties"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::EC2::VPCEndpoint" and "bedrock-runtime" in json.dumps(r["Properties"]["ServiceName"])
    ]


def test_the_isolated_vpc_reaches_the_judge_model_only_when_a_bedrock_judge_is_configured(user_synth, synth):
    (endpoint,) = _bedrock_endpoints(user_synth.template)
    (statement,) = endpoint["PolicyDocument"]["Statement"]
    assert statement["Action"] == "bedrock:InvokeModel" and statement["Principal"] == {"AWS": "*"}
    assert json.dumps(statement["Resource"]).endswith(f'::foundation-model/{JUDGE_MODEL}"]]}}')
    assert statement["Condition"] == {"StringEquals": {"aws:PrincipalAccount": {"Ref": "AWS::AccountId"}}}
    assert endpoint["PrivateDnsEnabled"] is True
    assert _bedrock_endpoints(synth.template) == []


def test_the_guides_cdk_settings_resolve_to_the_example_package(monkeypatch):
    """docs/guides/deploy-your-own-package.md shows examples/your_own_environment/cdk_settings.json."""
    example = Path(__file__).resolve().parents[2] / "examples" / "your_own_environment"
    monkeypatch.syspath_prepend(str(example))
    code = load_settings(json.loads((example / "cdk_settings.json").read_text())).user_code
    from animals_env import ENVIRONMENT
    from animals_reward import ANIMALS

    assert (code.environment_ref, code.environment_version) == ("animals_env:ENVIRONMENT", ENVIRONMENT.version)
    assert [c["name"] for c in code.reward_components] == ANIMALS.component_names
    assert code.user_modules() == {"environment": "animals_env", "reward": "animals_reward"}
