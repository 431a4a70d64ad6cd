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
