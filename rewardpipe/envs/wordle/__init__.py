"""The built-in wordle environment, laid out as any user's environment package is:

* :mod:`.tasks`: the task row model (``WordleTask``: flat rows and the AWS sample's rows) and the bundled set;
* :mod:`.game`: the rules (the guess format, the feedback with Wordle's repeated-letter rules, word lists);
* :mod:`.state`: the episode state; :mod:`.environment`: the environment (``Wordle``, ``ENVIRONMENT``);
* :mod:`.scenarios`: scripted players for doctor and ``--policy scripted``;
* :mod:`.reward`: the reward (``WORDLE``).

No sandbox: the environment never asks for code to run.
"""

from rewardpipe.envs.wordle.environment import ENVIRONMENT, POLICY_SYSTEM_PROMPT, Wordle
from rewardpipe.envs.wordle.game import WORDS_FILE, feedback, load_words, parse_guess
from rewardpipe.envs.wordle.reward import WORDLE
from rewardpipe.envs.wordle.state import TurnResult, WordleState
from rewardpipe.envs.wordle.tasks import BUNDLED_TASKS, WordleTask

__all__ = [
    "BUNDLED_TASKS",
    "ENVIRONMENT",
    "POLICY_SYSTEM_PROMPT",
    "WORDLE",
    "WORDS_FILE",
    "TurnResult",
    "Wordle",
    "WordleState",
    "WordleTask",
    "feedback",
    "load_words",
    "parse_guess",
]
