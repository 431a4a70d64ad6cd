"""Round thirty-two, the stack as an operator meets it: deploy-time settings that CloudFormation or SNS would refuse
(or accept and never deliver to) fail at synth with a sentence naming the setting."""

from __future__ import annotations

import pytest

from stacks.config import SettingsError, load_settings


class TestTheAlarmEmailIsOneSnsCanDeliverTo:
    """Before: ``alarms.email`` was checked with a loose pattern only, so an address no mail system takes (over 254
    characters, a local part over 64, a control character in it) passed the synth; the subscription then failed at
    deploy, or was created and its confirmation never arrived: an alarm topic nobody is subscribed to."""

    @pytest.mark.parametrize(
        "email",
        [
            "ops@" + "a" * 250 + ".com",  # over 254 characters (RFC 5321's path limit)
            "o" * 65 + "@example.com",  # a local part over 64
            "ops\x00@example.com",  # a control character
            "ops@exa\x7fmple.com",
        ],
        ids=["too-long", "long-local-part", "nul", "del"],
    )
    def test_an_address_no_mail_system_takes_fails_the_synth_naming_the_setting(self, email):
        with pytest.raises(SettingsError, match=r"rewardpipe\.alarms\.email = .*: an e-mail address") as caught:
            load_settings({"alarms": {"email": email}})
        assert "\x00" not in str(caught.value) and "\x7f" not in str(caught.value)

    def test_an_ordinary_address_is_taken_as_before(self):
        longest = "o" * 64 + "@" + "e" * 185 + ".com"
        assert len(longest) == 254
        assert load_settings({"alarms": {"email": longest}}).alarms.email == longest
        plain = "ops+alarms@example.co.uk"
        assert load_settings({"alarms": {"email": plain}}).alarms.email == plain


def _referenced(node, found: set[str]) -> set[str]:
    """Logical ids ``node`` references (Ref, Fn::GetAtt)."""
    if isinstance(node, dict):
        if "Ref" in node:
            found.add(node["Ref"])
        if "Fn::GetAtt" in node:
            found.add(node["Fn::GetAtt"][0])
        for value in node.values():
            _referenced(value, found)
    elif isinstance(node, list):
        for value in node:
            _referenced(value, found)
    return found


@pytest.mark.xdist_group("cdk")
@pytest.mark.parametrize("with_nova", [False, True], ids=["default", "nova-bridge"])
def test_the_dashboards_alarm_status_shows_every_alarm_of_the_stack(with_nova):
    """Before: the dashboard's alarm widget was built with the monitoring construct's alarms only, so with the Nova
    bridge its 25 alarms (near-timeout, its functions' errors and throttles, its dead-letter queues) were on no
    dashboard: an operator watching it saw all clear while the bridge was in ALARM."""
    from tests.aws import harness

    template = harness.synthesized(harness.NOVA_BRIDGE_CONTEXT if with_nova else "").template
    resources = template["Resources"]
    alarms = {k for k, v in resources.items() if v["Type"] == "AWS::CloudWatch::Alarm"}
    (dashboard,) = [v for v in resources.values() if v["Type"] == "AWS::CloudWatch::Dashboard"]
    shown = _referenced(dashboard["Properties"]["DashboardBody"], set()) & alarms
    names = {resources[k]["Properties"]["AlarmName"] for k in alarms - shown}
    assert not names, f"alarms on no dashboard widget: {sorted(names)}"
    assert any("nova" in resources[k]["Properties"]["AlarmName"] for k in shown) == with_nova
