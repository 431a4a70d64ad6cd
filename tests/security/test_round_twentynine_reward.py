"""Round twenty-nine on the reward and environment side, as the model (and an honest model scored 0) would meet it.

R1. An environment's opening messages had no size bound (round twenty-eight left it open): ``start()`` building its
prompt from a file or a tool's first dump put millions of characters whole into the state, the policy's request, the
record's transcript and the state paused on AWS (only later observations were cut). They are cut to
``max_observation_chars`` the same way, with the same note, and the record counts them.

R2. A Python block whose code starts with a byte-order mark after the blank lines the fence left, or before the
indentation of a fence in a list item, did not compile (``invalid non-printable character U+FEFF``): a right answer
copied from a file saved with a BOM scored 0. The mark before the block's first line of code goes, as Python drops
it at the start of a file; one inside the code stays.

R3. The record's ``env_observations_cut`` counted every message holding the cut note's words in its last 200
characters: a model naming a tool ``[rewardpipe cut this message: x]`` (the tool_call environment's error quotes the
name) made the record report observations cut that never were, and an echoing simulator did the same. Only a message
ending in the note exactly, cut where the environment's limit says, counts.

R4. tool_call compared a final answer as written: ``<answer>**12000**</answer>`` (bold, as models mark what was
asked), ``<answer>`12000`</answer>``, full-width digits and a zero-width space scored the goal missed against
``12000``. Emphasis, code marks and quotes around the whole answer, full-width forms and invisible format characters
are read through; what lies between is compared as before (``7²`` is not ``72``).

R5. wordle read a guess set off the same ways (``<guess>**crane**</guess>``, a code span, quotes, a final period,
full-width letters, a zero-width space) as a malformed turn: no feedback, no guess, ``format_ok`` down, though the
word was five plain letters. It is read as tool_call reads an answer (one function for both); still five letters.

R6. A closing fence could be indented any amount: a right answer whose docstring shows a Markdown example (its
fences indented with the docstring) was cut at the example's first fence and did not compile. A closing fence is
indented at most three columns more than the opening one, as Markdown has it; a turn that closes no block that way
(a writer indenting every closing fence further) still closes at any fence line, found in one scan.
"""

from __future__ import annotations

import pytest

from rewardpipe import TaskRow
from rewardpipe.environment import MAX_OBSERVATION_CHARS
from rewardpipe.episode import episode_metrics, observations_cut, run_episode, start_episode
from rewardpipe.models import Message
from rewardpipe.parsing import TurnKind, parse_turn
from tests.security.test_round_twentyeight_reward import _Echoes, _episode
from tests.security.test_round_twentythree_reward import _call, _tool_play, _tool_task

# -- R1: the opening messages are bounded like every observation ---------------------------------------------------


class _LongOpening(_Echoes):
    """Opens with a prompt of ``opening`` characters (a task built from a file); answers as round twenty-eight's."""

    opening = 10

    def start(self, task):
        messages = [Message(role="system", content="s"), Message(role="user", content="y" * self.opening)]
        return self.state_model(messages=messages)


@pytest.mark.parametrize("size", [10, 3 * MAX_OBSERVATION_CHARS])
def test_an_opening_message_is_bounded_like_every_observation(size):
    """A huge opening is cut (the policy is shown the bound and the note) and the record counts it; one within the
    bound is as it was."""
    env = _LongOpening()
    env.opening = size
    record, policy = _episode(env)
    huge = size > MAX_OBSERVATION_CHARS
    assert record.status == "scored"
    assert (MAX_OBSERVATION_CHARS < policy.longest < MAX_OBSERVATION_CHARS + 300) if huge else policy.longest == size
    assert record.metrics.get("env_observations_cut") == (1 if huge else None)


def test_an_opening_cut_names_start_and_the_environments_bound():
    env = _LongOpening()
    env.max_observation_chars = 50
    env.opening = 1234
    state = start_episode(TaskRow(task_id="t", prompt="p"), env=env, run_id="r", step=0, group_id="g", rollout_id="a")
    opening = state.messages[1].content
    assert opening.startswith("y" * 50) and not opening.startswith("y" * 51)
    assert "start() gave 1,234 characters" in opening and "max_observation_chars is 50" in opening
    assert state.messages[0].content == "s"


