"""Moved: the ask-before-coding reward lives with its environment, in
:mod:`rewardpipe.envs.ask_before_coding.reward`. This name still imports the same module."""

import sys

from rewardpipe.envs.ask_before_coding import reward as _moved

sys.modules[__name__] = _moved
