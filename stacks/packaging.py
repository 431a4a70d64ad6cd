"""Stage Lambda and container build inputs at synth time, offline and without Docker.

* The Lambda **layer** holds the ``rewardpipe`` package plus the pure-Python and manylinux wheels the
  handlers import (Powertools, pydantic and pydantic-core, httpx and its deps), copied file by file
  from the pinned virtualenv using each distribution's RECORD. boto3/botocore come from the Lambda
  runtime. Why not the AWS-managed Powertools layer: it would pin us to whatever pydantic and Powertools
  versions that layer ships instead of the versions the tests ran with. pydantic-core is compiled, so
  the staged copy must be the CPython 3.11 x86-64 Linux build; :func:`stage_layer` checks that and
  fails the synth with a clear message on any other platform.
* The **container** build context holds the Dockerfile and entry point from containers/code_runner/
  plus a copy of ``rewardpipe`` (the image installs the same code the Lambdas run).

Both are staged into a fresh temporary directory per process (parallel test workers never race) and
CDK hashes the staged contents, so the asset hash only changes when the code does.
"""

from __future__ import annotations

import atexit
import functools
import importlib.metadata as md
import shutil
import sysconfig
import tempfile
from pathlib import Path

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
            f"{EXPECTED_PLATFORM_TAG} build; synthesize on Linux x86-64 with Python 3.11 "
            f"(this interpreter is {sysconfig.get_platform()})"
        )


def _scratch(prefix: str) -> Path:
    """A fresh staging directory, removed when the process exits (CDK has copied it by then)."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, root, True)
    return root


@functools.lru_cache(maxsize=None)
def stage_layer() -> str:
    """Directory laid out as a Lambda layer (``python/...``); built once per process."""
    root = _scratch("rewardpipe-layer-")
    python_dir = root / "python"
    python_dir.mkdir()
    copy_package(python_dir)
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