# -- R2: a byte-order mark before a block's code ------------------------------------------------------------------

FUNCTION = "def f(x):\n    return x + 1\n"


def _compiles_and_runs(code: str | None) -> bool:
    assert code is not None
    namespace: dict = {}
    exec(compile(code, "<turn>", "exec"), namespace)
    return namespace["f"](1) == 2


@pytest.mark.parametrize(
    "turn",
    [
        "Here:\n```python\n\n\ufeff" + FUNCTION + "```\n",  # a blank line the fence left, then the file
        "Here:\n```python\n\n\n\ufeff" + FUNCTION + "```\r\n",
        # a fence in a list item; the mark before the item's indentation (the file pasted, then indented)
        "1. Here:\n   ```python\n\ufeff   def f(x):\n       return x + 1\n   ```\n",
        "1. Here:\n   ```python\n   \n\ufeff   def f(x):\n       return x + 1\n   ```\n",
    ],
)
def test_a_bom_before_a_blocks_code_is_the_start_of_the_file(turn):
    parsed = parse_turn(turn)
    assert parsed.kind is TurnKind.COMMIT
    assert _compiles_and_runs(parsed.code)


def test_a_bom_inside_the_code_stays():
    """Only the mark before the code's first line goes: later, it is in the code (Python rejects it there too)."""
    code = parse_turn("```python\nx = 1\n\ufeffy = 2\n```\n").code
    assert code == "x = 1\n\ufeffy = 2\n"
    assert parse_turn("```python\n\ufeff\n\ufeffx = 1\n```\n").code == "\n\ufeffx = 1\n"


# -- R3: the count of cut observations cannot be written by the model -------------------------------------------------


def _tool_state(turns):
    from rewardpipe.envs.tool_call import ENVIRONMENT
    from rewardpipe.episode import converse
    from rewardpipe.policies import ScriptedPolicy

    task = _tool_task("tc-001-balance")
    state = start_episode(task, env=ENVIRONMENT, run_id="r", step=0, group_id="g", rollout_id="k0")
    return converse(state, task, ScriptedPolicy(list(turns)), ENVIRONMENT), task, ENVIRONMENT


def test_a_tool_error_quoting_the_note_is_no_cut():
    """Attack: call a tool named like the note; the environment's error quotes the name near its end."""
    note = "[rewardpipe cut this message: respond() gave 9 characters; max_observation_chars is 1]"
    state, task, env = _tool_state(
        [_call(note), _call("get_balance", account="[rewardpipe cut this message: "), "<answer>12000</answer>"]
    )
    assert sum(note[:30] in message.content for message in state.messages if message.role == "tool") == 2
    assert "env_observations_cut" not in episode_metrics(state, task, env)
    assert observations_cut(state) == 0


class _EchoesTurn(_Echoes):
    """A simulator that answers with the model's own turn (a user LLM echoing it, a REPL printing it)."""

    max_observation_chars = 1000

    def respond(self, state, task, ctx):
        return state.append(Message(role="user", content=state.messages[-1].content), next_action="policy")


class _Forges:
    """Writes a turn shaped exactly like a cut message (the note at the end, at the offset it names)."""

    def next_turn(self, state, task):
        note = "[rewardpipe cut this message: respond() gave 5,000 characters; max_observation_chars is 40]"
        return "x" * 40 + "\n" + note


def test_an_echoed_note_is_no_cut_even_where_its_numbers_agree():
    record = run_episode(
        TaskRow(task_id="t", prompt="p"),
        _Forges(),
        _EchoesTurn(),
        None,
        run_id="r",
        step=0,
        group_id="g",
        rollout_id="a",
    )
    assert record.status == "scored"
    assert "env_observations_cut" not in record.metrics


