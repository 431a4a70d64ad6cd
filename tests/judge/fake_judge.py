"""A local OpenAI-compatible judge endpoint (a real HTTP server on 127.0.0.1, in a thread of this process) for
the judge's tests and its benchmark: it answers each request after ``delay_s``, counts the requests in flight
(the most at once is ``max_in_flight``) and grades the quoted completion with ``grade``.

``grade(completion, tag, body)`` returns the judge's answer text (or ``(status, text_or_None, headers)`` to
answer with an HTTP error); the default writes ``VERDICT <tag>: 8`` for a completion containing "good", else 2.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.http_server import QuietHTTPServer

TAG = re.compile(r"VERDICT ([0-9a-f]+):")


def quoted(body: dict, label: str = "COMPLETION") -> tuple[str | None, str | None]:
    """(the tag, the text quoted between the tagged delimiter lines of ``label``) of one request."""
    system = body["messages"][0]["content"]
    found = TAG.search(system)
    if found is None:
        return None, None
    tag = found.group(1)
    user = body["messages"][-1]["content"]
    start, end = f"<<<{label} {tag}>>>\n", f"\n<<<END {label} {tag}>>>"
    if start not in user:
        return tag, None
    return tag, user.split(start, 1)[1].split(end, 1)[0]


def default_grade(completion: str, tag: str, body: dict) -> str:
    return f"Looks {'fine' if 'good' in completion else 'weak'}.\nVERDICT {tag}: {8 if 'good' in completion else 2}"


class FakeJudge:
    def __init__(self, grade: Callable[[str, str, dict], Any] = default_grade, delay_s: float = 0.0) -> None:
        self.grade, self.delay_s = grade, delay_s
        self.requests: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        judge = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: the client's connections are reused, as with a real server
            disable_nagle_algorithm = True  # as a real server does: no 40 ms delayed-ACK stall per reply

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with judge._lock:
                    judge.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                    judge.in_flight += 1
                    judge.max_in_flight = max(judge.max_in_flight, judge.in_flight)
                try:
                    time.sleep(judge.delay_s)
                    tag, completion = quoted(body)
                    answer = judge.grade(completion, tag, body)
                finally:
                    with judge._lock:
                        judge.in_flight -= 1
                status, text, headers = answer if isinstance(answer, tuple) else (200, answer, {})
                payload = (
                    {
                        "choices": [
                            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                        ]
                    }
                    if text is not None
                    else {"error": "busy"}
                )
                data = json.dumps(payload).encode()
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FakeJudge:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
