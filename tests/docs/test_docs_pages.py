"""The hand-written docs cannot drift from the code: every `rewardpipe` command they show exists with the options
they give it, the guides' code comes from examples/ (run by test_examples.py), the README stays short and shows
the example's code, and the site's navigation holds every page. (`make docs` builds the site with --strict,
which checks every link and anchor inside it; these checks are the fast part, in `make test`.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
FENCE = re.compile(
    r"^(?P<indent> *)(?P<fence>```+|~~~+)(?P<info>[^\n]*)\n(?P<body>.*?)^(?P=indent)(?P=fence)\s*$", re.M | re.S
)
# The commands and options of the public API v1 (issues 17 and 20) that the docs describe while other branches
# build them. An entry here that the CLI has gained fails test_pending_commands_are_still_pending: remove it then.
PENDING: set[tuple[str, str | None]] = set()


def pages() -> list[Path]:
    return [*sorted(DOCS.rglob("*.md")), README]


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    return [(m.group("info").strip(), m.group("body")) for m in FENCE.finditer(text)]


def _command_tree():
    import typer.main

    from rewardpipe.cli import app

    return typer.main.get_command(app)


def _options(command) -> set[str]:
    return {opt for param in command.params for opt in (*param.opts, *param.secondary_opts) if opt.startswith("-")}


def command_problems(line: str, root) -> list[str]:
    """What is wrong with one ``rewardpipe ...`` command line: an unknown subcommand or option."""
    try:
        words = shlex.split(line.replace("\\\n", " "), comments=True)
    except ValueError:
        words = line.split()
    words = words[words.index("rewardpipe") + 1 :] if "rewardpipe" in words else []
    command, path = root, []
    while words and hasattr(command, "commands") and not words[0].startswith("-"):
        if words[0].isupper() or words[0][0] in "[<{":  # a placeholder: COMMAND, [OPTIONS], <url>
            break
        name = words.pop(0)
        if name not in command.commands:
            return [] if (name, None) in PENDING else [f"`rewardpipe {' '.join([*path, name])}` is no command"]
        command, path = command.commands[name], [*path, name]
    known = _options(command) | {"--help"}
    problems = []
    for word in words:
        if word in ("|", "&&", ";", ">", ">>", "2>"):
            break
        option = word.split("=", 1)[0]
        if option.startswith("--") and option not in known and (path[-1] if path else "", option) not in PENDING:
            problems.append(f"`rewardpipe {' '.join(path)}` has no option {option}")
    return problems


def command_lines(text: str) -> list[str]:
    """Every ``rewardpipe`` command shown: lines of code blocks (continuations joined) and inline code spans."""
    found = []
    for info, body in fenced_blocks(text):
        if info.split(" ")[0] in ("", "console", "bash", "sh", "shell", "text"):
            joined = re.sub(r"\s*\\\n\s*", " ", body)
            found += [line for line in joined.splitlines() if re.match(r"^\s*(\$ )?(\S+=\S+ )*rewardpipe ", line)]
    prose = FENCE.sub("", text)
    found += [span for span in re.findall(r"`(rewardpipe [^`]+)`", prose)]
    return found


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_rewardpipe_command_in_the_docs_exists_with_its_options(page):
    root = _command_tree()
    problems = [
        f"{line.strip()!r}: {problem}"
        for line in command_lines(page.read_text())
        for problem in command_problems(line, root)
    ]
    assert not problems, f"{page.relative_to(ROOT)}:\n  " + "\n  ".join(problems)


def test_the_command_check_catches_a_renamed_option_and_command():
    root = _command_tree()
    assert command_problems("$ rewardpipe monitor store --json --fail-on-alarm", root) == []
    assert command_problems("rewardpipe monitor store --fail-on-alarms", root) == [
        "`rewardpipe monitor` has no option --fail-on-alarms"
    ]
    assert command_problems("rewardpipe tasks import-humanevals x", root) == [
        "`rewardpipe tasks import-humanevals` is no command"
    ]
    assert command_lines("```console\n$ rewardpipe run --tasks t \\\n    --steps 2\n```\nand `rewardpipe show S`") == [
        "$ rewardpipe run --tasks t --steps 2",
        "rewardpipe show S",
    ]


def test_pending_commands_are_still_pending():
    root = _command_tree()
    landed = sorted(
        f"{name} {option or ''}".strip()
        for name, option in PENDING
        if name in root.commands and (option is None or option in _options(root.commands[name]))
    )
    assert not landed, f"these have landed: remove them from PENDING in {Path(__file__).name}: {landed}"


def test_the_guides_take_their_code_from_examples():
    for guide in [*sorted((DOCS / "guides").glob("*.md")), DOCS / "extending.md"]:
        for info, body in fenced_blocks(guide.read_text()):
            if info.split(" ")[0] == "console":
                continue  # commands, checked above
            lines = [line for line in body.splitlines() if line.strip()]
            assert lines and all(line.startswith("--8<-- ") for line in lines), (
                f"{guide.relative_to(ROOT)}: a ```{info} block typed by hand; put the code in examples/ (where "
                f"tests/docs/test_examples.py runs it) and include it with --8<--:\n{body[:300]}"
            )
            for line in lines:
                target = line.split('"')[1].split(":")[0]
                assert (ROOT / target).is_file(), f"{guide.relative_to(ROOT)} includes {target}, which does not exist"


def _heading_anchors(path: Path) -> set[str]:
    anchors = set()
    text = FENCE.sub("", path.read_text())
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        explicit = re.search(r"\{#([\w-]+)\}\s*$", heading)
        if explicit:
            anchors.add(explicit.group(1))
            continue
        slug = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
        anchors.add(re.sub(r"[-\s]+", "-", slug))
    return anchors


def test_the_readme_is_short_and_its_links_resolve():
    text = README.read_text()
    assert len(text.encode()) <= 15 * 1024, f"README.md is {len(text.encode())} bytes; the limit is 15 KB"
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        assert (ROOT / path).exists(), f"README links to {path}, which does not exist"
        if anchor:
            assert anchor in _heading_anchors(ROOT / path), f"README links to {target}: no such heading"


def test_every_readme_figure_links_to_the_page_that_says_how_it_was_measured():
    table = README.read_text().split("## Figures", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| what")]
    assert len(rows) >= 8
    for row in rows:
        assert re.search(r"\(docs/operations/(benchmarks|aws-limits-and-costs)\.md#[\w-]+\)", row), row


def test_the_readme_shows_the_your_own_reward_example_as_it_is():
    text = README.read_text()
    example = (ROOT / "examples/your_own_reward/my_reward.py").read_text()
    blocks = [body for info, body in fenced_blocks(text) if info == "python"]
    assert blocks == [example], "README's reward must be examples/your_own_reward/my_reward.py, verbatim"
    # Its console block is what `rewardpipe score` prints, run as written: tests/docs/test_round_thirtysix_readme.py
    # (it showed score.py's output, the library example's, under the command).


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def entries(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for item in node:
                yield from entries(item)
        elif isinstance(node, dict):
            for value in node.values():
                yield from entries(value)

    in_nav = list(entries(config["nav"]))
    assert len(in_nav) == len(set(in_nav)), "a page is twice in the nav"
    excluded = set(config.get("exclude_docs", "").split())
    pages_on_disk = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")} - excluded
    assert not set(in_nav) - pages_on_disk, f"nav entries without a page: {sorted(set(in_nav) - pages_on_disk)}"
    missing = sorted(pages_on_disk - set(in_nav))
    assert not missing, f"pages missing from the nav in mkdocs.yml: {missing}"


def test_every_record_shown_in_the_docs_is_valid_under_the_record_schema():
    import json

    import jsonschema

    schema = json.loads((DOCS / "reference/schemas/record.schema.json").read_text())
    shown = 0
    for page in pages():
        for info, body in fenced_blocks(page.read_text()):
            if info == "json" and '"rewardpipe.record/v1"' in body:
                jsonschema.validate(json.loads(body), schema)
                shown += 1
    assert shown >= 1
