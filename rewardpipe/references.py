"""Naming a reward or an environment: built-in names, import references, files and installed short names.

Anywhere a reward or an environment is named (``--reward``, ``--env``, the Python adapters, settings), these
forms work:

* a built-in name: ``ask_before_coding``, ``gsm8k``, ``code_correctness``, ``wordle``, ``tool_call``
  (rewards), ``ask_before_coding``, ``wordle``, ``tool_call`` (environments);
* an import reference ``package.module:ATTR`` (``ATTR`` may be dotted: ``module:Class.REWARD``);
* a file reference ``path/to/file.py:ATTR``, for local use only (a deployment must name something
  installable);
* a short name registered by an installed distribution in the entry-point group ``rewardpipe.rewards`` or
  ``rewardpipe.environments`` (``[project.entry-points."rewardpipe.rewards"] strict = "acme_rl.rewards:STRICT"``).

A short name is looked up among the built-ins first: a package cannot shadow one. Two distributions that
claim the same short name are an error naming both. An unknown name's error lists what exists and says how
to register one. Entry points are read only for a short name that is not built in (never for a built-in or
a reference), so naming a built-in or a reference costs no scan of the installed packages.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, cast

REWARD_GROUP = "rewardpipe.rewards"
ENVIRONMENT_GROUP = "rewardpipe.environments"

BUILTIN_REWARDS: dict[str, str] = {
    "ask_before_coding": "rewardpipe.envs.ask_before_coding.reward:ASK_BEFORE_CODING",
    "gsm8k": "rewardpipe.rewards.gsm8k:GSM8K",
    "code_correctness": "rewardpipe.rewards.code_correctness:CODE_CORRECTNESS",
    "wordle": "rewardpipe.envs.wordle.reward:WORDLE",
    "tool_call": "rewardpipe.envs.tool_call.reward:TOOL_CALL",
}
BUILTIN_ENVIRONMENTS: dict[str, str] = {
    "ask_before_coding": "rewardpipe.envs.ask_before_coding:ENVIRONMENT",
    "wordle": "rewardpipe.envs.wordle:ENVIRONMENT",
    "tool_call": "rewardpipe.envs.tool_call:ENVIRONMENT",
}


class ReferenceProblem(ValueError):
    """A reference cannot be resolved; the message says why and what would work."""


@dataclass(frozen=True)
class Registration:
    """One short name an installed distribution registers."""

    name: str
    reference: str
    distribution: str
    version: str


def is_file_reference(reference: str) -> bool:
    target = reference.rpartition(":")[0]
    return target.endswith(".py") or "/" in target or "\\" in target


def is_import_reference(reference: str) -> bool:
    return ":" in reference and not is_file_reference(reference)


def _attribute(owner: Any, path: str, where: str) -> Any:
    value = owner
    for part in path.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise ReferenceProblem(f"{where} has no attribute '{path}'") from None
    return value


def _first_line(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        code = "" if exc.code is None else f" {str(exc.code).strip()[:200]!r}"
        return f"it exits when imported (SystemExit{code}): does it parse arguments or call sys.exit outside main?"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def load_import_reference(reference: str) -> Any:
    """The object ``package.module:ATTR`` names."""
    module_name, _, attr = reference.partition(":")
    if not module_name or not attr:
        raise ReferenceProblem(f"'{reference}' is not a reference: write package.module:ATTR")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise ReferenceProblem(
                f"cannot import '{module_name}' (no module named '{exc.name}'): is its package installed in this "
                f"Python ({sys.executable})? e.g. pip install -e <project>"
            ) from None
        raise ReferenceProblem(f"importing '{module_name}' failed: {_first_line(exc)}") from exc
    except (Exception, SystemExit) as exc:  # the user's module failed (a bad component) or exited (argparse) on import
        raise ReferenceProblem(f"importing '{module_name}' failed: {_first_line(exc)}") from exc
    return _attribute(module, attr, f"module '{module_name}'")


def load_file_reference(reference: str) -> Any:
    """The object ``path/to/file.py:ATTR`` names (local use only). The file's folder is put on ``sys.path``
    so it can import its neighbours; the module is imported once per process."""
    path_text, _, attr = reference.rpartition(":")
    if not attr:
        raise ReferenceProblem(f"'{reference}' names no attribute: write path/to/file.py:ATTR")
    path = Path(path_text).expanduser().resolve()
    if not path.is_file():
        raise ReferenceProblem(f"'{reference}': {path_text} is not a file")
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
    module_name = f"rewardpipe_file_{path.stem.replace('-', '_')}_{digest}"
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise ReferenceProblem(f"'{reference}': {path_text} cannot be imported as Python")
        module = importlib.util.module_from_spec(spec)
        if str(path.parent) not in sys.path:
            sys.path.insert(0, str(path.parent))
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except (Exception, SystemExit) as exc:  # SystemExit: a script that parses its arguments on import
            del sys.modules[module_name]
            raise ReferenceProblem(f"importing {path_text} failed: {_first_line(exc)}") from exc
    return _attribute(module, attr, str(path_text))


@lru_cache(maxsize=16)
def _registrations(group: str, path: tuple[str, ...]) -> dict[str, tuple[Registration, ...]]:  # noqa: ARG001 - part of the lru_cache key: a changed sys.path reads the entry points again
    from importlib.metadata import entry_points

    found: dict[str, dict[tuple[str, str], Registration]] = {}
    for entry in entry_points(group=group):
        dist = getattr(entry, "dist", None)
        dist_name = dist.metadata["Name"] if dist is not None else "<unknown distribution>"
        version = dist.version if dist is not None else ""
        # The same distribution seen twice on sys.path (an editable install, say) is one claim.
        found.setdefault(entry.name, {})[(dist_name.lower(), entry.value)] = Registration(
            entry.name, entry.value, dist_name, version
        )
    return {name: tuple(claims.values()) for name, claims in found.items()}


def registrations(group: str) -> dict[str, tuple[Registration, ...]]:
    """Every short name installed distributions register in ``group`` (read afresh when sys.path changes)."""
    return _registrations(group, tuple(sys.path))


def _what(group: str) -> str:
    return "reward" if group == REWARD_GROUP else "environment"


def unknown_name(name: str, group: str, builtins: dict[str, str]) -> ReferenceProblem:
    installed = sorted(n for n in registrations(group) if n not in builtins)
    what = _what(group)
    return ReferenceProblem(
        f"unknown {what} '{name}'; built in: {', '.join(sorted(builtins))}"
        f"{'; installed: ' + ', '.join(installed) if installed else '; none installed by packages'}. Name one of "
        f"those, give a reference (package.module:ATTR, or path/to/file.py:ATTR locally), or register a short name "
        f'in your package\'s pyproject.toml: [project.entry-points."{group}"] {name} = "your_package.module:ATTR" '
        f"(then pip install -e . ; `rewardpipe envs` lists what is installed)"
    )


def registered_reference(name: str, group: str, builtins: dict[str, str]) -> str:
    """The import reference a short name stands for: a built-in, else the one distribution claiming it."""
    if name in builtins:
        return builtins[name]
    claims = registrations(group).get(name, ())
    if not claims:
        raise unknown_name(name, group, builtins)
    if len(claims) > 1:
        who = " and ".join(f"{c.distribution} {c.version} ({c.reference})" for c in claims)
        raise ReferenceProblem(
            f"{_what(group)} name '{name}' is claimed by more than one installed distribution: "
            f"{who}; uninstall one, or name it by its reference"
        )
    return claims[0].reference


def load(reference: str, group: str, builtins: dict[str, str], *, allow_files: bool = True) -> tuple[Any, str]:
    """``(object, import reference)`` for any form of reference."""
    if not isinstance(reference, str) or not reference.strip():
        raise ReferenceProblem(f"a {_what(group)} must be named by a non-empty text, got {reference!r}")
    reference = reference.strip()
    if ":" not in reference and reference.endswith(".py"):
        # a file named without the object in it: no short name ends in .py, and the advice to register one
        # under that name misled
        where = f"{reference}:ATTR" if allow_files else "package.module:ATTR, its package installed"
        raise ReferenceProblem(
            f"'{reference}' is a file, not a {_what(group)}: name the {_what(group)} in it, {where} "
            f"(ATTR: the module-level name it is bound to)"
        )
    if ":" not in reference:
        reference_text = registered_reference(reference, group, builtins)
        return load_import_reference(reference_text), reference_text
    if is_file_reference(reference):
        if not allow_files:
            raise ReferenceProblem(
                f"'{reference}' is a file reference, which works locally only: install the "
                f"package and name it package.module:ATTR (or by a registered short name)"
            )
        return load_file_reference(reference), reference
    return load_import_reference(reference), reference


def meant_reference(reference: str | None, what: str) -> str | None:
    """What to say when the short name ``reference`` names no registered environment or reward (``what``) but an
    importable module holding one (``--env animals_env`` under ``PYTHONPATH=.``, the package `rewardpipe init`
    wrote before its ``pip install``), or is Python's dotted path to one (``animals_env.ENVIRONMENT``, where a
    reference has a colon): the reference it was meant to be. None when it is neither (the caller's "unknown
    name" advice stands). A standard-library name is never imported (``--env this`` would print)."""
    from rewardpipe.environment import Environment
    from rewardpipe.rewards.base import Reward

    name = reference.strip() if isinstance(reference, str) else ""
    if not name or ":" in name or name.endswith(".py") or not all(p.isidentifier() for p in name.split(".")):
        return None
    resolve = resolve_environment if what == "environment" else resolve_reward
    kind = Environment if what == "environment" else Reward
    module_name, _, attribute = name.rpartition(".")
    for module_path, attributes in ((name, None), (module_name, [attribute])):
        if not module_path or module_path.partition(".")[0] in sys.stdlib_module_names:
            continue
        try:
            if importlib.util.find_spec(module_path) is None:
                continue
        except Exception:  # noqa: BLE001 - its package does not import, or is no package: no such module
            continue
        try:
            module = importlib.import_module(module_path)
        except Exception as exc:  # noqa: BLE001 - the module is there: what keeps it from importing is the answer
            first = str(exc).splitlines()[0] if str(exc) else ""
            return (
                f"'{name}' is not a registered {what} name, and the module '{module_path}' it names failed to "
                f"import: {type(exc).__name__}: {first}"
            )
        found = []
        for attr in attributes or sorted(vars(module)):
            value = getattr(module, attr, None)
            if attr.startswith("_") or not (isinstance(value, kind) or attributes):
                continue
            try:
                resolve(f"{module_path}:{attr}")
            except ReferenceProblem:
                continue
            found.append(f"{module_path}:{attr}")
        if found:
            named = " or ".join(found[:3]) + (f" (or {len(found) - 3} more)" if len(found) > 3 else "")
            if attributes is None:
                return (
                    f"'{name}' is a module, not a registered {what} name: give the {what} in it, {named} "
                    f"(package.module:ATTR; a short name is one your package's pyproject.toml registers, then pip "
                    f"install -e .)"
                )
            return f"'{name}' is Python's dotted path, not a reference: give {named} (package.module:ATTR, a colon)"
    return None


def _load_hinted(reference: Any, group: str, builtins: dict[str, str], *, allow_files: bool) -> tuple[Any, str]:
    """:func:`load`, its "unknown name" replaced by :func:`meant_reference`'s advice when the name is a module
    (or Python's dotted path to an object) that holds one: every loader, the CLI's and the Python adapters',
    says the same."""
    try:
        return load(reference, group, builtins, allow_files=allow_files)
    except ReferenceProblem:
        hint = meant_reference(reference, _what(group)) if isinstance(reference, str) else None
        if hint is None:
            raise
        raise ReferenceProblem(hint) from None


def resolve_reward(reference: Any, weights: Any = None, *, allow_files: bool = True) -> Any:
    """The :class:`rewardpipe.Reward` a reference names (a Reward passes through), with ``weights``
    overriding component weights by name."""
    from rewardpipe.components import Component
    from rewardpipe.environment import Environment
    from rewardpipe.rewards.base import Reward

    if isinstance(reference, Reward):
        return reference.with_weights(weights)
    value, _ = _load_hinted(reference, REWARD_GROUP, BUILTIN_REWARDS, allow_files=allow_files)
    if isinstance(value, Reward):
        return value.with_weights(weights)
    if isinstance(value, Component):
        raise ReferenceProblem(
            f"'{reference}' is a component, not a reward: wrap it, Reward('<name>', [{value.name}, ...])"
        )
    if isinstance(value, Environment) or (isinstance(value, type) and issubclass(value, Environment)):
        raise ReferenceProblem(f"'{reference}' is an environment: give it as --env (its reward is used by default)")
    raise ReferenceProblem(f"'{reference}' is {type(value).__name__}, not a rewardpipe.Reward")


def resolve_environment(reference: Any, *, allow_files: bool = True) -> Any:
    """The :class:`rewardpipe.Environment` a reference names (an instance, or a class instantiated with no
    arguments; an Environment passes through), checked (see :func:`rewardpipe.environment.check_environment`)."""
    from rewardpipe.environment import Environment, check_environment

    if isinstance(reference, Environment):
        return check_environment(reference)
    value, _ = _load_hinted(reference, ENVIRONMENT_GROUP, BUILTIN_ENVIRONMENTS, allow_files=allow_files)
    try:
        return check_environment(value)
    except (TypeError, ValueError) as exc:
        raise ReferenceProblem(f"'{reference}': {exc}") from None


def reference_of(reference: Any, group: str) -> str | None:
    """The import reference a name stands for (what a deployment is given), without importing it."""
    if not isinstance(reference, str):
        return None
    if ":" in reference:
        return reference
    return registered_reference(reference, group, BUILTIN_REWARDS if group == REWARD_GROUP else BUILTIN_ENVIRONMENTS)


def _defining_module(obj: Any) -> str:
    """Where a reward or environment was written: an environment's class, a reward's components."""
    from rewardpipe.rewards.base import Reward

    if isinstance(obj, Reward):
        modules = [getattr(c.fn, "__module__", None) or "" for c in obj.components]
        return next((m for m in modules if not m.startswith("rewardpipe.")), modules[0] if modules else "")
    return getattr(type(obj), "__module__", "") or ""


def distribution_of(obj: Any) -> tuple[str, str] | None:
    """``(distribution, version)`` that installed the module defining ``obj`` (a reward or an environment),
    when it can be told cheaply: a distribution registering entry points into that module, or one named
    like its top-level package (no scan of every installed distribution's files)."""
    from importlib.metadata import PackageNotFoundError, distribution

    top = _defining_module(obj).split(".")[0]
    if top == "rewardpipe":
        from rewardpipe import __version__

        return "rewardpipe", __version__
    if not top:
        return None
    for group in (ENVIRONMENT_GROUP, REWARD_GROUP):
        for claims in registrations(group).values():
            for claim in claims:
                if claim.reference.split(":")[0].split(".")[0] == top:
                    return claim.distribution, claim.version
    for name in dict.fromkeys((top, top.replace("_", "-"))):
        try:
            found = distribution(name)
        except PackageNotFoundError:
            continue
        return found.metadata["Name"], found.version
    return None


def installed(group: str) -> list[dict[str, Any]]:
    """What ``rewardpipe envs`` lists for ``group``: each built-in and each registered short name, with its
    reference, version (an environment's own ``version``; a reward's is its distribution's), distribution
    (``name version``) and the problem that keeps it from loading (a clash, a shadowed built-in, an import
    error)."""
    from rewardpipe import __version__

    builtins = BUILTIN_REWARDS if group == REWARD_GROUP else BUILTIN_ENVIRONMENTS
    rows = []
    for name, reference in sorted(builtins.items()):
        rows.append(
            {
                "name": name,
                "reference": reference,
                "version": None,
                "distribution": f"rewardpipe {__version__}",
                "builtin": True,
                "problem": None,
            }
        )
    for name, claims in sorted(registrations(group).items()):
        for claim in claims:
            row = {
                "name": name,
                "reference": claim.reference,
                "version": None,
                "distribution": f"{claim.distribution} {claim.version}".strip(),
                "builtin": False,
                "problem": None,
            }
            if name in builtins:
                row["problem"] = f"ignored: '{name}' is a built-in name, which a package cannot shadow"
            elif len(claims) > 1:
                row["problem"] = "ignored: claimed by " + " and ".join(c.distribution for c in claims)
            rows.append(row)
    for row in rows:
        if row["problem"] is not None:
            continue
        try:
            if group == REWARD_GROUP:
                reward = resolve_reward(row["reference"])
                # cast: a row with no problem names its distribution ("name version")
                row["version"] = cast(str, row["distribution"]).rpartition(" ")[2]
                row["components"] = reward.component_names
            else:
                row["version"] = resolve_environment(row["reference"]).version
        except ReferenceProblem as exc:
            row["problem"] = str(exc)
    return rows
