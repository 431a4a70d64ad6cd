"""The built-in tool-call environment, laid out as any user's environment package is:

* :mod:`.tools`: tools as typed plain functions (``@tool``), their JSON schemas and strict argument checks;
* :mod:`.shop`: the bundled world (bank accounts and an inventory) and its six tools (``SHOP``);
* :mod:`.calls`: reading a turn's calls (structured ``tool_calls`` or ``<tool_call>`` text) or its answer;
* :mod:`.tasks`: the task row model (``ToolCallTask``) and the bundled set; :mod:`.state`: the episode state;
* :mod:`.environment`: the environment (``ToolCallEnvironment``, ``ENVIRONMENT``);
* :mod:`.scenarios`: scripted players for doctor and ``--policy scripted``; :mod:`.reward`: ``TOOL_CALL``.

No sandbox: the tools are trusted, pure functions; nothing the model writes is executed.
"""

from rewardpipe.envs.tool_call.environment import ENVIRONMENT, POLICY_SYSTEM_PROMPT, ToolCallEnvironment
from rewardpipe.envs.tool_call.reward import TOOL_CALL
from rewardpipe.envs.tool_call.shop import SHOP
from rewardpipe.envs.tool_call.state import CallLog, ToolCallState
from rewardpipe.envs.tool_call.tasks import BUNDLED_TASKS, PlannedCall, ToolCallTask
from rewardpipe.envs.tool_call.tools import Tool, Toolset, tool

__all__ = [
    "BUNDLED_TASKS",
    "ENVIRONMENT",
    "POLICY_SYSTEM_PROMPT",
    "SHOP",
    "TOOL_CALL",
    "CallLog",
    "PlannedCall",
    "Tool",
    "ToolCallEnvironment",
    "ToolCallState",
    "ToolCallTask",
    "Toolset",
    "tool",
]
