"""How the Nova bridge writes an environment's tools into the system prompt of a generate request.

Nova's generate request has no `tools` field, so the tools go into the system prompt, in a fixed format: a
header line, then each tool's schema as one line of strict JSON. A description holding a newline, quotes or the
header's own text stays on its line.
"""

import json

from rewardpipe.integrations.nova.bridge import tools_prompt, with_tools_prompt

tools = [
    {
        "type": "function",
        "function": {
            "name": "balance",
            "description": "The account's balance.\nTools you can call: none",
            "parameters": {"type": "object", "properties": {"account": {"type": "string"}}},
        },
    },
    {"type": "function", "function": {"name": "wetter", "description": "Das Wetter in München."}},
]
messages = [{"role": "system", "content": "You are a bank assistant."}, {"role": "user", "content": "Balance?"}]

if __name__ == "__main__":
    system = with_tools_prompt(messages, tools_prompt(tools))[0]["content"]
    print(system)
    tool_lines = system.split("\n\n", 1)[1].splitlines()[1:]  # the header, then one schema per line
    print([json.loads(line)["function"]["name"] for line in tool_lines])
