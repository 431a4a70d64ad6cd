"""Stage Lambda and container build inputs at synth time, offline and without Docker.

* The Lambda **layer** holds the ``rewardpipe`` package plus the distributions the handlers import
  (Powertools, pydantic and pydantic-core, httpx and its deps, and boto3/botocore/s3transfer with theirs),
  at exactly the versions of the pinned virtualenv. Why the SDK too: the runtime's boto3 "depends on the
  runtime version and your AWS Region" and changes with runtime updates (Lambda's Python guide), while the
  code needs S3 conditional writes (``IfNoneMatch``/``IfMatch`` on PutObject, added to botocore in 2024) and
  was tested against the pinned botocore; a layer that shipped only some of the SDK's dependencies (jmespath)
  is the version misalignment AWS warns about. The layer's ``/opt/python`` comes before the runtime's own
  packages on ``sys.path``. Why not the AWS-managed Powertools layer: it would pin us to whatever pydantic
  and Powertools versions that layer ships. pydantic-core and wrapt are compiled, and Lambda needs their
  CPython 3.13 Linux build (the ``python3.13`` runtime, Amazon Linux 2023) for the functions' architecture
  (arm64, Graviton, by default; x86_64 by setting ``lambda.architecture``) whatever machine synthesizes:

  - when this interpreter is CPython 3.13 on Linux of that architecture, the files are copied from the
    virtualenv (offline, using each distribution's RECORD);
  - anywhere else (this repository's 3.11 virtualenv, macOS, the other architecture) they come from
    ``pip install --platform manylinux2014_aarch64 --only-binary=:all: --python-version 3.13 --target ...``
    (``manylinux2014_x86_64`` for x86_64), which downloads the Lambda-platform wheels without Docker,
    cached per version set under ``~/.cache/rewardpipe/layer/`` (``make install-dev`` fills the cache, so
    a synth after it is offline). ``REWARDPIPE_LAYER_BUILD=pip`` forces this path, ``=venv`` the copy.

  Either way :func:`stage_layer` checks that every compiled module staged is an ELF object for the
  functions' architecture and CPython 3.13, and that no byte code of another interpreter is in it: byte code
  is written only by a real CPython 3.13 (:func:`lambda_python` finds one: ``REWARDPIPE_LAMBDA_PYTHON``,
  ``python3.13`` on PATH, pyenv's or the system's), and without one the layer ships sources only.
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
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = ROOT / "rewardpipe"
FUNCTIONS_DIR = ROOT / "functions"
CONTAINER_DIR = ROOT / "containers" / "code_runner"

# The Lambda runtime the layer is built for (stacks/constructs/common.RUNTIME is python3.13).
LAMBDA_PYTHON_VERSION = "3.13"
LAMBDA_CACHE_TAG = "cpython-313"  # the byte code the python3.13 runtime loads (__pycache__/*.cpython-313.pyc)
# CPython 3.13's byte-code magic number: 3571, unchanged since 3.13b1 for every 3.13.x release (the table in
# Lib/importlib/_bootstrap_external.py); this 3.11 interpreter cannot compute it, a test checks it on a real 3.13.
LAMBDA_BYTECODE_MAGIC = (3571).to_bytes(2, "little") + b"\r\n"
CHECKED_HASH_FLAGS = 0b11  # PEP 552: hash-based, checked against the source at every import
LAMBDA_PYTHON_ENV = "REWARDPIPE_LAMBDA_PYTHON"

# Distributions the handlers need at run time, the AWS SDK and its dependencies included (see above).
LAYER_DISTRIBUTIONS = (
    "boto3",
    "botocore",
    "s3transfer",
    "urllib3",
    "python-dateutil",
    "six",
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
# Lambda architecture -> (pip platform tag, CPython 3.13's extension suffix on it, ELF e_machine).
# The python3.13 runtime is Amazon Linux 2023 (glibc 2.34) on both; manylinux2014 is glibc 2.17.
LAMBDA_PLATFORMS = {
    "arm64": ("manylinux2014_aarch64", "cpython-313-aarch64-linux-gnu", 0xB7),
    "x86_64": ("manylinux2014_x86_64", "cpython-313-x86_64-linux-gnu", 0x3E),
}
DEFAULT_ARCHITECTURE = "arm64"
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


def _platform(architecture: str) -> tuple[str, str, int]:
    try:
        return LAMBDA_PLATFORMS[architecture]
    except KeyError:
        raise PackagingError(
            f"unknown Lambda architecture {architecture!r}; use one of {sorted(LAMBDA_PLATFORMS)}"
        ) from None


def lambda_pip_platform(architecture: str = DEFAULT_ARCHITECTURE) -> tuple[str, ...]:
    """What pip must fetch for the Lambda python3.13 runtime on ``architecture``."""
    return (
        "--platform",
        _platform(architecture)[0],
        "--only-binary=:all:",
        "--python-version",
        LAMBDA_PYTHON_VERSION,
        "--implementation",
        "cp",
    )


def elf_machine(path: Path) -> int | None:
    """The ELF e_machine of ``path`` (None if it is not a little-endian ELF file)."""
    with open(path, "rb") as f:
        header = f.read(20)
    if len(header) < 20 or header[:4] != b"\x7fELF" or header[5] != 1:
        return None
    return int.from_bytes(header[18:20], "little")


def _check_platform(python_dir: Path, architecture: str = DEFAULT_ARCHITECTURE) -> None:
    """Every compiled module in the layer must load on the functions' architecture (one wrong wheel is an
    ImportError at the first cold start on AWS, never seen at synth)."""
    _pip_tag, suffix, machine = _platform(architecture)
    if not list(python_dir.glob("pydantic_core/_pydantic_core*.so")):
        raise PackagingError("pydantic-core has no compiled module to stage")
    for binary in sorted(python_dir.rglob("*.so")):
        if elf_machine(binary) != machine or ("cpython-" in binary.name and suffix not in binary.name):
            raise PackagingError(
                f"{binary.relative_to(python_dir)} is not a CPython {LAMBDA_PYTHON_VERSION} {architecture} Linux build, which the "
                f"{architecture} Lambda functions need; set {LAYER_BUILD_ENV}=pip to fetch it "
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


def pip_layer_command(target: Path, requirements: Sequence[str], architecture: str = DEFAULT_ARCHITECTURE) -> list[str]:
    """pip fetching the Lambda platform's wheels (never building from source, never resolving other versions)."""
    return [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-deps",
        "--no-compile",
        *lambda_pip_platform(architecture),
        "--target",
        str(target),
        *requirements,
    ]


