"""Amazon Nova Forge multi-turn "bring your own orchestration" (``rollout.delegate: true``).

* :mod:`.protocol` — the v0 message shapes (pydantic) and the pure mappings: rollout request → task and
  GRPO group, turn → generate request, generate response → assistant turn, scored record → rollout
  response (aggregate mapped into ``rewards.range``) and report envelope, error → ``error_reward`` policy.
* :mod:`.bridge` — the four roles the deployed bridge plays (intake, turn forwarder, response router,
  responder, plus the budget sweeper), written against injected boto3-style clients and a Store, so the
  Lambda handlers, the moto end-to-end test and ``rewardpipe nova simulate`` run the same code.
"""
