"""A turn-level shaping term: a value per model turn kept in the state, summed up by a component."""

from pydantic import Field

from rewardpipe import EpisodeState, Reward, component
from rewardpipe.testing import score


class HuntState(EpisodeState):
    closer: list[int] = Field(default_factory=list)  # one per model turn: 1 if it got closer, else 0
    # in on_policy_turn: return state.evolve(closer=[*state.closer, int(got_closer)], next_action=...)


@component(range=(0, 1), role="shaping", weight=0.3)
def moves_closer(state: HuntState) -> float:
    """The share of the model's moves that got it closer."""
    return sum(state.closer) / len(state.closer) if state.closer else 0.0


if __name__ == "__main__":
    reward = Reward("hunt", [moves_closer])
    for closer in ([1, 0, 1, 1], [0, 0], []):
        print(closer, score(reward, completion="N", state=HuntState(closer=closer)).components)
