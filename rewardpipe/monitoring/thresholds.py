"""When a component counts as dead or recovered, and when to alarm: :class:`Thresholds`.

Also holds the value ranges of the built-in reward (used to tell "stuck at its minimum" from "stuck at its
maximum"), how a reward's own declared ranges and roles reach the monitor (:meth:`Thresholds.with_components`,
:func:`run_thresholds` reading a run's manifest), and the error raised when records cannot be monitored as
one run.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

#: Value ranges of the components of the blog's reward (contracts.md), used to tell "constant at its
#: minimum" from "constant at its maximum". Components not listed fall back to the values seen.
DEFAULT_RANGES: dict[str, tuple[float, float]] = {
    "correctness": (0.0, 1.0),
    "asked_before_coding": (0.0, 1.0),
    "guessed_immediately": (-1.0, 0.0),
    "loop_penalty": (-0.5, 0.0),
}


class MonitorInputError(ValueError):
    """The records handed to the monitor cannot be monitored as one run (message says why)."""


class Thresholds(BaseModel):
    """When a component is dead, when it has recovered, and when to alarm.

    * ``epsilon``: a group whose std is at most this is "zero variance" (default 1e-6), for a component of
      weight 1 with values within +-1; :func:`zero_variance_bound` scales it by the weight and the values.
    * ``dead_fraction``: verdict ``dead`` when at least this share of eligible groups has zero variance.
    * ``recover_fraction``: an active dead alarm clears only when the share drops *below* this
      (hysteresis band between the two, so a component hovering at the threshold does not flap).
    * ``min_groups``: fewer eligible groups (>= 2 scored values) than this gives ``insufficient_data``,
      which neither raises nor clears an alarm.
    * ``raise_after``: consecutive dead steps needed before the alarm is raised (1 = at once).
    * ``error_rate`` / ``error_recover_rate``: the same for the share of records with status "error"
      (a step is bad when its share is at least ``error_rate``).
    * ``error_raise_after``: consecutive bad steps before the error-rate alarm is raised (None: the
      same as ``raise_after``).
    * ``ranges``: known (min, max) per component, to name the at-minimum / at-maximum causes.
    * ``ignore``: components that get statistics and verdicts but never alarms (e.g. a penalty that
      is meant to be 0 almost always).
    * ``alarm_idle_penalties``: a penalty (known range with maximum 0 and a negative minimum) that sits at
      0 in every group never fired; that is normal for a rarely triggered penalty, so it gets verdict
      ``info`` and no alarm unless this is True (then it is ``dead``, cause ``constant_at_maximum``).
    * ``dying_window`` / ``dying_min_slope`` / ``dying_horizon``: verdict ``dying`` when, over the last
      ``dying_window`` checked steps or a longer window (up to ``dying_window`` + 20), the zero-variance share
      rises (least-squares slope over every group of at least ``dying_min_slope`` per step, standing out of the
      groups' binomial noise: :func:`rewardpipe.monitoring.trend.required_z`) at two checked steps in a row,
      and the fit reaches ``dead_fraction`` within ``dying_horizon`` steps.
    * ``outcome_components``: the components that measure the outcome (the rest is shaping), for the
      ``shaping_starves_outcome`` cause; default the built-in reward's ``correctness``.
    * ``roles``: each component's declared role (``outcome``, ``shaping``, ``penalty``), from the reward or
      the run's manifest: a ``penalty`` that never fires is ``info``, while any other component constant at
      its maximum is ``dead (constant_at_maximum)``. Without a declared role the range decides (a range
      whose maximum is 0 and minimum negative is a penalty).
    * ``range_overrides``: the ranges given explicitly (``--range``); they win over declared ones.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    epsilon: float = Field(default=1e-6, ge=0)
    dead_fraction: float = Field(default=0.9, gt=0, le=1)
    recover_fraction: float = Field(default=0.5, ge=0, le=1)
    min_groups: int = Field(default=4, ge=1)
    raise_after: int = Field(default=1, ge=1)
    error_rate: float = Field(default=0.1, gt=0, le=1)
    error_recover_rate: float = Field(default=0.05, ge=0, le=1)
    error_raise_after: int | None = Field(default=None, ge=1)
    ranges: dict[str, tuple[float, float]] = Field(default_factory=lambda: dict(DEFAULT_RANGES))
    ignore: tuple[str, ...] = ()
    alarm_idle_penalties: bool = False
    dying_window: int = Field(default=5, ge=3)
    dying_min_slope: float = Field(default=0.02, gt=0, le=1)
    dying_horizon: int = Field(default=20, ge=1)
    outcome_components: tuple[str, ...] = ("correctness",)
    roles: dict[str, str] = Field(default_factory=dict)
    range_overrides: dict[str, tuple[float, float]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> Thresholds:
        if self.recover_fraction > self.dead_fraction:
            raise ValueError(
                f"recover_fraction ({self.recover_fraction}) must not exceed dead_fraction ({self.dead_fraction})"
            )
        if self.error_recover_rate > self.error_rate:
            raise ValueError(
                f"error_recover_rate ({self.error_recover_rate}) must not exceed error_rate ({self.error_rate})"
            )
        for name, (lo, hi) in self.ranges.items():
            if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
                raise ValueError(f"range of '{name}' must be finite with min <= max, got ({lo}, {hi})")
        return self

    @property
    def errors_raise_after(self) -> int:
        return self.error_raise_after if self.error_raise_after is not None else self.raise_after

    def with_components(self, components: Mapping[str, Any]) -> Thresholds:
        """These thresholds for a reward's declared components (``{name: {"range": (lo, hi), "role": ...}}``, as
        :meth:`rewardpipe.Reward.describe` and the run manifest give them): their ranges (explicit
        ``range_overrides`` still win), their roles, and the outcome components from the roles."""
        if not components:
            return self
        declared, roles = {}, {}
        for name, info in components.items():
            info = info if isinstance(info, Mapping) else info.model_dump()
            declared[name] = (float(info["range"][0]), float(info["range"][1]))
            roles[name] = str(info["role"])
        outcomes = tuple(name for name, role in roles.items() if role == "outcome")
        return self.model_copy(
            update={
                "ranges": {**self.ranges, **declared, **self.range_overrides},
                "roles": {**self.roles, **roles},
                "outcome_components": outcomes or self.outcome_components,
            }
        )

    def for_reward(self, reward: Any) -> Thresholds:
        """:meth:`with_components` of a :class:`rewardpipe.Reward`."""
        return self.with_components(reward.describe())

    def is_idle_penalty(self, name: str, cause: str, value_range: tuple[float, float] | None) -> bool:
        """A penalty that never fired: constant at its neutral end (the end nearer 0: the maximum of a
        ``(-1, 0)`` penalty, the minimum of a ``(0, 1)`` one subtracted by a negative weight). A component
        declared ``outcome`` or ``shaping`` is never one; without a declared role, a range ending at 0 from
        below makes a penalty."""
        return cause == self.penalty_neutral_end(name, value_range)

    def penalty_neutral_end(self, name: str, value_range: tuple[float, float] | None) -> str | None:
        """For a penalty (its declared role, or without one a range ending at 0 from below), the cause of it constant
        at its neutral end, ``constant_at_maximum`` or ``constant_at_minimum`` (its other end is where it fires);
        None for any other component, or one whose range is unknown."""
        role = self.roles.get(name)
        if (role is not None and role != "penalty") or value_range is None:
            return None
        lo, hi = value_range
        if role == "penalty":
            return "constant_at_maximum" if abs(hi) <= abs(lo) else "constant_at_minimum"
        return "constant_at_maximum" if hi == 0.0 and lo < 0.0 else None


def zero_variance_bound(epsilon: float, weight: float | None, magnitude: Any) -> Any:
    """The largest within-group population std of a component that counts as zero variance, in a group where its
    values reach ``magnitude`` (the larger of ``|min|`` and ``|max|`` there; an array gives one bound per group).

    GRPO learns from a component's weighted contribution to the reward, ``|w| * std``. A group gives it none when
    ``|w| * std <= epsilon * max(1, |w| * magnitude)``, that is ``std <= epsilon * max(1 / |w|, magnitude)``:

    * with weight 1 and values within +-1 it is the absolute ``std <= epsilon`` (``--epsilon``, 1e-6);
    * a weight scales it: a spread of 1e-8 weighted 1e8 moves the reward by a whole unit, and is alive;
    * values far from 0 scale it: a spread of 1e-3 on values near 1e6 is relative noise of 1e-9 (rounding dust,
      gone once a trainer holds the reward in float32), and is dead.

    A weight of 0, None or not finite is taken as 1 (the component is judged on its own spread). The one rule of
    the figures (:func:`rewardpipe.monitoring.statistics.component_figures`, the Lambda check and the local monitor
    alike), the alarm examples and the causes (:func:`varies`)."""
    if epsilon == 0:
        return np.zeros_like(magnitude, dtype=np.float64) if isinstance(magnitude, np.ndarray) else 0.0
    w = abs(weight) if weight and math.isfinite(weight) else 1.0
    with np.errstate(divide="ignore", over="ignore"):
        floor = np.float64(1.0) / np.float64(w)  # a subnormal weight: inf, every spread is dead
        bound = epsilon * np.maximum(floor, magnitude)
    return bound if isinstance(bound, np.ndarray) else float(bound)


def varies(values: list[float], epsilon: float, weight: float | None) -> bool:
    """Whether ``values`` (one group's finite values of a component of ``weight``) are not zero variance under
    :func:`zero_variance_bound`; fewer than two values do not vary."""
    if len(values) < 2:
        return False
    n = len(values)
    mean = math.fsum(values) / n
    std = math.sqrt(max(math.fsum((x - mean) ** 2 for x in values) / n, 0.0))
    return std > zero_variance_bound(epsilon, weight, max(abs(min(values)), abs(max(values))))


def manifest_components(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The components a stored run manifest declares: v2 lists them; a v1 manifest names a built-in reward,
    whose declared ranges and roles are used (empty when it names none)."""
    components = manifest.get("components")
    if isinstance(components, Mapping) and components:
        return {name: info for name, info in components.items() if not _reserved_in_manifest(name)}
    name = manifest.get("reward")
    from rewardpipe.references import BUILTIN_REWARDS

    if isinstance(name, str) and name in BUILTIN_REWARDS:
        from rewardpipe.rewards import REWARDS

        return REWARDS[name].describe()
    return {}


class ManifestWarning(UserWarning):
    """A run manifest declares something the monitor cannot use as written (the message names the field)."""


def _reserved_in_manifest(name: Any) -> bool:
    """Whether ``name``, a key of a manifest's ``components``, is a name the monitor keeps for its own targets; if so
    a :class:`ManifestWarning` names the field. A reward refuses such a name when it is defined, but a manifest is an
    object anyone writing the run's folder may write: declared ``aggregate`` with a penalty's role, it turned the
    aggregate reward's own dead alarm into ``info``."""
    from rewardpipe.components import RESERVED_NAMES

    if name not in RESERVED_NAMES:
        return False
    warnings.warn(
        f"run manifest field components.{name}: {name!r} is reserved for the monitor's own alarm on "
        f"{'the aggregate reward' if name == 'aggregate' else 'error records'} (reserved: "
        f"{', '.join(sorted(RESERVED_NAMES))}); its declared range and role are ignored: rename the component",
        ManifestWarning,
        stacklevel=3,
    )
    return True


def run_thresholds(thresholds: Thresholds | None, store: Any, run_id: str | None) -> Thresholds:
    """``thresholds`` (default ones when None) for the run ``run_id`` of ``store``: the components' ranges and
    roles its manifest declares, so a user's reward is judged by its own ranges and roles with no ``--range``.
    Without a store, a run id or a readable manifest, ``thresholds`` as they are."""
    thresholds = thresholds if thresholds is not None else Thresholds()
    if store is None or not run_id:
        return thresholds
    try:
        from rewardpipe.store import manifest_key

        manifest = store.get_json(manifest_key(run_id), default=None)
        components = manifest_components(manifest) if isinstance(manifest, Mapping) else {}
        return thresholds.with_components(components)
    except Exception:  # noqa: BLE001 - an unreadable manifest leaves the monitor on its defaults, as before v2
        return thresholds


class AlarmPolicy(BaseModel):
    """The alarm settings of a deployment, one definition for both sides of it: the stack's ``alarms``
    settings (stacks/config.py) extend this model and pass it to the variance check's environment
    (rewardpipe.aws.settings), whose :meth:`thresholds` the check monitors with, and the CloudWatch
    alarms take their thresholds from the same fields. So the check's streaks and the alarms that
    watch them cannot use different numbers, and neither side has a default the other lacks.

    * ``zero_variance_fraction``: a component is dead in a step when at least this share of its groups
      has zero within-group variance;
    * ``dead_steps``: the dead-component alarms fire after this many consecutive dead checked steps;
    * ``error_rate``: a step is bad when at least this share of its records are error records;
    * ``error_steps``: the error-rate alarm fires after this many consecutive bad checked steps.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    zero_variance_fraction: float = Field(default=0.9, gt=0, le=1)
    dead_steps: int = Field(default=3, ge=1, le=1000)
    error_rate: float = Field(default=0.05, gt=0, le=1)
    error_steps: int = Field(default=3, ge=1, le=1000)

    def thresholds(self) -> Thresholds:
        """The core monitor's thresholds for this policy (recovery bands at most 0.5 and 0.05)."""
        return Thresholds(
            dead_fraction=self.zero_variance_fraction,
            recover_fraction=min(0.5, self.zero_variance_fraction),
            error_rate=self.error_rate,
            error_recover_rate=min(0.05, self.error_rate),
            raise_after=self.dead_steps,
            error_raise_after=self.error_steps,
        )
