"""One construct per concern: storage, network, code runner, rollout workflow, monitoring, single-turn reward."""
