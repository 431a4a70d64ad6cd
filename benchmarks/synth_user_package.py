"""What a user package costs a synth, once its layer is cached (issue 20: at most 1.3x the synth without it).

In one process (the jsii runtime and rewardpipe's staged layer are shared, as they are in any one synth), after a
warm-up synth of each kind (the first user-package synth fills the user layer cache if it is empty), this times
``--runs`` synths of each kind, interleaved so a change in machine load hits both: the stack as cdk.json
configures it, and the same with a user package of one pure-Python module (tests/fixtures/one_module_pkg) as the
rollout and single-turn reward. Each synth is the app's own (``app.build_app`` then ``app.synth()``, cdk-nag
included) into a fresh output directory. Prints the medians and their ratio; exits 1 above ``--max-ratio``.

    .venv/bin/python benchmarks/synth_user_package.py [--runs 3] [--max-ratio 1.3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "one_module_pkg"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(FIXTURE))  # as `pip install -e tests/fixtures/one_module_pkg` would make it importable
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from app import build_app  # noqa: E402

USER_PACKAGE = {
    "rewardpipe": {
        "reward": "one_module_reward:BREVITY",
        "single_turn_reward": "one_module_reward:BREVITY",
        "packages": [str(FIXTURE)],
    }
}


def _merged(extra: dict | None) -> dict | None:
    """cdk.json's rewardpipe settings with ``extra`` over them (a context value replaces the whole object)."""
    if not extra:
        return None
    import json

    base = json.loads((ROOT / "cdk.json").read_text())["context"].get("rewardpipe", {})
    # the built-in reward and its weights give way to the package's reward
    base = {k: v for k, v in base.items() if k not in ("reward_name", "reward_weights")}
    return {"rewardpipe": {**base, **extra["rewardpipe"]}}


def synth_seconds(context: dict | None) -> float:
    outdir = tempfile.mkdtemp(prefix="rewardpipe-bench-synth-")
    try:
        start = time.perf_counter()
        app, _stack = build_app(context, outdir=outdir)
        app.synth()
        return time.perf_counter() - start
    finally:
        shutil.rmtree(outdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-ratio", type=float, default=1.3)
    args = parser.parse_args(argv)
    user = _merged(USER_PACKAGE)
    first = synth_seconds(None), synth_seconds(user)
    print(f"warm-up: without {first[0]:.2f} s, with the package {first[1]:.2f} s (fills the layer cache if empty)")
    without, with_package = [], []
    for _ in range(args.runs):
        without.append(synth_seconds(None))
        with_package.append(synth_seconds(user))
    base, ours = statistics.median(without), statistics.median(with_package)
    ratio = ours / base
    print(f"synth without a user package: median {base:.2f} s of {', '.join(f'{t:.2f}' for t in without)}")
    print(
        f"synth with a one-module user package (cached layer): median {ours:.2f} s of "
        f"{', '.join(f'{t:.2f}' for t in with_package)}"
    )
    print(f"ratio {ratio:.2f} (limit {args.max_ratio})")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0 if ratio <= args.max_ratio else 1


if __name__ == "__main__":
    sys.exit(main())
