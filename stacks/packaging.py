"""Stage Lambda and container build inputs at synth time, offline and without Docker.

* The Lambda **layer** holds the ``rewardpipe`` package plus the distributions the handlers import
  (Powertools, pydantic and pydantic-core, httpx and its deps), at exactly the versions of the pinned
  virtualenv; boto3/botocore come from the Lambda runtime. Why not the AWS-managed Powertools layer: it
  would pin us to whatever pydantic and Powertools versions that layer ships. pydantic-core is compiled,
  and Lambda needs its CPython 3.11 x86-64 Linux build whatever machine synthesizes:

  - on Linux x86-64 with CPython 3.11 the files are copied from the virtualenv (offline, using each
    distribution's RECORD);
  - anywhere else (macOS, arm64, another Python) they come from
    ``pip install --platform manylinux2014_x86_64 --only-binary=:all: --python-version 3.11 --target ...``,
    which downloads the Lambda-platform wheels without Docker, cached per version set under
    ``~/.cache/rewardpipe/layer/``. ``REWARDPIPE_LAYER_BUILD=pip`` forces this path, ``=venv`` the copy.

  Either way :func:`stage_layer` checks that the staged pydantic-core is the Lambda build.
* The **container** build context holds the Dockerfile and entry point from containers/code_runner/
  plus a copy of ``rewardpipe`` (the image installs the same code the Lambdas run).

Both are staged into a fresh temporary directory per process (parallel test workers never race) and
CDK hashes the staged contents, so the asset hash only changes when the code does.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import importlib.metadata as md
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Callable, Sequence

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = ROOT / "rewardpipe"
FUNCTIONS_DIR = ROOT / "functions"
CONTAINER_DIR = ROOT / "containers" / "code_runner"

# Distributions the handlers need at run time, beyond the Lambda runtime's boto3/botocore.
LAYER_DISTRIBUTIONS = (
    "aws-lambda-powertools",
    "aws-xray-sdk",
    "wrapt",
    "jmespath",
    "pydantic",
    "pydantic-core",
    "annotated-types",
    "typing-extensions",
    "typing-inspection",
    "httpx",
    "httpcore",
    "h11",
    "anyio",
    "idna",
    "certifi",
)
# Parts of rewardpipe never shipped to AWS: the CLI (it pulls in typer and rich) and the bundled task set,
# whose hidden tests must not sit on a file system the sandboxed model code can read (on Lambda and in the
# runner container the child runs without the uid and Landlock layers; tasks arrive through S3 instead).
PACKAGE_EXCLUDES = ("cli", "data")
EXPECTED_PLATFORM_TAG = "cpython-311-x86_64-linux-gnu"
# What pip must fetch for the Lambda python3.11 x86_64 runtime (Amazon Linux 2023, glibc 2.34).
LAMBDA_PIP_PLATFORM = ("--platform", "manylinux2014_x86_64", "--only-binary=:all:",
                       "--python-version", "3.11", "--implementation", "cp")
LAYER_BUILD_ENV = "REWARDPIPE_LAYER_BUILD"
LAYER_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rewardpipe" / "layer"


class PackagingError(RuntimeError):
    pass


def _ignore(_dir: str, names: list[str]) -> set[str]:
    return {n for n in names if n == "__pycache__" or n.endswith((".pyc", ".pyo"))}


def copy_package(dest: Path) -> None:
    """Copy rewardpipe/ (minus caches and the CLI) to ``dest/rewardpipe``."""
    target = dest / "rewardpipe"

    def ignore(directory: str, names: list[str]) -> set[str]:
        skipped = _ignore(directory, names)
        if Path(directory) == PACKAGE_DIR:
            skipped |= {n for n in names if n in PACKAGE_EXCLUDES}
        return skipped

    shutil.copytree(PACKAGE_DIR, target, ignore=ignore)


def copy_distribution(name: str, dest: Path) -> int:
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        raise PackagingError(f"distribution '{name}' is not installed; run `make install-dev`") from None
    copied = 0
    for entry in dist.files or ():
        parts = Path(str(entry)).parts
        if not parts or parts[0] == ".." or "__pycache__" in parts or str(entry).endswith(".pyc"):
            continue  # console scripts outside site-packages, and byte code
        source = Path(dist.locate_file(entry))
        if not source.is_file():
            continue
        target = dest.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        copied += 1
    if copied == 0:
        raise PackagingError(f"distribution '{name}' has no files to stage")
    return copied


def _check_platform(python_dir: Path) -> None:
    binaries = sorted(python_dir.glob("pydantic_core/_pydantic_core*.so"))
    if not binaries:
        raise PackagingError("pydantic-core has no compiled module to stage")
    if not any(EXPECTED_PLATFORM_TAG in b.name for b in binaries):
        raise PackagingError(
            f"the staged pydantic-core is {binaries[0].name}, but Lambda python3.11 x86_64 needs a "
            f"{EXPECTED_PLATFORM_TAG} build; set {LAYER_BUILD_ENV}=pip to fetch it "
            f"(this interpreter is {sysconfig.get_platform()})"
        )


def _scratch(prefix: str) -> Path:
    """A fresh staging directory, removed when the process exits (CDK has copied it by then)."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, root, True)
    return root


