"""What the deployment runs, resolved at synth: the environment and the two rewards as explicit references.

The settings name them as a user would (a built-in name, a short name an installed distribution registers in
``rewardpipe.environments`` / ``rewardpipe.rewards``, or an import reference ``package.module:ATTR``). Here each
is imported in the synthesizing Python, exactly as the functions will import it, and turned into:

* an explicit ``package.module:ATTR`` the functions import directly (``ENVIRONMENT_REF``, ``REWARD_REF``,
  ``SINGLE_TURN_REWARD_REF``): no function scans entry points at cold start;
* metadata the stack needs as data: the environment's ``version`` (``ENVIRONMENT_VERSION``), the reward's
  components with their ranges, roles and weights (``REWARD_COMPONENTS`` for the variance check, one
  dead-component alarm each).

A reference that cannot be imported fails the synth naming the setting and the ``pip install`` line that makes
it importable; a ``path/to/file.py:ATTR`` reference is refused (it works locally only: a deployment ships
installed packages).
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rewardpipe.references import (
    BUILTIN_ENVIRONMENTS,
    BUILTIN_REWARDS,
    ENVIRONMENT_GROUP,
    REWARD_GROUP,
    ReferenceProblem,
    is_file_reference,
    load_import_reference,
    registered_reference,
    resolve_environment,
    resolve_reward,
)
from stacks.config import CONTEXT_KEY, SettingsError, show_value

if TYPE_CHECKING:  # pragma: no cover
    from stacks.config import DeploymentSettings

# Modules the rewardpipe layer itself ships; a reference into any other top-level package needs a user layer.
SHIPPED_TOP_LEVEL = "rewardpipe"


@dataclass(frozen=True)
class UserCode:
    environment_ref: str
    environment_name: str
    environment_version: str
    reward_ref: str
    # The short name the reward was named by (kept as REWARD_NAME for older runtimes), None for a reference.
    reward_name: str | None
    reward_components: tuple[dict[str, Any], ...]
    single_turn_ref: str
    single_turn_name: str | None
    single_turn_components: tuple[str, ...]

    def references(self) -> dict[str, str]:
        """Setting -> the import reference a function imports for it."""
        return {
            "environment": self.environment_ref,
            "reward": self.reward_ref,
            "single_turn_reward": self.single_turn_ref,
        }

    def user_modules(self) -> dict[str, str]:
        """Setting -> the top-level package of its reference, for those rewardpipe's own layer does not ship."""
        out = {}
        for setting, ref in self.references().items():
            top = ref.partition(":")[0].split(".")[0]
            if top != SHIPPED_TOP_LEVEL:
                out[setting] = top
        return out

    # -- what the functions get (the contract with rewardpipe.aws.settings) -----------------------------

    def environment_env(self) -> dict[str, str]:
        return {"ENVIRONMENT_REF": self.environment_ref, "ENVIRONMENT_VERSION": self.environment_version}

    def reward_env(self, weights: dict[str, float]) -> dict[str, str]:
        env = {"REWARD_REF": self.reward_ref, "REWARD_WEIGHTS": json.dumps(weights, sort_keys=True)}
        if self.reward_name:
            env["REWARD_NAME"] = self.reward_name
        return env

    def single_turn_env(self, weights: dict[str, float]) -> dict[str, str]:
        env = {"SINGLE_TURN_REWARD_REF": self.single_turn_ref, "REWARD_WEIGHTS": json.dumps(weights, sort_keys=True)}
        if self.single_turn_name:
            env["REWARD_NAME"] = self.single_turn_name
        return env

    def components_env(self) -> dict[str, str]:
        return {"REWARD_COMPONENTS": json.dumps(list(self.reward_components), separators=(",", ":"))}


def pip_install_line(packages: list[str]) -> str:
    """The command that makes the packages importable in the synthesizing Python (what the synth imports)."""
    from stacks.user_layer import classify, resolve_path

    args: list[str] = []
    for entry in packages:
        kind, value = classify(entry)
        if kind == "project":
            args += ["-e", str(resolve_path(value))]
        elif kind == "wheels":
            args += ["--find-links", str(resolve_path(value))]
        elif kind == "wheel":
            args.append(str(resolve_path(value)))
        else:
            args.append(value)
    if not any(classify(e)[0] != "wheels" for e in packages):
        args.append("<your project directory>")
    words = [sys.executable, "-m", "pip", "install", *args]
    return " ".join(a if a.startswith("<") else shlex.quote(a) for a in words)


def _problem(setting: str, value: Any, problem: str, packages: list[str]) -> SettingsError:
    text = f"{CONTEXT_KEY}.{setting} = {show_value(value)}: {problem}"
    if "cannot import" in problem or "no module named" in problem.lower():
        listed = "" if packages else f" and list the project in {CONTEXT_KEY}.packages (the synth builds its layer)"
        text += f"; install it where the synth runs: {pip_install_line(packages)}{listed}"
    return SettingsError(text)


