"""Lambda's 250 MB (code plus layers, unzipped) and 4 KB (environment variables) per function, checked at synth:
a breach fails the synth naming the function and the figure (stacks/limits.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stacks import limits
from stacks.config import SettingsError

pytestmark = pytest.mark.xdist_group("cdk")

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "one_module_pkg"


def test_literal_variables_count_as_their_json_object():
    variables = {"A": "x" * 10, "UNICODE": "é✓", "QUOTE": 'say "hi"'}
    size, per = limits.environment_bytes(variables, {})
    assert size == len(json.dumps(variables, separators=(",", ":"), ensure_ascii=False))
    assert set(per) == set(variables)


def test_values_filled_in_at_deploy_time_count_at_their_longest():
    from stacks.partitions import supported

    longest_region = max(len(p.longest_region) for p in supported())
    types = {"Bucket1": "AWS::S3::Bucket", "Fn1": "AWS::Lambda::Function", "Q1": "AWS::SQS::Queue"}
    assert limits.value_bound({"Ref": "Bucket1"}, types, limits._longest_values()) == 63
    assert limits.value_bound({"Ref": "Fn1"}, types, limits._longest_values()) == 64
    assert limits.value_bound({"Ref": "AWS::Region"}, types, limits._longest_values()) == longest_region
    queue_url = limits.value_bound({"Ref": "Q1"}, types, limits._longest_values())
    assert queue_url >= len("https://sqs.") + longest_region + len(".amazonaws.com/123456789012/") + 80
    joined = {"Fn::Join": ["-", ["ab", {"Ref": "Fn1"}, "cd"]]}
    assert limits.value_bound(joined, types, limits._longest_values()) == 2 + 64 + 2 + 2
    assert limits.value_bound({"Fn::ImportValue": "x"}, types, limits._longest_values()) == limits.UNKNOWN_VALUE


def test_the_recorded_variables_are_the_templates(synth):
    """The check measures what python_function and add_environment recorded: exactly the template's variables."""
    resources = synth.template["Resources"]
    registered = limits.registry(synth.stack)
    assert len(registered) == sum(
        1
        for r in resources.values()
        if r["Type"] == "AWS::Lambda::Function" and r["Properties"].get("Handler") == "handler.lambda_handler"
    )
    for assets in registered:
        logical = synth.stack.resolve(synth.stack.get_logical_id(assets.function.node.default_child))
        template_vars = resources[logical]["Properties"]["Environment"]["Variables"]
        assert limits.function_variables(synth.stack, assets) == template_vars


def test_the_default_stack_fits_with_room(synth):
    assert limits.check_function_limits(synth.stack) == []
    for assets in limits.registry(synth.stack):
        assert limits.unzipped_bytes(assets)[0] < limits.UNZIPPED_MAX_BYTES / 2


def test_a_function_over_either_limit_fails_the_synth_naming_it_and_the_figure(tmp_path, monkeypatch):
    """A Nova group pattern long enough to push the bridge's variables past 4 KB, and a user layer measured at
    240 MB: both named, with their figures, in one error."""
    from app import build_app
    from stacks import user_layer

    monkeypatch.syspath_prepend(str(FIXTURE))
    measured = limits.folder_bytes

    def heavy_user_layer(path: Path, skip_bytecode: bool = False) -> int:
        if user_layer.USER_LAYER_CACHE in Path(path).parents:
            return 240 * limits.MB
        return measured(path, skip_bytecode)

    monkeypatch.setattr(limits, "folder_bytes", heavy_user_layer)
    pattern = "^(?P<group>.+)_(?P<index>\\d+)$" + "|x" * 2100
    with pytest.raises(limits.LimitError) as caught:
        build_app(
            {
                "rewardpipe": {"reward": "one_module_reward:BREVITY", "packages": [str(FIXTURE)]},
                "rewardpipe_nova": {"enabled": True, "group_pattern": pattern},
            },
            outdir=str(tmp_path),
        )
    message = str(caught.value)
    assert isinstance(caught.value, SettingsError)  # app.py prints it as one error, exit 2
    assert "RewardPipe/NovaBridge/Intake: environment variables take up to" in message
    assert "NOVA_CONFIG" in message and "Lambda allows 4 KB (4,096 bytes)" in message
    assert "RewardPipe/RolloutWorkflow/Score: code and layers take" in message
    assert "user layer 240.0 MB" in message and "Lambda allows 250 MB (262,144,000 bytes)" in message
    assert "RewardPipe/CodeRunner/Function: code and layers" not in message  # no user layer there
