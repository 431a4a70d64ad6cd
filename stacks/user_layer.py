"""The user layer: the packages of ``rewardpipe.packages`` built for Lambda at synth, offline after the first time.

For the functions' architecture (arm64 by default, x86_64 by ``lambda.architecture``) and the python3.13 runtime:

1. each project directory is built into a wheel first (``pip wheel --no-deps``; pip's build isolation fetches its
   build backend the first time);
2. everything is installed with ``pip install --platform manylinux2014_<aarch64|x86_64> --only-binary=:all:
   --python-version 3.13 --implementation cp --target ...`` (Lambda's wheels, never a source build, no Docker),
   with a constraints file pinning every distribution of rewardpipe's own layer to its version, so a user
   requirement that disagrees fails here naming both; rewardpipe itself is stood in for by a local stub of the
   layer's version, so a package that depends on ``rewardpipe`` never fetches it from an index;
   a directory of pre-built wheels is given to pip with ``--find-links`` for what it cannot fetch;
3. what rewardpipe's layer already ships is removed (nothing is in both layers), every compiled module is
   checked for the architecture (ELF ``e_machine``) and CPython 3.13, and byte code is compiled by a CPython 3.13
   (stacks.packaging.compile_layer, as for rewardpipe's layer);
4. the result is cached under ``~/.cache/rewardpipe/user-layer/<key>``, keyed by the content of every entry
   (each project file, each wheel's bytes, each pinned requirement), the platform and the pins: a later synth
   of the same content runs no pip at all.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path

from stacks.config import SettingsError
from stacks.packaging import (
    LAMBDA_CACHE_TAG,
    LAMBDA_PYTHON_VERSION,
    LAYER_CACHE,
    ROOT,
    PackagingError,
    _check_bytecode,
    _platform,
    compile_layer,
    elf_machine,
    lambda_pip_platform,
    lambda_python,
    layer_requirements,
)

USER_LAYER_CACHE_ENV = "REWARDPIPE_USER_LAYER_CACHE"
USER_LAYER_CACHE = Path(os.environ.get(USER_LAYER_CACHE_ENV) or LAYER_CACHE.parent / "user-layer")
# Bumped when what a build produces changes, so an old cache entry is never taken for a new one.
BUILD_FORMAT = "3"
COMPLETE = ".complete"
MANIFEST = "manifest.json"
# A local version of the stub standing in for rewardpipe: only the stub satisfies the constraint, while any
# requirement on rewardpipe's public version (``rewardpipe>=0.1,<0.2``, ``==0.1.0``) accepts it (PEP 440).
STUB_LOCAL = "rewardpipelayer"
REQUIREMENT = re.compile(
    r"^(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)(?P<extras>\[[A-Za-z0-9._, -]+\])?"
    r"==(?P<version>[A-Za-z0-9.+!_-]+)$"
)
# A shared object: ``x.so``, ``x.cpython-313-aarch64-linux-gnu.so``, ``libx.so.1.2``.
SHARED_OBJECT = re.compile(r"\.so(\.\d+)*$")
# Not part of a project's content (build output, caches, environments, VCS).
SKIPPED_DIRS = {
    ".git",
    ".hg",
    "__pycache__",
    ".venv",
    "venv",
    ".tox",
    ".nox",
    "build",
    "dist",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    "node_modules",
    "cdk.out",
    ".eggs",
}


class UserLayerError(PackagingError, SettingsError):
    """The user layer cannot be built; the message names the entry of ``rewardpipe.packages`` and what to do
    (a SettingsError: ``python app.py`` prints it as one line and exits 2, no traceback)."""


# -- the entries -------------------------------------------------------------------------------------------


def resolve_path(text: str) -> Path:
    """A path in ``rewardpipe.packages``: absolute, or relative to the directory of cdk.json and app.py."""
    path = Path(text).expanduser()
    return path if path.is_absolute() else ROOT / path


def _looks_like_path(entry: str) -> bool:
    return "/" in entry or "\\" in entry or entry.startswith(".") or entry.endswith(".whl") or entry == "~"


def classify(entry: str) -> tuple[str, str]:
    """``(kind, entry)``: kind is ``project``, ``wheel``, ``wheels`` (a directory of wheels) or ``requirement``;
    ``invalid`` when it is none of them (:func:`check_package_entry` says why)."""
    entry = entry.strip()
    if _looks_like_path(entry) or (resolve_path(entry).exists() and not REQUIREMENT.match(entry)):
        path = resolve_path(entry)
        if path.is_file() and path.suffix == ".whl":
            return "wheel", entry
        if path.is_dir() and ((path / "pyproject.toml").is_file() or (path / "setup.py").is_file()):
            return "project", entry
        if path.is_dir() and any(path.glob("*.whl")):
            return "wheels", entry
        return "invalid", entry
    if REQUIREMENT.match(entry):
        return "requirement", entry
    return "invalid", entry


def check_package_entry(entry: object) -> str | None:
    """Why ``entry`` cannot be an entry of ``rewardpipe.packages``, or None."""
    if not isinstance(entry, str) or not entry.strip():
        return "must be a non-empty text: a project directory, a wheel file, name==version or a directory of wheels"
    kind, _ = classify(entry)
    if kind != "invalid":
        return None
    if _looks_like_path(entry) or resolve_path(entry).exists():
        path = resolve_path(entry)
        if not path.exists():
            return f"{path} does not exist (a relative path is taken from {ROOT})"
        if path.is_file():
            return f"{path} is a file but not a wheel (.whl)"
        return f"{path} has no pyproject.toml or setup.py (a project) and no .whl file (a directory of wheels)"
    return (
        "not a pinned requirement: pin one version, name==version (the layer is cached by content, so a range "
        "would never be resolved again), or give a project directory, a wheel file or a directory of wheels"
    )


# -- the content key ---------------------------------------------------------------------------------------


def _hash_file(digest: hashlib._Hash, path: Path) -> None:
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)


def _skipped(directory: str, names: list[str]) -> set[str]:
    """What a project's content leaves out (shutil.copytree's ignore; the same as :func:`_project_files`)."""
    out = set()
    for name in names:
        if (Path(directory) / name).is_dir():
            if name in SKIPPED_DIRS or name.endswith(".egg-info"):
                out.add(name)
        elif name.endswith((".pyc", ".pyo")):
            out.add(name)
    return out


def _project_files(root: Path) -> list[Path]:
    files = []
    for directory, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info"))
        files += [Path(directory) / n for n in sorted(names) if not n.endswith((".pyc", ".pyo"))]
    return files


def content_key(entries: Sequence[str], architecture: str, pins: Sequence[str]) -> str:
    """A digest of everything the build depends on: the entries' content, the platform, the pins, the
    byte-code compiler's presence and this module's build format."""
    digest = hashlib.sha256()

    def add(*parts: str) -> None:
        for part in parts:
            digest.update(part.encode())
            digest.update(b"\0")

    add(
        BUILD_FORMAT,
        *lambda_pip_platform(architecture),
        LAMBDA_CACHE_TAG,
        str(lambda_python() is not None),
        *sorted(pins),
    )
    for entry in entries:
        kind, value = classify(entry)
        add(kind, value)
        if kind == "requirement":
            continue
        path = resolve_path(value)
        files = [path] if kind == "wheel" else _project_files(path) if kind == "project" else sorted(path.glob("*.whl"))
        for file in files:
            add(file.relative_to(path).as_posix() if kind == "project" else file.name)
            _hash_file(digest, file)
    return digest.hexdigest()[:24]


# -- the build ---------------------------------------------------------------------------------------------


def rewardpipe_version() -> str:
    from rewardpipe import __version__

    return __version__


def _stub_wheel(directory: Path) -> str:
    """A wheel named rewardpipe at the layer's version (a local label only it has) and holding nothing: a user
    package's requirement on rewardpipe is met by the layer, never fetched."""
    version = f"{rewardpipe_version()}+{STUB_LOCAL}"
    dist_info = f"rewardpipe-{version}.dist-info"
    files = {
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: rewardpipe\nVersion: {version}\n",
        f"{dist_info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: rewardpipe-stacks\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = "".join(f"{name},,\n" for name in files) + f"{dist_info}/RECORD,,\n"
    path = directory / f"rewardpipe-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
        wheel.writestr(f"{dist_info}/RECORD", record)
    return version


def _tail(proc: subprocess.CompletedProcess) -> str:
    text = (proc.stderr or "") + (proc.stdout or "")
    lines = [line for line in text.splitlines() if line.strip() and "is ignored: it is neither a file" not in line]
    return "\n".join(lines[-25:])


def conflict_lines(pip_output: str) -> list[str]:
    """The lines under pip's "The conflict is caused by:" (each side of a resolution conflict)."""
    lines = pip_output.splitlines()
    for index, line in enumerate(lines):
        if line.strip().startswith("The conflict is caused by"):
            out = []
            for follow in lines[index + 1 :]:
                if not follow.strip():
                    break
                out.append(follow.strip())
            return out
    return []


def explain_install_failure(output: str, architecture: str, pins: Sequence[str]) -> str:
    """What went wrong in pip's words, framed for the deployment: a conflict names both sides, a missing wheel
    says how to provide one."""
    platform_tag = _platform(architecture)[0]
    conflicts = conflict_lines(output)
    if conflicts:
        pinned = {pin.split("==")[0].lower(): pin for pin in pins}
        ours = [line for line in conflicts if "(constraint)" in line]
        theirs = [line for line in conflicts if "(constraint)" not in line]
        names = [line.split("(constraint)", 1)[1].strip() for line in ours]
        layer = ", ".join(names) or ", ".join(sorted(pinned.values()))
        return (
            f"a package conflicts with the rewardpipe layer: {'; '.join(theirs) or 'a requirement'} -- but the "
            f"rewardpipe layer ships {layer} (both layers share one Python: change the requirement, or use the "
            f"rewardpipe release whose pins it accepts)"
        )
    missing = re.findall(r"No matching distribution found for (\S+)", output)
    if missing:
        return (
            f"pip found no {platform_tag} CPython {LAMBDA_PYTHON_VERSION} wheel for {', '.join(missing)} "
            f"(the layer "
            f"takes binary wheels only, never a source build): build the wheel for that platform (on a Linux "
            f"{architecture} machine or in CI), put it in a directory and add that directory to "
            f"rewardpipe.packages; or pin a version that publishes one"
        )
    return "pip failed"


def _top_level(python_dir: Path) -> set[str]:
    return {p.name for p in python_dir.iterdir() if p.name not in ("__pycache__", "bin")}


def _strip_shipped(target: Path, shipped: Sequence[str]) -> list[str]:
    """Remove every distribution rewardpipe's layer already ships (by its RECORD) and the rewardpipe stub."""
    wanted = {name.lower().replace("-", "_") for name in shipped} | {"rewardpipe"}
    removed = []
    for dist_info in sorted(target.glob("*.dist-info")):
        name = dist_info.name[: -len(".dist-info")].rsplit("-", 1)[0].lower().replace("-", "_").replace(".", "_")
        if name not in wanted:
            continue
        record = dist_info / "RECORD"
        for line in record.read_text().splitlines() if record.is_file() else ():
            relative = line.rsplit(",", 2)[0]
            path = (target / relative).resolve()
            if path.is_file() and target.resolve() in path.parents:
                path.unlink()
        shutil.rmtree(dist_info, ignore_errors=True)
        removed.append(dist_info.name)
    # Directories the removed distributions leave empty (a package's __pycache__, say).
    for directory in sorted((d for d in target.rglob("*") if d.is_dir()), key=lambda d: len(d.parts), reverse=True):
        leftovers = [p for p in directory.iterdir() if p.name != "__pycache__"]
        if not leftovers:
            shutil.rmtree(directory, ignore_errors=True)
    shutil.rmtree(target / "bin", ignore_errors=True)
    # Where each wheel was installed from (PEP 610): a path of this machine's build directory, not content.
    for direct_url in target.glob("*.dist-info/direct_url.json"):
        direct_url.unlink()
    return removed


def check_architecture(python_dir: Path, architecture: str) -> None:
    """Every compiled module must be an ELF object for the functions' architecture, and CPython 3.13's (or the
    stable ABI's) when its name says which interpreter it is for."""
    _tag, suffix, machine = _platform(architecture)
    for binary in sorted(python_dir.rglob("*.so*")):
        if not binary.is_file() or not SHARED_OBJECT.search(binary.name):
            continue  # a module merely named like one (``x.socket.py``)
        name = binary.name
        wrong_abi = "cpython-" in name and suffix not in name
        if elf_machine(binary) != machine or wrong_abi:
            raise UserLayerError(
                f"user layer: {binary.relative_to(python_dir)} is not a CPython {LAMBDA_PYTHON_VERSION} {architecture} "
                f"Linux build, which the {architecture} functions need (a wheel for another platform in a wheel "
                f"directory of rewardpipe.packages?)"
            )


def installed_distributions(python_dir: Path) -> list[str]:
    return sorted(d.name[: -len(".dist-info")] for d in python_dir.glob("*.dist-info"))


def build_user_layer(
    entries: Sequence[str],
    architecture: str,
    *,
    cache: Path | None = None,
    run: Callable[..., subprocess.CompletedProcess] | None = None,
    shipped: Sequence[str] | None = None,
    pins: Sequence[str] | None = None,
) -> Path:
    """The layer directory (holding ``python/``) for ``entries`` on ``architecture``, from the cache when its
    content was built before (no pip then), else built and cached."""
    from stacks.packaging import LAYER_DISTRIBUTIONS

    cache = USER_LAYER_CACHE if cache is None else cache
    run = subprocess.run if run is None else run
    shipped = LAYER_DISTRIBUTIONS if shipped is None else shipped
    pins = [*(layer_requirements() if pins is None else pins)]
    bad = [(e, check_package_entry(e)) for e in entries if check_package_entry(e)]
    if bad:
        raise UserLayerError("; ".join(f"rewardpipe.packages entry {e!r}: {why}" for e, why in bad))
    key = content_key(entries, architecture, pins)
    done = cache / key
    if (done / COMPLETE).is_file():
        return done / "layer"
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{key}-", dir=cache))
    try:
        _build(work, entries, architecture, run, shipped, pins)
        (work / COMPLETE).write_text(key)
        try:
            work.rename(done)
        except OSError:  # another synth finished the same content first
            shutil.rmtree(work, ignore_errors=True)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return done / "layer"


def _build(
    work: Path,
    entries: Sequence[str],
    architecture: str,
    run: Callable[..., subprocess.CompletedProcess],
    shipped: Sequence[str],
    pins: list[str],
) -> None:
    wheels, stub = work / "wheels", work / "stub"
    target = work / "layer" / "python"
    for directory in (wheels, stub, target):
        directory.mkdir(parents=True)
    installs: list[str] = []
    find_links = [str(stub)]
    for entry in entries:
        kind, value = classify(entry)
        if kind == "project":
            # Built from a copy of exactly the content the key hashed: the build writes nothing into the user's
            # project (setuptools' build/ and *.egg-info), and no stale build/ output ends up in the wheel.
            source = work / "src" / f"{len(installs)}-{resolve_path(value).name}"
            shutil.copytree(resolve_path(value), source, ignore=_skipped)
            before = set(wheels.glob("*.whl"))
            proc = run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "wheel",
                    "--no-deps",
                    "--disable-pip-version-check",
                    "--quiet",
                    "--wheel-dir",
                    str(wheels),
                    str(source),
                ],
                capture_output=True,
                text=True,
            )
            built = sorted(set(wheels.glob("*.whl")) - before)
            if proc.returncode != 0 or not built:
                raise UserLayerError(
                    f"rewardpipe.packages entry {entry!r}: pip could not build the project into a wheel:\n{_tail(proc)}"
                )
            installs += [str(w) for w in built]
        elif kind == "wheel":
            installs.append(str(resolve_path(value)))
        elif kind == "wheels":
            find_links.append(str(resolve_path(value)))
        else:
            installs.append(value)
    stub_version = _stub_wheel(stub)
    constraints = work / "constraints.txt"
    constraints.write_text("\n".join([*pins, f"rewardpipe=={stub_version}"]) + "\n")
    if installs:
        command = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-compile",
            "--disable-pip-version-check",
            *lambda_pip_platform(architecture),
            "--target",
            str(target),
            "--constraint",
            str(constraints),
            *[arg for link in find_links for arg in ("--find-links", link)],
            *installs,
        ]
        proc = run(command, capture_output=True, text=True)
        if proc.returncode != 0:
            output = (proc.stderr or "") + (proc.stdout or "")
            raise UserLayerError(
                f"rewardpipe.packages: {explain_install_failure(output, architecture, pins)}\npip said:\n{_tail(proc)}"
            )
    removed = _strip_shipped(target, shipped)
    check_architecture(target, architecture)
    compile_layer(target)
    _check_bytecode(target)
    (work / MANIFEST).write_text(
        json.dumps(
            {
                "entries": list(entries),
                "architecture": architecture,
                "distributions": installed_distributions(target),
                "left_to_the_rewardpipe_layer": removed,
                "pins": pins,
            },
            indent=2,
            sort_keys=True,
        )
    )


def manifest(layer_dir: Path) -> dict:
    """What a built user layer holds (written next to it in the cache)."""
    return json.loads((Path(layer_dir).parent / MANIFEST).read_text())


def duplicates(user_python: Path, rewardpipe_python: Path) -> list[str]:
    """Top-level names (packages, modules, dist-info) present in both layers' ``python/`` directories."""
    return sorted(_top_level(user_python) & _top_level(rewardpipe_python))


def provides(python_dir: Path, top: str) -> bool:
    """True when the layer holds the top-level package or module ``top``."""
    return (
        (python_dir / top).is_dir()
        or (python_dir / f"{top}.py").is_file()
        or any(python_dir.glob(f"{top}.*.so"))
        or any(python_dir.glob(f"{top}.so"))
    )
