"""The local HTTP server behind the tests' fake endpoints (judge, policy, slow endpoint)."""

from __future__ import annotations

import sys
from http.server import ThreadingHTTPServer
from typing import Any


class QuietHTTPServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer whose handler threads may outlive their client: a test whose client gives up
    (a timeout under test) leaves a thread that later writes to a closed socket. socketserver would print
    that broken pipe's traceback to whatever ``sys.stderr`` is by then, i.e. into another test's captured
    output (a CLI test comparing stderr then fails). A client that went away is expected here; any other
    error is still printed."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)