def layer_requirements() -> list[str]:
    """``name==version`` for every layer distribution, at the versions installed (and tested) here."""
    pins = []
    for name in LAYER_DISTRIBUTIONS:
        try:
            pins.append(f"{name}=={md.version(name)}")
        except md.PackageNotFoundError:
            raise PackagingError(f"distribution '{name}' is not installed; run `make install-dev`") from None
    return pins


def pip_layer_command(target: Path, requirements: Sequence[str]) -> list[str]:
    """pip fetching the Lambda platform's wheels (never building from source, never resolving other versions)."""
    return [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile", *LAMBDA_PIP_PLATFORM,
            "--target", str(target), *requirements]


def matches_lambda_platform() -> bool:
    """True when this interpreter's compiled modules are the ones Lambda python3.11 x86_64 loads."""
    return sysconfig.get_config_var("EXT_SUFFIX") == f".{EXPECTED_PLATFORM_TAG}.so"


def use_pip(env: dict[str, str] | None = None) -> bool:
    choice = (os.environ if env is None else env).get(LAYER_BUILD_ENV, "auto")
    if choice not in ("auto", "pip", "venv"):
        raise PackagingError(f"{LAYER_BUILD_ENV} must be auto, pip or venv, got {choice!r}")
    return choice == "pip" or (choice == "auto" and not matches_lambda_platform())


def pip_layer_dependencies(
    requirements: Sequence[str], cache: Path | None = None, run: Callable[..., subprocess.CompletedProcess] | None = None
) -> Path:
    """The Lambda-platform wheels of ``requirements`` installed into a cache directory (one per version set)."""
    cache = LAYER_CACHE if cache is None else cache
    run = subprocess.run if run is None else run
    key = hashlib.sha256("\n".join([*LAMBDA_PIP_PLATFORM, *sorted(requirements)]).encode()).hexdigest()[:16]
    done = cache / key
    if (done / ".complete").is_file():
        return done
    staging = Path(tempfile.mkdtemp(prefix=f"{key}-", dir=_ensure(cache)))
    proc = run(pip_layer_command(staging, requirements), capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise PackagingError("pip could not fetch the Lambda-platform wheels for the layer "
                             f"(manylinux2014_x86_64, CPython 3.11):\n{(proc.stderr or proc.stdout)[-2000:]}")
    (staging / ".complete").write_text("\n".join(requirements))
    try:
        staging.rename(done)
    except OSError:  # another synth finished the same set first
        shutil.rmtree(staging, ignore_errors=True)
    return done


def _ensure(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


@functools.lru_cache(maxsize=None)
def stage_layer() -> str:
    """Directory laid out as a Lambda layer (``python/...``); built once per process."""
    root = _scratch("rewardpipe-layer-")
    python_dir = root / "python"
    python_dir.mkdir()
    copy_package(python_dir)
    if use_pip():
        wheels = pip_layer_dependencies(layer_requirements())
        shutil.copytree(wheels, python_dir, dirs_exist_ok=True, ignore=lambda _d, names: {
            n for n in names if n in (".complete", "bin") or n == "__pycache__"})
    else:
        for name in LAYER_DISTRIBUTIONS:
            copy_distribution(name, python_dir)
    _check_platform(python_dir)
    return str(root)


@functools.lru_cache(maxsize=None)
def stage_container() -> str:
    """Docker build context for the Fargate code runner; built once per process."""
    root = _scratch("rewardpipe-runner-")
    shutil.copytree(CONTAINER_DIR, root, dirs_exist_ok=True, ignore=_ignore)
    copy_package(root)
    return str(root)


def function_dir(name: str) -> str:
    path = FUNCTIONS_DIR / name
    if not (path / "handler.py").is_file():
        raise PackagingError(f"functions/{name}/handler.py does not exist")
    return str(path)