def matches_lambda_platform(architecture: str = DEFAULT_ARCHITECTURE) -> bool:
    """True when this interpreter's compiled modules are the ones Lambda python3.13 on ``architecture`` loads."""
    return sysconfig.get_config_var("EXT_SUFFIX") == f".{_platform(architecture)[1]}.so"


def use_pip(env: dict[str, str] | None = None, architecture: str = DEFAULT_ARCHITECTURE) -> bool:
    choice = (os.environ if env is None else env).get(LAYER_BUILD_ENV, "auto")
    if choice not in ("auto", "pip", "venv"):
        raise PackagingError(f"{LAYER_BUILD_ENV} must be auto, pip or venv, got {choice!r}")
    return choice == "pip" or (choice == "auto" and not matches_lambda_platform(architecture))


def pip_layer_dependencies(
    requirements: Sequence[str],
    cache: Path | None = None,
    run: Callable[..., subprocess.CompletedProcess] | None = None,
    architecture: str = DEFAULT_ARCHITECTURE,
) -> Path:
    """The Lambda-platform wheels of ``requirements`` installed into a cache directory (one per version set)."""
    cache = LAYER_CACHE if cache is None else cache
    run = subprocess.run if run is None else run
    platform_args = lambda_pip_platform(architecture)
    key = hashlib.sha256("\n".join([*platform_args, *sorted(requirements)]).encode()).hexdigest()[:16]
    done = cache / key
    if (done / ".complete").is_file():
        return done
    staging = Path(tempfile.mkdtemp(prefix=f"{key}-", dir=_ensure(cache)))
    proc = run(pip_layer_command(staging, requirements, architecture), capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise PackagingError(
            "pip could not fetch the Lambda-platform wheels for the layer "
            f"({platform_args[1]}, CPython {LAMBDA_PYTHON_VERSION}):\n{(proc.stderr or proc.stdout)[-2000:]}"
        )
    (staging / ".complete").write_text("\n".join(requirements))
    try:
        staging.rename(done)
    except OSError:  # another synth finished the same set first
        shutil.rmtree(staging, ignore_errors=True)
    return done


def _ensure(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


@functools.cache
def stage_layer(architecture: str = DEFAULT_ARCHITECTURE) -> str:
    """Directory laid out as a Lambda layer (``python/...``) for ``architecture``; built once per process."""
    root = _scratch(f"rewardpipe-layer-{architecture}-")
    python_dir = root / "python"
    python_dir.mkdir()
    copy_package(python_dir)
    if use_pip(architecture=architecture):
        wheels = pip_layer_dependencies(layer_requirements(), architecture=architecture)
        shutil.copytree(
            wheels,
            python_dir,
            dirs_exist_ok=True,
            ignore=lambda _d, names: {n for n in names if n in (".complete", "bin") or n == "__pycache__"},
        )
    else:
        for name in LAYER_DISTRIBUTIONS:
            copy_distribution(name, python_dir)
    _check_platform(python_dir, architecture)
    compile_layer(python_dir)
    _check_bytecode(python_dir)
    return str(root)


LAYER_MOUNT = "/opt/python"  # where Lambda mounts a layer's python/ directory


class LayerWithoutBytecode(UserWarning):
    """No CPython 3.13 was found to compile the layer: it ships sources, compiled again at every cold start."""


def _probe(python: str) -> bool:
    """True if ``python`` runs and is CPython with the Lambda runtime's byte-code tag."""
    try:
        proc = subprocess.run(
            [python, "-I", "-c", "import sys; print(sys.implementation.name, sys.implementation.cache_tag)"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and proc.stdout.split() == ["cpython", LAMBDA_CACHE_TAG]


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in path.parts[-3].split(".") if part.isdigit())


def _candidates() -> list[str]:
    name = f"python{LAMBDA_PYTHON_VERSION}"
    found = [shutil.which(name)]
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    found += [
        str(p) for p in sorted(pyenv.glob(f"{LAMBDA_PYTHON_VERSION}.*/bin/{name}"), key=_version_key, reverse=True)
    ]
    found += [f"{d}/{name}" for d in ("/usr/bin", "/usr/local/bin", "/opt/homebrew/bin")]
    return [c for c in dict.fromkeys(found) if c]


@functools.cache
def lambda_python() -> str | None:
    """A CPython 3.13 interpreter to compile the layer's byte code with (the Lambda runtime's version), or
    None. ``REWARDPIPE_LAMBDA_PYTHON`` names one explicitly (and must be one); otherwise this interpreter if
    it is 3.13, then ``python3.13`` on PATH, pyenv's 3.13.x (newest first), the usual system locations.
    Debian 13 (``apt-get install python3.13``) and the python.org installers provide one too."""
    explicit = os.environ.get(LAMBDA_PYTHON_ENV)
    if explicit:
        if not _probe(explicit):
            raise PackagingError(
                f"{LAMBDA_PYTHON_ENV}={explicit!r} is not a CPython {LAMBDA_PYTHON_VERSION} "
                f"interpreter (byte code for the python3.13 runtime needs one)"
            )
        return explicit
    if sys.implementation.cache_tag == LAMBDA_CACHE_TAG:
        return sys.executable
    return next((c for c in _candidates() if _probe(c)), None)


def compile_layer(python_dir: Path, python: str | None = None) -> bool:
    """Ship byte code in the layer. ``/opt`` is read-only on Lambda, so a layer of sources alone is compiled
    again at every cold start (benchmarks/layer_bytecode.py measures what that costs). The byte code is
    hash-checked (a zip keeps no source timestamps, and a changed source never runs stale code), names its
    files as they are on Lambda (``/opt/python/...``), and is compiled with a fixed hash seed so the same
    sources give the same bytes (the asset hash stays stable). Only a CPython 3.13 writes what the python3.13
    runtime loads: ``python`` (default :func:`lambda_python`); without one the layer stays sources only, with a
    :class:`LayerWithoutBytecode` warning, and this returns False."""
    python = python or lambda_python()
    if python is None:
        warnings.warn(
            f"no CPython {LAMBDA_PYTHON_VERSION} found (set {LAMBDA_PYTHON_ENV}): the Lambda layer ships "
            f"sources only, which every cold start compiles again",
            LayerWithoutBytecode,
            stacklevel=2,
        )
        return False
    # No -I/-E: they would drop PYTHONHASHSEED; the environment is reduced to what compileall needs instead.
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONHASHSEED": "0", "LC_ALL": "C.UTF-8"}
    proc = subprocess.run(
        [
            python,
            "-s",
            "-m",
            "compileall",
            "-q",
            "-q",
            "-j",
            "0",
            "-d",
            LAYER_MOUNT,
            "--invalidation-mode",
            "checked-hash",
            str(python_dir),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    if proc.returncode != 0:
        raise PackagingError(f"could not compile the layer's byte code:\n{(proc.stderr or proc.stdout)[-2000:]}")
    return True


def foreign_bytecode(root: Path) -> list[str]:
    """Every byte-code file under ``root`` that the python3.13 runtime would not load as it is: another
    interpreter's (magic number or file name), or not hash-checked. Empty for a layer fit to ship."""
    bad = []
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".pyc", ".pyo") and p.is_file()):
        header = path.read_bytes()[:8]
        if (
            path.parent.name != "__pycache__"
            or not path.name.endswith(f".{LAMBDA_CACHE_TAG}.pyc")
            or header[:4] != LAMBDA_BYTECODE_MAGIC
            or int.from_bytes(header[4:8], "little") != CHECKED_HASH_FLAGS
        ):
            bad.append(str(path.relative_to(root)))
    return bad


def _check_bytecode(python_dir: Path) -> None:
    bad = foreign_bytecode(python_dir)
    if bad:
        raise PackagingError(
            f"the layer holds byte code the python{LAMBDA_PYTHON_VERSION} runtime cannot use "
            f"({len(bad)} files, e.g. {bad[:3]}); it must be CPython {LAMBDA_PYTHON_VERSION}'s, "
            f"hash-checked, or absent"
        )


def prefetch_layer_wheels(architectures: Sequence[str] = tuple(LAMBDA_PLATFORMS)) -> list[Path]:
    """Fill the wheel cache for every architecture this machine cannot copy from its own virtualenv, so
    later synths (and the tests) run offline. ``python -m stacks.packaging`` runs this."""
    return [
        pip_layer_dependencies(layer_requirements(), architecture=arch)
        for arch in architectures
        if not matches_lambda_platform(arch)
    ]


@functools.cache
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


if __name__ == "__main__":
    for path in prefetch_layer_wheels():
        print(f"layer wheels cached in {path}")
