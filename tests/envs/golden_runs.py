"""The ask-before-coding runs whose stored bytes must not change when the built-in becomes an environment.

:func:`produce` runs the CLI (in process) over the bundled tasks, the way ``make demo`` does and a few more
ways (another seed with a short turn limit, so turn limits and loops occur; ``score`` of the recorded
conversations; ``run --policy replay`` of them), and returns every stored object of those runs as
``{store key: normalised bytes}``. ``python -m tests.envs.golden_runs`` wrote the committed fixture, on the
code before ask_before_coding became an environment (commit "Golden ask-before-coding runs recorded before
the environment refactor"); rewrite it only for a change that means to change what is stored. The
``scored`` run's records and transcripts were re-recorded when ``score`` began writing the end reason and
the environment's metrics as ``run`` does.

Normalised (the only fields that are legitimately different from one run to the next): the manifest's
``started_at``/``finished_at`` timestamps, ``versions`` (the Python patch level) and the paths of the clone
and of the temporary folder, and the execution's ``exec_ms`` wall-clock duration in each record's metrics.
Everything else is compared byte for byte (manifests, which moved to v2 on purpose, by what v1 said).
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "rewardpipe" / "data" / "tasks.jsonl"
FIXTURE = Path(__file__).with_name("fixtures") / "ask_before_coding_golden.json.gz"

# (run id, arguments after `rewardpipe`); {store}, {tasks} and {rollouts} are filled in.
COMMANDS = (
    (
        "demo",
        [
            "run",
            "--tasks",
            "{tasks}",
            "--policy",
            "scripted",
            "--group-size",
            "8",
            "--steps",
            "4",
            "--collapse-from-step",
            "3",
            "--out",
            "{store}",
            "--run-id",
            "demo",
        ],
    ),
    (
        "short",
        [
            "run",
            "--tasks",
            "{tasks}",
            "--policy",
            "scripted",
            "--group-size",
            "4",
            "--steps",
            "2",
            "--groups-per-step",
            "12",
            "--seed",
            "7",
            "--max-turns",
            "3",
            "--out",
            "{store}",
            "--run-id",
            "short",
        ],
    ),
    ("scored", ["score", "{rollouts}", "--tasks", "{tasks}", "--out", "{store}", "--run-id", "scored"]),
    (
        "replayed",
        [
            "run",
            "--tasks",
            "{tasks}",
            "--policy",
            "replay",
            "--rollouts",
            "{rollouts}",
            "--out",
            "{store}",
            "--run-id",
            "replayed",
        ],
    ),
)


def _normalise(key: str, raw: bytes, work: Path) -> str:
    if key.endswith("/manifest.json"):
        manifest = json.loads(raw)
        for field in ("started_at", "finished_at", "versions"):
            manifest[field] = "<normalised>"
        # where the clone and the temporary folder are
        text = json.dumps(manifest, sort_keys=True)
        return text.replace(str(work), "<work>").replace(str(ROOT), "<root>")
    text = raw.decode("utf-8")
    if "/transcripts/" not in key and '"exec_ms":' in text:
        record = json.loads(text)
        record["metrics"]["exec_ms"] = "<normalised>"
        # re-dumped exactly as pydantic writes a record (compact, insertion order)
        text = json.dumps(record, separators=(",", ":"), ensure_ascii=False)
    return text


def _rollouts_of(store: Path, run_id: str, out: Path) -> None:
    """The recorded conversations of ``run_id`` as a rollouts file (what `score` and replay read)."""
    lines = []
    for path in sorted((store / "runs" / run_id / "transcripts").rglob("*.json")):
        doc = json.loads(path.read_text())
        lines.append(json.dumps({k: doc[k] for k in ("rollout_id", "group_id", "task_id", "step", "messages")}))
    out.write_text("\n".join(lines) + "\n")


def produce(work: Path) -> dict[str, str]:
    from typer.testing import CliRunner

    from rewardpipe.cli import app

    store, rollouts = work / "store", work / "rollouts.jsonl"
    runner = CliRunner()
    for run_id, template in COMMANDS:
        if run_id == "scored":
            _rollouts_of(store, "demo", rollouts)
        args = [a.format(store=store, tasks=TASKS, rollouts=rollouts) for a in template]
        result = runner.invoke(app, args)
        if result.exit_code != 0:
            raise AssertionError(f"rewardpipe {' '.join(args)} exited {result.exit_code}: {result.output}")
    objects = {}
    for path in sorted(store.rglob("*.json")):
        key = path.relative_to(store).as_posix()
        if compared(key):
            objects[key] = _normalise(key, path.read_bytes(), work)
    return objects


def compared(key: str) -> bool:
    """Whether ``key`` is one of the scored rollouts' objects this fixture holds still: not the monitor's
    own output (alarms, its state and delivery ledger) nor a run's bookkeeping of its finished steps (issue
    22's outbox and completion markers), which belong to the reliability work, not to this refactor."""
    return not ("/alarms/" in key or key.endswith("monitor-state.json") or "/monitor/" in key or "/finished/" in key)


def load_fixture() -> dict[str, str]:
    return {key: text for key, text in json.loads(gzip.decompress(FIXTURE.read_bytes())).items() if compared(key)}


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        produced = produce(Path(tmp))
    FIXTURE.parent.mkdir(exist_ok=True)
    FIXTURE.write_bytes(gzip.compress(json.dumps(produced, sort_keys=True).encode(), mtime=0))
    print(f"{len(produced)} objects written to {FIXTURE}", file=sys.stderr)
