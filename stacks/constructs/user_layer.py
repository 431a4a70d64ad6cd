"""The user layer: the packages of ``rewardpipe.packages`` (stacks/user_layer.py builds and caches them), for the
functions that import the user's code only (never the code runner: model code does not share a host with user
code it does not need)."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import aws_lambda as _lambda

from constructs import Construct
from stacks.config import CONTEXT_KEY, SettingsError, show_value
from stacks.constructs.common import ARCHITECTURES, RUNTIME, RewardPipeLayer
from stacks.user_code import UserCode
from stacks.user_layer import UserLayerError, build_user_layer, duplicates, manifest, provides

DESCRIPTION_MAX = 256  # a layer version's description


class UserLayer(_lambda.LayerVersion):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        packages: list[str],
        architecture: str,
        rewardpipe_layer: RewardPipeLayer,
    ) -> None:
        asset_path = build_user_layer(packages, architecture)
        both = duplicates(asset_path / "python", rewardpipe_layer.asset_path / "python")
        if both:
            raise UserLayerError(
                f"{CONTEXT_KEY}.packages: {', '.join(both)} would be in both the user layer and the "
                f"rewardpipe layer (a function imports one of them, whichever comes first): remove it "
                f"from the package, or depend on rewardpipe's"
            )
        distributions = manifest(asset_path).get("distributions", [])
        description = f"rewardpipe user packages for {architecture}: {', '.join(distributions) or 'none'}"
        if len(description) > DESCRIPTION_MAX:
            description = description[: DESCRIPTION_MAX - 3] + "..."
        super().__init__(
            scope,
            construct_id,
            code=_lambda.Code.from_asset(str(asset_path)),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURES[architecture]],
            description=description,
        )
        self.asset_path = asset_path
        self.distributions = distributions


def check_shipped(user_code: UserCode, settings_values: dict[str, object], layer: UserLayer | None) -> None:
    """Every reference into a package other than rewardpipe must be in the user layer: importable here is not
    enough (it may come from this Python's own site-packages, which no function has)."""
    for setting, top in user_code.user_modules().items():
        if layer is not None and provides(Path(layer.asset_path) / "python", top):
            continue
        value = settings_values.get(setting)
        where = f"{CONTEXT_KEY}.{setting} = {show_value(value)}" if value is not None else f"{CONTEXT_KEY}.{setting}"
        raise SettingsError(
            f"{where}: its package '{top}' imports here but no entry of {CONTEXT_KEY}.packages ships "
            f"it to the functions: add its project directory (or wheel, or name==version) to "
            f"{CONTEXT_KEY}.packages"
        )
