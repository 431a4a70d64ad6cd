"""What the layer's byte code saves a cold start: each handler imported from the staged Lambda layer alone.

Lambda mounts the layer read-only at /opt, so a layer of sources is compiled again at every cold start.
For each handler this script starts fresh CPython 3.13 interpreters (the python3.13 runtime's version, found by
stacks.packaging.lambda_python) with only the staged layer for this machine's architecture on the path (``-S``:
no site-packages; boto3 is the layer's own), imports the handler, and reports the median import time with the
layer as staged (CPython 3.13 byte code from ``compile_layer``) and with the same layer stripped of its
``__pycache__`` directories (sources only: what the layer would be without a 3.13 to compile it), and their ratio.

    .venv/bin/python benchmarks/layer_bytecode.py [--runs 5] [--handlers converse,score_rollout]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cold_start import ENV  # noqa: E402

from stacks import packaging  # noqa: E402

PROBE = """
import sys, time, importlib.util
t = time.perf_counter()
spec = importlib.util.spec_from_file_location("handler", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print((time.perf_counter() - t) * 1000)
"""


def median_import_ms(handler: Path, path: str, runs: int, python: str = sys.executable) -> float:
    env = {**os.environ, **ENV, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": path}
    return statistics.median(
        float(
            subprocess.run(
                [python, "-S", "-c", PROBE, str(handler)], env=env, capture_output=True, text=True, check=True
            ).stdout
        )
        for _ in range(runs)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--handlers", default="converse,score_rollout,code_runner,variance_monitor")
    args = parser.parse_args()
    python = packaging.lambda_python()
    if python is None:
        sys.exit(
            f"no CPython {packaging.LAMBDA_PYTHON_VERSION} to run the layer with; set {packaging.LAMBDA_PYTHON_ENV}"
        )
    machine = {"x86_64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine())
    if machine is None:
        sys.exit(f"no Lambda architecture matches this machine ({platform.machine()})")
    compiled = Path(packaging.stage_layer.__wrapped__(machine)) / "python"
    sources = Path(tempfile.mkdtemp(prefix="layer-sources-")) / "python"
    shutil.copytree(compiled, sources, ignore=lambda _d, names: {n for n in names if n == "__pycache__"})
    version = subprocess.run(
        [python, "-c", "import platform; print(platform.python_version())"], capture_output=True, text=True, check=True
    ).stdout.strip()
    print(
        f"Python {version} ({python}), {os.cpu_count()} cores, load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; median of {args.runs} fresh interpreters"
    )
    print(f"{'handler':<20} {'byte code ms':>12} {'sources ms':>11} {'sources / byte code':>20}")
    for name in args.handlers.split(","):
        handler = ROOT / "functions" / name / "handler.py"
        with_code = median_import_ms(handler, str(compiled), args.runs, python)
        without = median_import_ms(handler, str(sources), args.runs, python)
        print(f"{name:<20} {with_code:>12.1f} {without:>11.1f} {without / with_code:>19.2f}x")
    shutil.rmtree(sources.parent, ignore_errors=True)
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
