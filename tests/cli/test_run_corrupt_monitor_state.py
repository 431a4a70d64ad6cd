"""`run` over a run id whose monitor state is corrupt: reported, kept aside, a fresh state; no crash."""

import json

from rewardpipe.monitoring import MonitorState, state_key
from rewardpipe.store import LocalStore
from tests.cli.conftest import BUNDLED_TASKS


def test_run_with_a_corrupt_monitor_state_reports_it_and_starts_afresh(cli, tmp_path):
    out = tmp_path / "store"
    store = LocalStore(out)
    store.put_bytes(state_key("r"), b"\x00{truncated")
    result = cli(
        "run",
        "--tasks",
        BUNDLED_TASKS,
        "--steps",
        1,
        "--group-size",
        4,
        "--groups-per-step",
        4,
        "--out",
        out,
        "--run-id",
        "r",
        "--json",
    )
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    assert "unusable monitor state" in result.output and "started a fresh state" in result.output
    (aside,) = [k for k in store.list_keys("runs/r/monitor/") if "corrupt" in k]
    assert store.get_bytes(aside) == b"\x00{truncated"
    assert MonitorState.from_dict(store.get_json(state_key("r"))).checked == [(0, 0)]
    assert json.loads(result.output[result.output.index("{") :])["steps"][0]["step"] == 0
