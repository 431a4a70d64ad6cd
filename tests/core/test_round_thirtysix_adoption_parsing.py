"""Round thirty-six: a fence line inside a triple-quoted string of the model's Python code is the string's."""

from rewardpipe.parsing import TurnKind, extract_code, parse_turn

FENCE = "`" * 3


def _turn(code: str, after: str = "") -> str:
    return f"Here it is:\n{FENCE}python\n{code}\n{FENCE}\n{after}"


def test_a_docstring_holding_a_markdown_example_at_the_fences_indentation_is_extracted_whole():
    code = f'def f():\n    """Usage:\n{FENCE}\nf()\n{FENCE}\n"""\n    return 1'
    assert extract_code(_turn(code)) == code + "\n"
    compile(extract_code(_turn(code)), "<model>", "exec")


def test_a_template_string_holding_a_tagged_fence_in_single_quotes_is_extracted_whole():
    code = f"DOC = '''\n{FENCE}bash\nls\n{FENCE}\n'''\nprint(DOC)"
    assert extract_code(_turn(code)) == code + "\n"


def test_quotes_inside_comments_single_quoted_strings_and_escapes_open_no_string():
    # None of these lines leaves a triple-quoted string open, so the fence after them closes the block.
    code = "\n".join(
        [
            'x = 1  # a comment with three quotes: """',
            's = \'say """ here\'',
            't = "escaped \\" then \\"\\"\\" still inside"',
            'u = """closed on its line"""',
            "v = r'''raw \\''' still open''' + 'x'",
        ]
    )
    turn = _turn(code, "Then some prose.\n" + FENCE + "python\nprint(v)\n" + FENCE)
    parsed = parse_turn(turn)
    assert parsed.code == code + "\n\nprint(v)\n"
    assert "Then some prose." in parsed.prose


def test_the_question_after_code_with_a_fenced_docstring_is_still_read():
    code = f'def f():\n    """\n{FENCE}\nf()\n{FENCE}\n"""'
    parsed = parse_turn(_turn(code, "Does that match what you want?"))
    assert parsed.kind is TurnKind.QUESTION
    assert parsed.code == code + "\n"


def test_a_string_left_open_to_the_end_of_the_turn_falls_back_to_fences_as_written():
    # Cut at max_length inside a string: the first fence still ends the block, and later blocks are read.
    turn = f'{FENCE}python\ns = """abc\n{FENCE}\nprose\n{FENCE}python\nprint(1)\n{FENCE}\n'
    assert extract_code(turn) == 's = """abc\n\nprint(1)\n'


def test_a_non_python_block_is_closed_by_its_fence_whatever_quotes_it_holds():
    turn = f'{FENCE}text\nsay """\n{FENCE}\n{FENCE}python\nprint(1)\n{FENCE}\n'
    assert extract_code(turn) == "print(1)\n"
