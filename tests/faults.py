"""S3 faults injected into a real botocore client at its HTTP layer, over moto.

botocore sends each request through its ``before-send`` event; moto answers there (a handler registered
on ``before-send`` when the client is made). :class:`S3Faults` adds two handlers around moto's:

* one that runs **before** moto's (``register_first`` on ``before-send.s3``: botocore runs the most specific
  event first): it raises a connection error, so the request never reaches the "server" (a refused or
  dropped connection, a connect or read timeout), or hands botocore moto's answer with a body that fails
  while it is read (``ResponseStreamingError``, a body cut short: botocore's ``IncompleteReadError``);
* one that runs **after** moto's (``register_last`` on ``before-send``): the request was applied, and then
  its answer is lost (``ConnectionClosedError``, ``ReadTimeoutError``): what a conditional write whose
  answer never came looks like.

So the code under test meets the very exceptions botocore raises (its retry handler, its response
parsing, its ``StreamingBody`` checks all run), not hand-made ones.
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: Errors raised instead of an answer (the request is not applied, unless ``applied=True``).
CONNECTION_ERRORS = ("EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ConnectionClosedError")
#: Errors of an answer's body, while it is read (GetObject).
BODY_ERRORS = ("ResponseStreamingError", "IncompleteRead")


def connection_error(name: str, url: str) -> Exception:
    from botocore import exceptions

    return getattr(exceptions, name)(endpoint_url=url)


class _FailingBody(io.RawIOBase):
    """moto's answer body, failing the way a dropped connection does: urllib3's ProtocolError (botocore
    turns it into ResponseStreamingError) or fewer bytes than Content-Length says (IncompleteReadError)."""

    def __init__(self, data: bytes, fault: str) -> None:
        self._data, self._fault, self._sent = data, fault, False

    def read(self, amt: int | None = None) -> bytes:
        if self._fault == "ResponseStreamingError":
            from urllib3.exceptions import ProtocolError

            raise ProtocolError("Connection broken: ConnectionResetError(104, 'Connection reset by peer')")
        if self._sent:
            return b""
        self._sent = True
        return self._data[: max(0, len(self._data) // 2)]

    def stream(self, amt: int = 1024, decode_content: bool | None = None):  # what botocore's .content uses
        while chunk := self.read(amt):
            yield chunk

    def readable(self) -> bool:
        return True


@dataclass
class Rule:
    operation: str  # "PutObject", "GetObject", ...
    error: str
    times: int | None  # None: every time
    when: Callable[[Any], bool] | None
    applied: bool
    hits: int = 0

    def matches(self, operation: str, request: Any) -> bool:
        return (
            operation == self.operation
            and (self.times is None or self.hits < self.times)
            and (self.when is None or self.when(request))
        )


@dataclass
class S3Faults:
    """Fault rules for one client (``S3Faults(client)``), or for every S3Store made while
    :meth:`every_store` is in force (the stores a CLI command opens for itself)."""

    client: Any = None
    rules: list[Rule] = field(default_factory=list)
    calls: Counter = field(default_factory=Counter)
    injected: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        if self.client is not None:
            self.attach(self.client)

    def attach(self, client: Any) -> None:
        client.meta.events.register_first("before-send.s3", self._before)
        client.meta.events.register_last("before-send", self._after)

    def every_store(self, monkeypatch: Any) -> S3Faults:
        """Attach to the client of every S3Store made from now on (until ``monkeypatch`` is undone)."""
        from rewardpipe.store import S3Store

        made = S3Store.__init__

        def init(store: Any, *args: Any, **kwargs: Any) -> None:
            made(store, *args, **kwargs)
            self.attach(store.client)

        monkeypatch.setattr(S3Store, "__init__", init)
        return self

    def fail(
        self,
        operation: str,
        error: str,
        *,
        times: int | None = None,
        when: Callable[[Any], bool] | None = None,
        applied: bool = False,
    ) -> S3Faults:
        """Make ``operation`` fail with ``error`` (``times`` times, or always), for requests ``when`` picks.
        ``applied=True``: the request reaches the server first, and only its answer is lost."""
        if error not in CONNECTION_ERRORS + BODY_ERRORS:
            raise ValueError(f"unknown fault {error!r}")
        if applied and error in BODY_ERRORS:
            raise ValueError("a body fault is always of an applied request")
        self.rules.append(Rule(operation, error, times, when, applied))
        return self

    def clear(self) -> None:
        self.rules.clear()

    def _rule(self, operation: str, request: Any, applied: bool) -> Rule | None:
        for rule in self.rules:
            if rule.applied == applied and rule.matches(operation, request):
                rule.hits += 1
                self.injected[(operation, rule.error)] += 1
                return rule
        return None

    def _before(self, request: Any, event_name: str, **kwargs: Any) -> Any:
        operation = event_name.rsplit(".", 1)[-1]
        self.calls[operation] += 1
        rule = self._rule(operation, request, applied=False)
        if rule is None:
            return None
        if rule.error in CONNECTION_ERRORS:
            raise connection_error(rule.error, request.url)
        from moto.core.models import botocore_stubber

        response = botocore_stubber(event_name=event_name, request=request)  # the server's answer...
        response.raw = _FailingBody(response.raw.read(), rule.error)  # ...whose body fails on the way
        return response

    def _after(self, request: Any, event_name: str, **kwargs: Any) -> None:
        if not event_name.startswith("before-send.s3."):
            return
        rule = self._rule(event_name.rsplit(".", 1)[-1], request, applied=True)
        if rule is not None:
            raise connection_error(rule.error, request.url)


def header(request: Any, name: str) -> str | None:
    """A request header (``If-Match``, ``If-None-Match``) as botocore sent it."""
    value = request.headers.get(name)
    return value.decode() if isinstance(value, bytes) else value


def is_conditional(request: Any) -> bool:
    return header(request, "If-Match") is not None or header(request, "If-None-Match") is not None


def key_of(request: Any) -> str:
    """The object key a request names (virtual-hosted or path-style URL)."""
    from urllib.parse import unquote, urlsplit

    url = urlsplit(request.url)
    path = unquote(url.path).lstrip("/")
    return path.split("/", 1)[-1] if url.hostname and url.hostname.startswith("s3") else path


def fake_aws_env(monkeypatch: Any) -> None:
    """Credentials and a region for moto, and none of the REWARDPIPE_S3_* bounds a developer may have set."""
    from rewardpipe.store import S3_LIMIT_ENV

    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    for variable in S3_LIMIT_ENV.values():
        monkeypatch.delenv(variable, raising=False)
