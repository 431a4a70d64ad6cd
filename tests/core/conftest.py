"""Shared builders for the core-domain tests: transcripts, execution results, tasks, fake executors and a
local OpenAI-compatible stub server."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from rewardpipe.execution.result import ExecutionJob, ExecutionResult, ExecutionStatus
from rewardpipe.models import Message, Task
from tests.http_server import QuietHTTPServer


def fence(code: str, tag: str = "python") -> str:
    return f"```{tag}\n{code.rstrip()}\n```"


QUESTION = "What should happen with negative numbers?"
COMMIT = "Here it is:\n" + fence("def f(x):\n    return x")
STATEMENT = "Let me think about this."


def transcript(*assistant_turns: str, prompt: str = "Write f.", reply: str = "Sure.") -> list[Message]:
    """A conversation: the prompt, then each assistant turn followed by a user reply (except the last)."""
    messages = [Message(role="user", content=prompt)]
    for index, turn in enumerate(assistant_turns):
        messages.append(Message(role="assistant", content=turn))
        if index < len(assistant_turns) - 1:
            messages.append(Message(role="user", content=reply))
    return messages


def result(
    status: str = "passed", passed: int = 0, total: int = 0, reason: str = "", job_id: str = ""
) -> ExecutionResult:
    return ExecutionResult(id=job_id, status=ExecutionStatus(status), passed=passed, total=total, reason=reason)


ADD_TESTS = (
    "import unittest\n\n"
    "class TestAdd(unittest.TestCase):\n"
    "    def test_small(self):\n        self.assertEqual(add(1, 2), 3)\n\n"
    "    def test_negative(self):\n        self.assertEqual(add(-1, -2), -3)\n"
)
ADD_SOLUTION = "def add(a, b):\n    return a + b\n"


def make_task(**overrides: Any) -> Task:
    fields: dict[str, Any] = dict(
        task_id="t-add",
        prompt="Write a function that adds two numbers.",
        spec=[
            "Negative numbers are allowed and added normally.",
            "Floating point inputs return a float result.",
            "Strings are rejected with a TypeError exception.",
        ],
        entry_point="add",
        tests=ADD_TESTS,
        reference_solution=ADD_SOLUTION,
    )
    fields.update(overrides)
    return Task(**fields)


def passes_only_reference(job: ExecutionJob) -> ExecutionResult:
    """A fake executor's verdict: the reference solution passes both ADD_TESTS, anything else fails them."""
    return result("passed", 2, 2) if job.code.strip() == ADD_SOLUTION.strip() else result("failed", 0, 2)


class FakeExecutor:
    """Records the jobs it is given and answers each with a fixed (or computed) result."""

    def __init__(self, answer: ExecutionResult | Callable[[ExecutionJob], ExecutionResult] | Exception):
        self.answer = answer
        self.jobs: list[ExecutionJob] = []

    def run(self, job: ExecutionJob) -> ExecutionResult:
        self.jobs.append(job)
        if isinstance(self.answer, Exception):
            raise self.answer
        if callable(self.answer):
            return self.answer(job)
        return self.answer.model_copy(update={"id": job.id})

    def run_batch(self, jobs, workers=None):
        return [self.run(job) for job in jobs]


class StubChatServer:
    """A local ``POST /chat/completions`` endpoint answering from a queue of (status, body) replies."""

    def __init__(self) -> None:
        self.replies: list[tuple[int, Any]] = []
        self.requests: list[dict[str, Any]] = []  # {"path", "headers", "body"}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server naming
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                server.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": json.loads(raw or b"null")}
                )
                status, body = server.replies.pop(0) if server.replies else (500, {"error": "no reply queued"})
                payload = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def reply(self, text: str, status: int = 200) -> None:
        self.replies.append((status, {"choices": [{"message": {"role": "assistant", "content": text}}]}))

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def chat_server():
    server = StubChatServer()
    yield server
    server.close()


@pytest.fixture(autouse=True)
def _no_ambient_api_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
