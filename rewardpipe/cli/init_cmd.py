"""`rewardpipe init DIR`: a user's package that works out of the box.

It writes a package laid out as rewardpipe's own environments are, from the templates in ``init_template/``
(package data)::

    DIR/
    ├── pyproject.toml            entry points (rewardpipe.environments, rewardpipe.rewards), rewardpipe pinned
    ├── README.md
    ├── src/<package>/
    │   ├── __init__.py
    │   ├── environment.py        a quiz with a simulated user: task and state models, hooks, scenarios
    │   └── rewards.py            three components with ranges and roles, and the reward
    ├── tasks/train.jsonl         task rows
    └── tests/test_<package>.py   rewardpipe.testing's checks (doctor inside pytest)

Names are checked before anything is written: the distribution name (PEP 508), the import name (a Python
identifier that no installed module or standard-library module already has), and the short name the entry
points register (not a built-in's, which a package cannot shadow). A DIR that holds anything is refused
unless ``--force``; even then a file that exists is never replaced silently: each one is named.
"""

from __future__ import annotations

import keyword
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import typer

from rewardpipe.cli.application import DATA_ERROR, app, fail, note, printable, usage_fail

TEMPLATE_PACKAGE = "rewardpipe.cli"
TEMPLATE_FOLDER = "init_template"
#: Each written file, relative to DIR, and the template it comes from (``{package}`` is the import name).
LAYOUT: dict[str, str] = {
    "pyproject.toml": "pyproject.toml.tmpl",
    "README.md": "README.md.tmpl",
    ".gitignore": "gitignore.tmpl",
    "src/{package}/__init__.py": "package_init.py.tmpl",
    "src/{package}/environment.py": "environment.py.tmpl",
    "src/{package}/rewards.py": "rewards.py.tmpl",
    "tasks/train.jsonl": "train.jsonl.tmpl",
    "tests/test_{package}.py": "test_package.py.tmpl",
}
PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")
# PEP 508 / the core metadata spec's project name.
DISTRIBUTION_NAME = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)
# An entry-point name that is also a good component/reward/environment name (a record key, a metric name).
SHORT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


class PackageNameError(ValueError):
    """A name given to (or derived by) ``init`` cannot be used; the message says why and what would."""


@dataclass(frozen=True)
class Names:
    distribution: str  # what pip installs: acme-quiz
    package: str  # what Python imports: acme_quiz
    name: str  # the short name of the environment and the reward: acme_quiz

    def values(self) -> dict[str, str]:
        return {
            "distribution": self.distribution,
            "package": self.package,
            "name": self.name,
            "rewardpipe_requirement": rewardpipe_requirement(),
        }


def rewardpipe_requirement(version: str | None = None) -> str:
    """The version specifier a new package depends on: this rewardpipe up to its next minor release (before
    1.0) or its next major one (from 1.0), as semver's compatible range."""
    if version is None:
        from rewardpipe import __version__

        version = __version__
    release = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?", version)
    if release is None:
        return f"=={version}"
    major, minor = int(release.group(1)), int(release.group(2))
    upper = f"{major}.{minor + 1}" if major == 0 else f"{major + 1}"
    return f">={major}.{minor}.{int(release.group(3) or 0)},<{upper}"


def package_from(distribution: str) -> str:
    """The import name pip's users expect for a distribution name: acme-Quiz.rl -> acme_quiz_rl."""
    return re.sub(r"[-_.]+", "_", distribution).lower()


def check_distribution(name: str) -> str:
    if not DISTRIBUTION_NAME.fullmatch(name):  # fullmatch: "$" also matches before a final "\n"
        raise PackageNameError(
            f"'{name}' is not a valid distribution name: use letters, digits, '-', '_' and '.', "
            f"starting and ending with a letter or digit (e.g. acme-quiz); give it with --name"
        )
    return name


def check_package(name: str, target: Path | None = None) -> str:
    """``name`` if a new package can take it: an identifier, not rewardpipe's or the standard library's, and
    not importable already (except from ``target`` itself: init run again over its own package)."""
    if not (name.isidentifier() and name.isascii()) or keyword.iskeyword(name):
        raise PackageNameError(
            f"'{name}' cannot be an import name: use ASCII letters, digits and '_', not starting "
            f"with a digit, and not a Python keyword (e.g. acme_quiz); give it with --package"
        )
    if name == "rewardpipe" or name.startswith("rewardpipe_"):
        raise PackageNameError(f"package name '{name}' belongs to rewardpipe; choose another with --package")
    if name in sys.stdlib_module_names:
        raise PackageNameError(f"package name '{name}' is a standard-library module's; choose another with --package")
    from importlib.util import find_spec

    try:
        found = find_spec(name)
    except (ImportError, ValueError):
        found = None
    if found is None:
        return name
    places = [found.origin] if found.origin else list(found.submodule_search_locations or [])
    inside = (
        target is not None
        and places
        and all(Path(place).resolve().is_relative_to(target.resolve()) for place in places)
    )
    if not inside:
        where = ", ".join(places) or "built in"
        raise PackageNameError(
            f"a module named '{name}' is already importable here ({where}): your package would "
            f"shadow it or be shadowed; choose another with --package"
        )
    return name


