"""Moved: the ask-before-coding environment's simulator live in :mod:`rewardpipe.envs.ask_before_coding.simulator`
(one folder per environment). This name still imports the same module, for code written against it."""

import sys

from rewardpipe.envs.ask_before_coding import simulator as _moved

sys.modules[__name__] = _moved