def _reference(
    setting: str, value: str, group: str, builtins: dict[str, str], packages: list[str]
) -> tuple[str, str | None]:
    """``(import reference, short name or None)`` for a setting's value; file references refused."""
    value = value.strip()
    if ":" in value and is_file_reference(value):
        raise SettingsError(
            f"{CONTEXT_KEY}.{setting} = {show_value(value)}: a file reference works locally only; a deployment ships "
            f"installed packages: put the module in a package, list its project in {CONTEXT_KEY}.packages and name it "
            f"package.module:ATTR (or by a short name the package registers)"
        )
    if ":" in value:
        return value, None
    try:
        return registered_reference(value, group, builtins), value
    except ReferenceProblem as exc:
        raise _problem(setting, value, str(exc), packages) from None


def _builtin_reward_name(reward: Any) -> str | None:
    """The built-in name of ``reward`` when it is one of the built-in reward objects (unweighted)."""
    for name, ref in BUILTIN_REWARDS.items():
        try:
            if load_import_reference(ref) is reward:
                return name
        except ReferenceProblem:  # pragma: no cover - the built-ins import
            continue
    return None


def component_metadata(reward: Any) -> tuple[dict[str, Any], ...]:
    """Each component's name, range, role and weight: what the variance check judges with."""
    return tuple(
        {
            "name": c.name,
            "range": [float(c.value_range[0]), float(c.value_range[1])],
            "role": c.role,
            "weight": float(c.weight),
        }
        for c in reward.components
    )


def _reward(
    setting: str, weights_setting: str, ref: str, weights: dict[str, float], packages: list[str], written: str = ""
) -> Any:
    """The reward ``ref`` names, with ``weights``; a problem names ``setting`` as the user wrote it (``written``
    when the reference is derived from it: the environment's own reward, where ``ref`` is no value of theirs)."""
    try:
        return resolve_reward(ref, weights or None, allow_files=False)
    except ReferenceProblem as exc:
        raise _problem(setting, written or ref, str(exc), packages) from None
    except (ValueError, TypeError) as exc:  # weights naming no component, a bad weight
        shown = f"{show_value(written)}, whose own reward is used ({CONTEXT_KEY}.reward is unset)" if written else None
        raise SettingsError(
            f"{CONTEXT_KEY}.{setting} = {shown or show_value(ref)} with {CONTEXT_KEY}.{weights_setting}: {exc}"
        ) from None


def resolve_user_code(settings: DeploymentSettings) -> UserCode:
    packages = list(settings.packages)
    env_ref, _ = _reference("environment", settings.environment, ENVIRONMENT_GROUP, BUILTIN_ENVIRONMENTS, packages)
    try:
        environment = resolve_environment(env_ref, allow_files=False)
    except ReferenceProblem as exc:
        raise _problem("environment", settings.environment, str(exc), packages) from None

    if settings.reward is None:
        # The environment's own reward: by its built-in name when it is one, else through the environment.
        own = environment.reward
        name = _builtin_reward_name(own)
        reward_ref, reward_name = (BUILTIN_REWARDS[name], name) if name else (f"{env_ref}.reward", None)
        reward_setting, written = "environment", settings.environment
    else:
        reward_ref, reward_name = _reference("reward", settings.reward, REWARD_GROUP, BUILTIN_REWARDS, packages)
        reward_setting, written = "reward", ""
    reward = _reward(reward_setting, "reward_weights", reward_ref, settings.reward_weights, packages, written)
    readers = [c.name for c in reward.components if "reference" in c.inputs]
    if reward_setting == "reward" and readers:
        # An episode carries no reference answer, so every rollout on AWS would be an error record; the CLI's
        # `run --reward` refuses the same pairing (cli.common.episode_reward), and the synth is the deploy's CLI.
        raise _problem(
            "reward",
            settings.reward,
            f"its component(s) {', '.join(readers)} read 'reference', which an episode of environment "
            f"'{getattr(environment, 'name', env_ref)}' does not have, so every rollout would be an error record: a "
            f"reward of single-turn samples goes in {CONTEXT_KEY}.single_turn_reward (leave reward unset for the "
            "environment's own)",
            packages,
        )

    single_ref, single_name = _reference(
        "single_turn_reward", settings.single_turn_reward, REWARD_GROUP, BUILTIN_REWARDS, packages
    )
    single = _reward("single_turn_reward", "single_turn_weights", single_ref, settings.single_turn_weights, packages)
    episode_readers = [c.name for c in single.components if "state" in c.inputs]
    if episode_readers:
        # The other half of the check above: a single-turn sample has no episode, so a component reading `state`
        # never has one on AWS (each sample an error record, or a value that cannot vary).
        raise _problem(
            "single_turn_reward",
            settings.single_turn_reward,
            f"its component(s) {', '.join(episode_readers)} read 'state', an environment's episode, which a "
            f"single-turn sample does not have, so they could never score one: an environment's reward goes in "
            f"{CONTEXT_KEY}.reward (or leave it unset for the environment's own)",
            packages,
        )
    return UserCode(
        environment_ref=env_ref,
        environment_name=str(getattr(environment, "name", "") or ""),
        environment_version=str(getattr(environment, "version", "") or ""),
        reward_ref=reward_ref,
        reward_name=reward_name,
        reward_components=component_metadata(reward),
        single_turn_ref=single_ref,
        single_turn_name=single_name,
        single_turn_components=tuple(single.component_names),
    )
