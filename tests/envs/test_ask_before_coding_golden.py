"""ask_before_coding became an environment without changing a byte of what it stores.

The fixture was recorded by ``tests/envs/golden_runs.py`` on the code before the refactor (the commit that
added it): the demo run, a short-turn-limit run with another seed, ``score`` of the demo's conversations
and ``run --policy replay`` of them. The same commands are run again here and every record and transcript
must be byte-identical (only the execution's wall-clock ``exec_ms`` is normalised). Manifests moved to
v2 on purpose; everything a v1 manifest said must read back unchanged from the v2 one.
"""

from __future__ import annotations

import json

import pytest

from tests.envs.golden_runs import load_fixture, produce

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return load_fixture(), produce(tmp_path_factory.mktemp("golden"))


def test_the_same_objects_are_stored(runs):
    before, after = runs
    assert sorted(after) == sorted(before)


def test_every_record_and_transcript_is_byte_identical(runs):
    before, after = runs
    changed = [key for key in before if not key.endswith("/manifest.json") and after.get(key) != before[key]]
    assert not changed, (
        f"{len(changed)} object(s) differ, e.g. {changed[0]}:\n{before[changed[0]]}\n{after.get(changed[0])}"
    )
    assert sum(1 for key in before if "/transcripts/" in key) > 1000  # the comparison is not vacuous


def test_the_v2_manifest_says_everything_the_v1_manifest_said(runs):
    before, after = runs
    for key in (k for k in before if k.endswith("/manifest.json")):
        old, new = json.loads(before[key]), json.loads(after[key])
        assert old["schema"] == "rewardpipe.run-manifest/v1" and new["schema"] == "rewardpipe.run-manifest/v2"
        assert {k: v for k, v in new.items() if k in old and k != "schema"} == {
            k: v for k, v in old.items() if k != "schema"
        }, key
        assert new["environment"] == "ask_before_coding" and new["components"]["correctness"]["role"] == "outcome"


def test_score_of_the_demo_conversations_writes_the_records_the_demo_run_wrote(runs):
    """``score`` wrote records without the end reason and the environment's metrics ``run`` writes (and
    transcripts without the end reason): re-recorded in the fixture when that was fixed. Scored again, every
    conversation of the demo run, turn limits included, gives the demo's own record under its own run id."""
    _, after = runs
    scored = {k: json.loads(v) for k, v in after.items() if k.startswith("runs/scored/step=")}
    end_reasons = set()
    for key, record in scored.items():
        demo = json.loads(after[key.replace("runs/scored/", "runs/demo/", 1)])
        assert record["run_id"] == "scored"
        assert {**record, "run_id": "demo"} == demo, key
        end_reasons.add(record["metrics"]["end_reason"])
    assert len(scored) == 384 and end_reasons == {"committed", "turn_limit"}