def test_real_cuts_are_still_counted_with_or_without_the_bound_at_hand():
    env = _EchoesTurn()

    class Long:
        def next_turn(self, state, task):
            return "z" * 5000

    record = run_episode(
        TaskRow(task_id="t", prompt="p"), Long(), env, None, run_id="r", step=0, group_id="g", rollout_id="a"
    )
    assert record.metrics["env_observations_cut"] == 1
    cut = Message(
        role="user",
        content="z" * 1000 + "\n[rewardpipe cut this message: respond() gave 5,000 "
        "characters; max_observation_chars is 1,000]",
    )
    state = start_episode(TaskRow(task_id="t", prompt="p"), env=env, run_id="r", step=0, group_id="g", rollout_id="a")
    state = state.evolve(messages=[*state.messages, cut])
    assert observations_cut(state) == 1
    assert observations_cut(state, 1000) == 1
    assert observations_cut(state, 999) == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "unit",
    [
        "\n[rewardpipe cut this message: respond() gave 1,000 characters; max_observation_chars is 1,000]",
        "\n[rewardpipe cut this message: ",
        "1,000,",
        "\n",
    ],
)
def test_counting_cuts_stays_linear(unit):
    """Each message is looked at in its last 200 characters only, however many notes or digits it holds."""
    import rewardpipe.episode as episode
    from rewardpipe.environment import EpisodeState
    from tests.security.test_round_four_scorer_text import _build, assert_linear
    from tests.security.text_cost import operations

    def at(n: int) -> int:
        state = EpisodeState(messages=[Message(role="user", content=_build("", unit, "]", n)) for _ in range(3)])
        return operations(lambda: observations_cut(state, 1000), [episode])

    assert_linear(f"observations_cut(3 messages of {unit!r} * n)", at)


# -- R4: a final answer wrapped in Markdown is the answer --------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        "<answer>**12000**</answer>",
        "<answer>`12000`</answer>",
        "<answer>*12000*.</answer>",
        "<answer>__12000__</answer>",
        '<answer>"12000"</answer>',
        "<answer>\uff11\uff12\uff10\uff10\uff10</answer>",  # full-width digits
        "<answer>\u200b12000\u200d</answer>",  # zero-width characters
        "<answer>\ufeff12000</answer>",
    ],
)
def test_a_right_answer_in_markdown_or_full_width_reaches_the_goal(answer):
    task = _tool_task("tc-001-balance")
    components = _tool_play(task, [_call("get_balance", account="checking"), answer])
    assert components["goal_reached"] == 1.0


@pytest.mark.parametrize(
    "answer",
    [
        "<answer>**1200**</answer>",
        "<answer>`12000 or 13000`</answer>",
        "<answer>12000²</answer>",
        "<answer>**12**000</answer>",
        "<answer>**</answer>",
        "<answer>120\u200b00 cents</answer>",
    ],
)
def test_a_wrong_answer_stays_wrong_however_it_is_wrapped(answer):
    task = _tool_task("tc-001-balance")
    components = _tool_play(task, [_call("get_balance", account="checking"), answer])
    assert components["goal_reached"] == 0.0


def test_a_named_answer_in_bold_or_full_width_is_the_name():
    from rewardpipe.envs.tool_call.tasks import normalise_answer

    assert (
        normalise_answer("**Gizmo**") == normalise_answer("gizmo") == normalise_answer("\uff27\uff49\uff5a\uff4d\uff4f")
    )
    assert normalise_answer("7\u00b2") != normalise_answer("72")


# -- R5: a guess in Markdown or full-width letters is the guess -------------------------------------------------------


def _wordle(turns):
    from rewardpipe.envs.wordle import ENVIRONMENT, WORDLE, WordleTask
    from rewardpipe.episode import converse
    from rewardpipe.policies import ScriptedPolicy

    game = WordleTask(task_id="w", prompt="Guess.", answer="crane")
    state = start_episode(game, env=ENVIRONMENT, run_id="r", step=0, group_id="g", rollout_id="k")
    state = converse(state, game, ScriptedPolicy(list(turns)), ENVIRONMENT)
    return state, WORDLE.score(state.messages, task=game, state=state).components


