"""The base of every rewardpipe pydantic model: its validator is built when it is first used.

Building a model's validator at class definition is the larger part of what importing a module of models
costs, and the first one built also imports pydantic's plugin loader, which loads ``importlib.metadata``
(and with it ``email``, ``zipfile``, ``csv``) only to find that plugins are disabled. A Lambda handler
imports many models its invocation never validates (the Nova bridge's, the run manifest, the other steps'
requests), and every one of them was built during its cold start. Deferred, each model is built once per
process, by its first validation or serialisation, exactly as it would have been at import; nothing about
what it accepts changes.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class DeferredModel(BaseModel):
    """``BaseModel`` with ``defer_build``: subclasses' ``model_config`` merges with this one."""

    model_config = ConfigDict(defer_build=True)
