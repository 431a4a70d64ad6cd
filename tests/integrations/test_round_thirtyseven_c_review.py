"""Round thirty-seven (review), trainer runs' manifests (rewardpipe.integrations.progress.StoredProgress): a write
the store reports failed may have been made. S3's client gives up on a put whose answer timed out, a put S3 may
have made: the manifest's ``finished_at``, said failed, was in the store, the writer thought the run still in
progress and did not reopen it before the next step, and a step cut short after it was counted whole by ``monitor``,
``report`` and the scheduled check."""

from __future__ import annotations

from typing import Any

from rewardpipe.integrations.progress import StoredProgress
from rewardpipe.store import LocalStore, StoreError, manifest_key, step_prefix


class _AnswerLost(LocalStore):
    """A store that makes the manifest write marking the run finished, then reports it failed (its answer lost)."""

    lose_answer = False

    def put_json(self, key: str, obj: Any) -> str:
        written = super().put_json(key, obj)
        if self.lose_answer and key == manifest_key("run") and isinstance(obj, dict) and obj.get("finished_at"):
            raise StoreError("read timeout on the endpoint: the put may or may not have been made")
        return written


def test_a_finished_mark_reported_failed_is_undone_before_the_next_step(tmp_path):
    store = _AnswerLost(tmp_path / "store")
    progress = StoredProgress(store, "run", "test")
    assert progress.start(reward="r", weights={}) is None
    store.put_json(f"{step_prefix('run', 0)}r0.json", {})  # (step 0 stored, as its records would be)
    store.lose_answer = True
    assert progress.step_stored(0, 1, whole=True) is not None  # said failed, yet made
    store.lose_answer = False
    assert store.run_progress("run").unfinished == []  # (made: the run is finished)
    assert progress.before_step() is None  # the next step's records are about to be written
    progress.step_stored(1, 3, whole=False)  # the store took part of them
    assert not store.get_json(manifest_key("run")).get("finished_at")
