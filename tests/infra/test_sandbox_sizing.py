"""Every host that runs model code has room for its handler and the sandboxes it is sized for."""

from __future__ import annotations

import pytest

from stacks.config import load_settings


@pytest.mark.parametrize(
    "raw, fragment",
    [
        # 512 MB once gave each of the two single-turn sandboxes a 128 MB floor on top of 384 MB of handler:
        # 640 MB of caps on a 512 MB Lambda, so two memory-hungry samples got the whole batch OOM-killed.
        ({"lambda": {"single_turn_memory_mb": 512}}, "lambda.single_turn_memory_mb = 512 MB"),
        ({"lambda": {"code_runner_memory_mb": 384}}, "lambda.code_runner_memory_mb = 384 MB"),
        ({"fargate": {"memory_mib": 256}}, "fargate.memory_mib = 256 MB"),
    ],
)
def test_a_host_too_small_for_its_sandboxes_fails_the_synth_naming_the_setting(raw, fragment):
    from stacks.config import SettingsError

    with pytest.raises(SettingsError) as info:
        load_settings(raw)
    assert fragment in str(info.value) and "use at least" in str(info.value)


@pytest.mark.parametrize("memory_mb, workers", [(640, 2), (1769, 2), (3538, 2), (10240, 5)])
def test_the_sandbox_caps_and_the_handler_fit_every_allowed_single_turn_size(memory_mb, workers):
    from stacks.config import HANDLER_HEADROOM_MB, MIN_SANDBOX_MB
    from stacks.constructs.common import sandbox_memory_mb
    from stacks.constructs.single_turn import MB_PER_VCPU

    settings = load_settings({"lambda": {"single_turn_memory_mb": memory_mb}})
    assert max(2, settings.functions.single_turn_memory_mb // MB_PER_VCPU) == workers
    cap = sandbox_memory_mb(memory_mb, workers)
    assert cap >= MIN_SANDBOX_MB and HANDLER_HEADROOM_MB + workers * cap <= memory_mb
