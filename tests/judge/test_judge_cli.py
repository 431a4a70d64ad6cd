"""`rewardpipe score --reward REF` with a user's judged reward: the endpoint comes from the environment
variables, the batch's judge calls run concurrently, a sample the judge cannot score is an error record with
the reason (never 0), and the API key appears nowhere in the output or the store."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from rewardpipe.cli import app
from rewardpipe.judges import ENV_API_KEY, ENV_BASE_URL, ENV_MODEL
from tests.judge.fake_judge import FakeJudge

REWARD_MODULE = """
from rewardpipe import Reward, component, llm_judge


@component(range=(0.0, 1.0), role="shaping")
def short(completion):
    return 1.0 if len(completion) < 80 else 0.0


REWARD = Reward("judged", [llm_judge("matches", "Does the answer give {reference}?"), short])
"""


def grade(completion, tag, body):
    if completion == "..." or completion.startswith("[withheld"):
        return "I cannot tell."  # no verdict, whatever the response says: an error record
    return f"VERDICT {tag}: {10 if '42' in completion else 0}"


def test_score_with_a_judged_user_reward(tmp_path, monkeypatch):
    (tmp_path / "judged_reward.py").write_text(REWARD_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    lines = [
        {
            "rollout_id": f"r{i}",
            "group_id": "g1",
            "reference": "42",
            "messages": [{"role": "user", "content": "6 * 7?"}, {"role": "assistant", "content": text}],
        }
        for i, text in enumerate(["It is 42.", "It is 41.", "...", "42, since 6 * 7 = 42."])
    ]
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with FakeJudge(grade, delay_s=0.05) as server:
        monkeypatch.setenv(ENV_BASE_URL, server.url)
        monkeypatch.setenv(ENV_MODEL, "judge")
        monkeypatch.setenv(ENV_API_KEY, "sk-cli-secret")
        out = CliRunner().invoke(
            app,
            ["score", str(samples), "--reward", "judged_reward:REWARD", "--out", str(tmp_path / "store"), "--json"],
            catch_exceptions=False,
        )
        assert server.max_in_flight > 1  # the batch's calls ran together
        assert {r["auth"] for r in server.requests} == {"Bearer sk-cli-secret"}
    assert out.exit_code == 0, out.output
    records = {r["rollout_id"]: r for r in map(json.loads, out.output.splitlines())}
    assert [records[f"r{i}"]["components"]["matches"] for i in (0, 1, 3)] == [1.0, 0.0, 1.0]
    failed = records["r2"]
    assert failed["status"] == "error" and failed["error"]["kind"] == "component_unavailable"
    assert failed["components"]["matches"] is None and failed["aggregate"] is None
    assert "VERDICT" in failed["error"]["message"]
    stored = "".join(p.read_text() for p in (tmp_path / "store").rglob("*") if p.is_file())
    assert "sk-cli-secret" not in out.output + stored
