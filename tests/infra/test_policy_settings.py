"""The policy endpoint's HTTP timeout is a setting, the time a conversation Lambda keeps for an LLM turn is
derived from it, and a policy Lambda too short for one turn fails the synth; the default policy mode is the
one docs/aws.md states (issue 18 item 4)."""

from __future__ import annotations

import http.server
import math
import re
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from rewardpipe.aws.settings import POLICY_BACKOFF_S, Settings, llm_turn_reserve_s
from stacks.config import CONVERSATION_HEADROOM_S, SettingsError, load_settings
from tests.http_server import QuietHTTPServer

pytestmark = pytest.mark.xdist_group("cdk")
ROOT = Path(__file__).resolve().parents[2]


def _conversation_env(template: dict) -> list[dict]:
    return [
        r["Properties"]["Environment"]["Variables"]
        for k, r in template["Resources"].items()
        if r["Type"] == "AWS::Lambda::Function"
        and k.startswith(("RolloutWorkflowStartEpisode", "RolloutWorkflowConverse"))
    ]


def test_the_conversation_functions_get_the_endpoints_timeout_and_retries(synth):
    envs = _conversation_env(synth.template)
    assert len(envs) == 2
    assert all(e["POLICY_HTTP_TIMEOUT_S"] == "60" and e["POLICY_HTTP_RETRIES"] == "2" for e in envs)


def test_a_long_generation_is_one_setting_away(tmp_path):
    """16,384 tokens at ~40 tokens/s need ~410 s: one attempt of 600 s and a 900 s policy Lambda."""
    from app import build_app

    context = {
        "rewardpipe": {
            "stack_name": "RewardPipeLong",
            "policy": {"http_timeout_s": 600, "http_retries": 0},
            "lambda": {"policy_timeout_s": 900},
        }
    }
    app, stack = build_app(context=context, outdir=str(tmp_path))
    template = app.synth().get_stack_artifact(stack.artifact_id).template
    envs = _conversation_env(template)
    assert all(e["POLICY_HTTP_TIMEOUT_S"] == "600" and e["POLICY_HTTP_RETRIES"] == "0" for e in envs)
    timeouts = {
        r["Properties"]["Timeout"]
        for k, r in template["Resources"].items()
        if k.startswith(("RolloutWorkflowStartEpisode", "RolloutWorkflowConverse"))
        and r["Type"] == "AWS::Lambda::Function"
    }
    assert timeouts == {900}


def test_the_reserve_is_every_attempt_timing_out_plus_the_back_off_and_the_wrap_up():
    assert llm_turn_reserve_s(60, 2) == 3 * 60 + POLICY_BACKOFF_S * (1 + 2) + 5
    assert llm_turn_reserve_s(600, 0) == 605
    settings = Settings.from_env({"POLICY_HTTP_TIMEOUT_S": "120", "POLICY_HTTP_RETRIES": "1"})
    assert settings.llm_turn_reserve_s == llm_turn_reserve_s(120, 1) == 2 * 120 + POLICY_BACKOFF_S + 5


@pytest.mark.parametrize("timeout, retries", [(60, 2), (120, 2), (200, 1), (600, 0), (300, 3)])
def test_a_policy_lambda_too_short_for_one_llm_turn_fails_the_synth_at_the_exact_bound(timeout, retries):
    needed = math.ceil(llm_turn_reserve_s(timeout, retries)) + CONVERSATION_HEADROOM_S
    policy = {"http_timeout_s": timeout, "http_retries": retries}
    if needed <= 900:
        assert load_settings({"policy": policy, "lambda": {"policy_timeout_s": needed}})
    with pytest.raises(SettingsError) as info:
        load_settings({"policy": policy, "lambda": {"policy_timeout_s": min(needed - 1, 900)}})
    message = str(info.value)
    assert "lambda.policy_timeout_s" in message and "policy.http_timeout_s" in message
    assert f"at least {needed}" in message


def test_the_default_settings_hold_an_llm_turn():
    settings = load_settings({})
    assert settings.functions.policy_timeout_s >= settings.policy.llm_turn_reserve_s + CONVERSATION_HEADROOM_S


def test_the_pause_rule_keeps_the_derived_reserve_not_a_fixed_one():
    """With a 10 s endpoint timeout and 2 retries a turn may take 36.5 s: a Lambda with 37 s left starts it (the
    old fixed 90 s reserve paused it), one with 36 s left pauses."""
    from rewardpipe.aws.rollout import _pause_rule

    settings = Settings.from_env({"POLICY_HTTP_TIMEOUT_S": "10", "POLICY_HTTP_RETRIES": "2"})
    state = SimpleNamespace(next_action="policy")
    assert _pause_rule("openai", settings, lambda: 37.0)(state) is False
    assert _pause_rule("openai", settings, lambda: 36.0)(state) is True
    long = Settings.from_env({"POLICY_HTTP_TIMEOUT_S": "300", "POLICY_HTTP_RETRIES": "1"})
    assert _pause_rule("openai", long, lambda: 600.0)(state) is True  # 2 × 300 s + back-off + wrap-up > 600 s


class _SlowEndpoint(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # http.server's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        time.sleep(20)  # (far past the client's 1 s, so that a bound between them holds on a loaded machine)
        try:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"choices": [{"message": {"content": "late"}}]}')
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up first, as it should

    def log_message(self, *args):
        pass


def test_the_policy_client_applies_the_deployments_timeout_and_retries():
    """build_policy's endpoint client gives up after the configured timeout (1 s here, against an endpoint that
    answers after 20 s) and retries as configured, instead of the fixed 60 s."""
    from rewardpipe.aws.rollout import PolicySpec, build_policy
    from rewardpipe.openai_client import EndpointError

    server = QuietHTTPServer(("127.0.0.1", 0), _SlowEndpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        settings = Settings.from_env({"POLICY_HTTP_TIMEOUT_S": "1", "POLICY_HTTP_RETRIES": "0"})
        snapshot = SimpleNamespace(policy=PolicySpec(mode="openai", base_url=url, model="m"), state=None)
        policy = build_policy(snapshot, settings)
        assert policy.client.max_retries == 0 and policy.client._http.timeout.read == 1
        started = time.monotonic()
        with pytest.raises(EndpointError, match="after 1 attempts"):
            policy.client.complete([{"role": "user", "content": "hi"}])
        assert time.monotonic() - started < 10
        policy.close()
    finally:
        server.shutdown()
        server.server_close()


def test_the_default_policy_mode_is_the_one_the_docs_state():
    from rewardpipe.aws.rollout import PolicySpec, RolloutInput

    stated = re.search(r"`policy\.mode` \(default `(\w+)`[;)]", (ROOT / "docs" / "aws.md").read_text())
    assert stated, "docs/aws.md no longer states policy.mode's default"
    assert PolicySpec.model_fields["mode"].default == stated.group(1) == "callback"
    assert PolicySpec.model_validate({}).mode == "callback"
    started = RolloutInput.model_validate(
        {"run": "r", "group": "g", "rollout": "x", "task_key": "tasks/t.json", "policy": {"temperature": 0.5}}
    )
    assert started.policy.mode == "callback"


def test_replay_turns_without_a_mode_are_refused_not_silently_ignored():
    from pydantic import ValidationError

    from rewardpipe.aws.rollout import PolicySpec

    with pytest.raises(ValidationError, match=r"for policy\.mode 'replay'"):
        PolicySpec.model_validate({"turns": ["a", "b"]})
    assert PolicySpec.model_validate({"mode": "replay", "turns": ["a"]}).turns == ["a"]
