"""Moved: the ask-before-coding environment's questions live in :mod:`rewardpipe.envs.ask_before_coding.questions`
(one folder per environment). This name still imports the same module, for code written against it."""

import sys

from rewardpipe.envs.ask_before_coding import questions as _moved

sys.modules[__name__] = _moved