def check_short_name(name: str) -> str:
    from rewardpipe.references import BUILTIN_ENVIRONMENTS, BUILTIN_REWARDS

    if not SHORT_NAME.fullmatch(name):  # fullmatch: "$" also matches before a final "\n"
        raise PackageNameError(
            f"'{name}' cannot be a short name (--env {name}): use at most 64 letters, digits and "
            f"'_', starting with a letter or '_'; give it with --env-name"
        )
    if name in BUILTIN_ENVIRONMENTS or name in BUILTIN_REWARDS:
        raise PackageNameError(
            f"'{name}' is a built-in name, which an installed package cannot shadow; choose another with --env-name"
        )
    return name


def choose_names(target: Path, distribution: str | None, package: str | None, short_name: str | None) -> Names:
    """The names of the new package: given, or derived from DIR's name (then checked all the same)."""
    if distribution is None:
        distribution = target.resolve().name
    distribution = check_distribution(distribution)
    package = check_package(package if package is not None else package_from(distribution), target)
    return Names(distribution, package, check_short_name(short_name if short_name is not None else package))


def template(name: str) -> str:
    from importlib.resources import files

    return (files(TEMPLATE_PACKAGE) / TEMPLATE_FOLDER / name).read_text(encoding="utf-8")


def render(text: str, values: dict[str, str]) -> str:
    """``text`` with every ``{{key}}`` filled in; a key without a value is an error (a template bug)."""

    def fill(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise KeyError(f"template placeholder {{{{{key}}}}} has no value")
        return values[key]

    return PLACEHOLDER.sub(fill, text)


def planned_files(names: Names) -> dict[str, str]:
    """Every file ``init`` writes (path relative to DIR, with ``/``) and its content."""
    values = names.values()
    return {path.format(package=names.package): render(template(source), values) for path, source in LAYOUT.items()}


def _obstacle(target: Path, relative: str) -> str | None:
    """Why a file cannot be written at ``target / relative`` without harm: a symlink on the way (writing
    through it could land outside DIR), a file where a folder must be, or a folder where the file goes."""
    path = target
    parts = Path(relative).parts
    for index, part in enumerate(parts):
        path = path / part
        if path.is_symlink():
            return f"{path} is a symbolic link; init does not write through one"
        last = index == len(parts) - 1
        if not last and path.exists() and not path.is_dir():
            return f"{path} is a file where init needs a folder"
        if last and path.is_dir():
            return f"{path} is a folder where init writes a file"
    return None


def scaffold(target: Path, names: Names, *, force: bool = False) -> tuple[list[str], list[str], list[str]]:
    """Write the package into ``target``; ``(written, replaced, unchanged)`` paths relative to it.

    Refuses (FileExistsError) a ``target`` that holds anything unless ``force``; with ``force``, refuses to
    write through a symlink or over a folder, and returns every file whose content it replaced."""
    if target.exists() and not target.is_dir():
        raise FileExistsError(f"{target} exists and is not a directory")
    if target.is_dir() and any(target.iterdir()) and not force:
        raise FileExistsError(
            f"{target} is not empty; give --force to write into it (a file that exists is replaced, and named)"
        )
    files = planned_files(names)
    for relative in files:  # everything checked before the first file is written
        problem = _obstacle(target, relative)
        if problem is not None:
            raise FileExistsError(problem)
    written, replaced, unchanged = [], [], []
    for relative, content in files.items():
        path = target / relative
        if path.exists():
            if path.read_bytes() == content.encode("utf-8"):
                unchanged.append(relative)
                continue
            replaced.append(relative)
        else:
            written.append(relative)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    return written, replaced, unchanged


@app.command()
def init(
    directory: Path = typer.Argument(
        ..., metavar="DIR", help="Where to create the package (created if missing; must be empty unless --force)."
    ),
    name: str | None = typer.Option(
        None, "--name", help="Distribution name, as pip installs it (default: DIR's name)."
    ),
    package: str | None = typer.Option(
        None, "--package", help="Import name (default: the distribution name with '-' and '.' as '_', in lower case)."
    ),
    env_name: str | None = typer.Option(
        None,
        "--env-name",
        help="Short name the package registers for its "
        "environment and reward (--env NAME, --reward NAME; default: the "
        "import name).",
    ),
    force: bool = typer.Option(False, "--force", help="Write into a non-empty DIR; every file replaced is named."),
) -> None:
    """Create a package of your own: an environment, a reward, tasks and a passing test, registered by entry points."""
    try:
        names = choose_names(directory, name, package, env_name)
    except PackageNameError as exc:
        usage_fail(str(exc))
    try:
        written, replaced, unchanged = scaffold(directory, names, force=force)
    except FileExistsError as exc:
        fail(str(exc), DATA_ERROR)
    for relative in replaced:
        note(f"replaced {directory / relative} (it held something else)")
    for relative in unchanged:
        note(f"unchanged {directory / relative}")
    shown = printable(str(directory))
    typer.echo(
        f"Created {names.distribution} in {shown}: {len(written)} file(s) written"
        + (f", {len(replaced)} replaced" if replaced else "")
        + ".\n"
        f"environment and reward: {names.name} ({names.package}.environment:ENVIRONMENT, "
        f"{names.package}.rewards:REWARD)\n\nNext, in this Python environment:\n"
        f"  cd {shown}\n  pip install -e .\n  pytest\n"
        f"  rewardpipe doctor --env {names.name} --tasks tasks/train.jsonl\n"
        f"  rewardpipe run --env {names.name} --tasks tasks/train.jsonl --policy scripted"
    )
