"""Turn classification: every rule of rewardpipe.parsing's docstring, plus the tricky formats models produce."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rewardpipe.parsing import TurnKind, _session_input, classify_turn, extract_code, parse_turn
from tests.core.conftest import fence


def test_plain_question_is_a_question():
    assert classify_turn("Should the result be sorted?") is TurnKind.QUESTION


def test_statement_without_code_is_other():
    parsed = parse_turn("I will now think about the design.")
    assert parsed.kind is TurnKind.OTHER
    assert parsed.code is None


@pytest.mark.parametrize("text", ["", "   \n\n  "])
def test_empty_turn_is_other(text):
    assert parse_turn(text).kind is TurnKind.OTHER
    assert parse_turn(text).code is None


def test_fenced_python_block_commits_with_its_code():
    parsed = parse_turn("Here you go:\n" + fence("def f():\n    return 1"))
    assert parsed.kind is TurnKind.COMMIT
    assert parsed.code == "def f():\n    return 1\n"


def test_question_mark_inside_code_is_not_a_question():
    text = "Solution:\n" + fence('def f(s):\n    return s.endswith("?")  # really?')
    assert classify_turn(text) is TurnKind.COMMIT


def test_question_mark_inside_inline_code_is_not_a_question():
    assert classify_turn("I will use `x?` and `re.match('a?')`.") is TurnKind.OTHER


def test_inline_code_question_after_code_does_not_turn_commit_into_question():
    text = fence("def f(x):\n    return x") + "\nCall it as `f(1)?`."
    assert classify_turn(text) is TurnKind.COMMIT


def test_code_followed_by_confirmation_question_is_a_question():
    text = fence("def f(x):\n    return sorted(x)") + "\nDoes that match what you want?"
    parsed = parse_turn(text)
    assert parsed.kind is TurnKind.QUESTION
    assert parsed.code == "def f(x):\n    return sorted(x)\n"  # the code is still extracted


def test_question_only_before_the_code_still_commits():
    text = "You want it sorted? Here it is:\n" + fence("def f(x):\n    return sorted(x)") + "\nDone."
    assert classify_turn(text) is TurnKind.COMMIT


def test_question_between_two_python_blocks_does_not_count():
    text = fence("a = 1") + "\nWant more? Sure:\n" + fence("b = 2") + "\nThat's all."
    parsed = parse_turn(text)
    assert parsed.kind is TurnKind.COMMIT
    assert parsed.code == "a = 1\n\nb = 2\n"


def test_question_after_a_trailing_non_python_block_counts():
    text = fence("def f():\n    pass") + "\nRun:\n" + fence("pytest -q", "bash") + "\nShall I add docs?"
    assert classify_turn(text) is TurnKind.QUESTION


@pytest.mark.parametrize("tag", ["bash", "text", "json", "sh", "console"])
def test_non_python_blocks_are_not_code(tag):
    parsed = parse_turn("Example:\n" + fence('{"a": 1}', tag))
    assert parsed.code is None
    assert parsed.kind is TurnKind.OTHER


def test_non_python_block_with_question_in_prose_is_question():
    assert classify_turn("Like this?\n" + fence("[1, 2]", "json")) is TurnKind.QUESTION


@pytest.mark.parametrize(
    "tag",
    ["", "python", "Python", "py", "python3", "python title=solution.py", "python:main.py", "python3.11", "{.python}"],
)
def test_untagged_and_python_tagged_blocks_are_code(tag):
    assert extract_code(fence("x = 1", tag)) == "x = 1\n"


def test_unterminated_fence_at_end_still_commits():
    text = "Here:\n```python\ndef f(x):\n    return x * 2\n"
    parsed = parse_turn(text)
    assert parsed.kind is TurnKind.COMMIT
    assert parsed.code == "def f(x):\n    return x * 2\n"


def test_unterminated_fence_swallows_a_trailing_question_mark():
    # Cut off mid-block: the "?" is inside the code, so the turn commits.
    text = "```python\ndef f(x):\n    # is this right?\n    return x"
    assert classify_turn(text) is TurnKind.COMMIT


def test_tilde_fences_are_code():
    parsed = parse_turn("~~~python\ndef g():\n    return 2\n~~~\nFinished.")
    assert parsed.kind is TurnKind.COMMIT
    assert parsed.code == "def g():\n    return 2\n"


def test_backtick_line_does_not_close_a_tilde_fence():
    parsed = parse_turn("~~~\ns = '''\n```\n'''\n~~~")
    assert parsed.code == "s = '''\n```\n'''\n"


def test_four_backtick_fence_may_contain_triple_backticks():
    text = '````python\ndoc = """\n```\nexample\n```\n"""\n````\nIs that OK?'
    parsed = parse_turn(text)
    assert parsed.code == 'doc = """\n```\nexample\n```\n"""\n'
    assert parsed.kind is TurnKind.QUESTION


def test_empty_block_is_ignored():
    parsed = parse_turn("```python\n\n   \n```\nAny constraints?")
    assert parsed.code is None
    assert parsed.kind is TurnKind.QUESTION


def test_empty_block_after_code_does_not_hide_the_code():
    text = fence("x = 1") + "\n```python\n```\nok."
    assert parse_turn(text).kind is TurnKind.COMMIT


def test_multiple_python_blocks_are_concatenated_in_order():
    text = fence("import math") + "\nthen\n" + fence("def f():\n    return math.pi", "py")
    assert extract_code(text) == "import math\n\ndef f():\n    return math.pi\n"


def test_python_blocks_skip_other_languages_when_concatenating():
    text = "\n".join([fence("a = 1"), fence("echo hi", "bash"), fence("b = 2")])
    assert extract_code(text) == "a = 1\n\nb = 2\n"


def test_unfenced_code_is_not_a_commit():
    text = "def f(x):\n    return x + 1\n"
    parsed = parse_turn(text)
    assert parsed.kind is TurnKind.OTHER
    assert parsed.code is None


def test_prose_excludes_code_blocks():
    parsed = parse_turn("Before.\n" + fence("secret = 42") + "\nAfter.")
    assert "secret" not in parsed.prose
    assert "Before." in parsed.prose and "After." in parsed.prose


def test_indented_fence_in_a_list_item_is_code_and_dedented():
    text = "1. The function:\n\n    ```python\n    def f(x):\n        return x\n    ```\n"
    parsed = parse_turn(text)
    assert parsed.kind is TurnKind.COMMIT
    assert parsed.code == "def f(x):\n    return x\n"
    compile(parsed.code, "<turn>", "exec")  # the dedented code parses


def test_question_mark_in_a_url_is_not_a_question():
    assert classify_turn("See https://example.com/search?q=1 for details.") is TurnKind.OTHER


def test_question_with_trailing_quote_or_paren_is_a_question():
    assert classify_turn('Do you mean "sorted?"') is TurnKind.QUESTION
    assert classify_turn("Which order (ascending?)") is TurnKind.QUESTION


def test_question_in_markdown_emphasis_is_a_question():
    text = fence("def f(x):\n    return x") + "\n**Does this match what you need?**"
    assert classify_turn(text) is TurnKind.QUESTION
    assert classify_turn("_Should it be sorted?_") is TurnKind.QUESTION


@pytest.mark.parametrize("tag", ["javascript", "c++", "python-repl-output", "pythonx"])
def test_other_languages_resembling_python_are_not_code(tag):
    assert extract_code(fence("x = 1", tag)) is None


def test_question_followed_by_a_statement_on_the_same_line_is_a_question():
    assert classify_turn("Should it be sorted? I assume so.") is TurnKind.QUESTION


def test_full_width_question_mark_is_a_question():
    assert classify_turn("需要排序吗？") is TurnKind.QUESTION


def test_none_is_treated_as_an_empty_turn():
    assert classify_turn(None) is TurnKind.OTHER  # type: ignore[arg-type]


# --- properties --------------------------------------------------------------------------------------------

turn_text = st.lists(
    st.sampled_from(["```", "```python", "~~~", "````", "```bash", "?", "x = 1", "Why?", "`a?`", "", "  ", "ok."])
    | st.text(max_size=20),
    max_size=10,
).map("\n".join)


@settings(max_examples=200, deadline=None)
@given(turn_text)
def test_parse_turn_never_raises_and_kind_agrees_with_code(text):
    parsed = parse_turn(text)
    if parsed.kind is TurnKind.COMMIT:
        assert parsed.code is not None and parsed.code.strip()
    if parsed.code is None:
        assert parsed.kind is not TurnKind.COMMIT
    else:
        assert parsed.code.endswith("\n")


plain_code = st.text(
    alphabet=st.characters(blacklist_characters="`~\r", blacklist_categories=("Cs", "Zl", "Zp")),
    min_size=1,
    max_size=60,
).filter(lambda s: _session_input(s).strip())  # a console session with nothing typed at its prompts is no code


@settings(max_examples=150, deadline=None)
@given(plain_code)
def test_fenced_code_commits_and_a_trailing_confirmation_makes_it_a_question(code):
    text = "Here:\n" + fence(code)
    assert classify_turn(text) is TurnKind.COMMIT
    assert classify_turn(text + "\nIs that what you want?") is TurnKind.QUESTION