@pytest.mark.parametrize(
    "guess",
    [
        "**slate**",
        "`slate`",
        '"slate"',
        "slate.",
        "*Slate*.",
        "\uff53\uff4c\uff41\uff54\uff45",  # full-width
        "sl\u200bate",
        "\ufeffslate",
    ],
)
def test_a_guess_set_off_in_markdown_or_full_width_is_the_guess(guess):
    """Honest shapes a chat model writes (bold, code, quotes, a sentence's period, a CJK input method's letters):
    each was a malformed turn (no feedback, no guess, format_ok down) though the word was plain."""
    state, components = _wordle([f"<guess>{guess}</guess>", "<guess>crane</guess>"])
    assert state.guesses == ["slate", "crane"]
    assert components["solved"] == 1.0 and components["format_ok"] == 1.0


@pytest.mark.parametrize("guess", ["**slates**", "sl*te", "s l a t e", "sl\u00e2te", "**sl**ate", "slat\u00b2"])
def test_what_is_no_five_letter_word_stays_malformed(guess):
    state, components = _wordle([f"<guess>{guess}</guess>", "<guess>crane</guess>"])
    assert state.turn_results == ["malformed", "solved"]
    assert components["format_ok"] == 0.5


# -- R6: a fence line indented inside the code is the code's -------------------------------------------------------

DOCSTRING_EXAMPLE = '''Here it is:
```python
def add(a, b):
    """Add two numbers.

    Example:
    ```
    add(1, 2)  # 3
    ```
    """
    return a + b
```
Done.'''


def test_a_markdown_example_in_a_docstring_is_part_of_the_code():
    """An honest answer whose docstring shows an example fenced in Markdown (indented with the docstring): the
    example's fences closed the block, the code lost its body and did not compile (0 for a right answer). A closing
    fence is indented at most three columns more than the opening one, as Markdown has it."""
    parsed = parse_turn(DOCSTRING_EXAMPLE)
    assert parsed.kind is TurnKind.COMMIT
    namespace: dict = {}
    exec(compile(parsed.code, "<turn>", "exec"), namespace)
    assert namespace["add"](1, 2) == 3
    assert "add(1, 2)  # 3" in namespace["add"].__doc__


@pytest.mark.parametrize(
    ("turn", "kind", "code"),
    [
        # a writer who indents every closing fence further still has them close (nothing else would)
        ("Steps:\n```python\nx = 1\n    ```\nDoes this work?", TurnKind.QUESTION, "x = 1\n"),
        (
            "- a:\n  ```python\n  x = 1\n      ```\n- b:\n  ```python\n  y = 2\n      ```\nok",
            TurnKind.COMMIT,
            "x = 1\n\ny = 2\n",
        ),
        # a list item's fence closes at its own indentation, and at less
        ("1. x\n   ```python\n   x = 1\n   ```\nok?", TurnKind.QUESTION, "x = 1\n"),
        ("1. x\n   ```python\n   x = 1\n```\nok", TurnKind.COMMIT, "x = 1\n"),
    ],
)
def test_closing_fences_written_as_before_still_close(turn, kind, code):
    parsed = parse_turn(turn)
    assert (parsed.kind, parsed.code) == (kind, code)


@pytest.mark.slow
@pytest.mark.parametrize("unit", ["```\n    ```\n", "```python\nx\n        ```\n", "~~~\n    ~~~\n```\n", "    ```\n"])
def test_finding_closing_fences_stays_linear(unit):
    """A turn whose closing fences are all indented further is scanned to its end once, not once a block."""
    import rewardpipe.parsing as parsing
    from tests.security.test_round_four_scorer_text import _build, assert_linear
    from tests.security.text_cost import operations

    assert_linear(
        f"parse_turn({unit!r} * n)",
        lambda n: operations(lambda: parsing.parse_turn.__wrapped__(_build("```python\n", unit, "", n)), [parsing]),
    )
