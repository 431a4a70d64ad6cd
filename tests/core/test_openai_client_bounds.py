"""The OpenAI-compatible client refuses a base URL it could never reach, and its backoff stops growing."""

import httpx
import pytest

from rewardpipe import openai_client
from rewardpipe.openai_client import MAX_BACKOFF_S, ChatClient, EndpointError


@pytest.mark.parametrize("url", ["not a url", "localhost:8000/v1", "ftp://host/v1", "http://", "http://[::1"])
def test_a_base_url_that_is_not_http_is_refused_at_once(url):
    with pytest.raises(ValueError, match="base URL"):
        ChatClient(url, "m")


def test_the_backoff_between_retries_is_capped(monkeypatch):
    slept = []
    monkeypatch.setattr(openai_client.time, "sleep", slept.append)
    client = ChatClient(
        "http://localhost:9/v1",
        "m",
        max_retries=40,
        backoff_s=0.5,
        transport=httpx.MockTransport(lambda request: httpx.Response(503)),
    )
    with pytest.raises(EndpointError, match="41 attempts"):
        client.complete([{"role": "user", "content": "hi"}])
    assert len(slept) == 40 and max(slept) <= MAX_BACKOFF_S and min(slept[-10:]) >= MAX_BACKOFF_S / 2
    # Exponential, each wait jittered into [half, all] of its step: 0.5, 1, 2...
    for wait, step in zip(slept[:3], [0.5, 1.0, 2.0]):
        assert step / 2 <= wait <= step
    assert len(set(slept[-10:])) > 1  # jittered: retries that failed together do not come back together


def test_retry_after_is_honoured_up_to_the_cap(monkeypatch):
    slept = []
    monkeypatch.setattr(openai_client.time, "sleep", slept.append)
    answers = iter(
        [
            httpx.Response(429, headers={"Retry-After": "3"}),
            httpx.Response(503, headers={"Retry-After": "999"}),
            httpx.Response(429, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}),
            httpx.Response(200, json={"choices": [{"message": {"content": "ok"}}]}),
        ]
    )
    client = ChatClient(
        "http://localhost:9/v1",
        "m",
        max_retries=3,
        backoff_s=0.5,
        max_backoff_s=10.0,
        transport=httpx.MockTransport(lambda request: next(answers)),
    )
    assert client.complete([]) == "ok"
    assert slept[:2] == [3.0, 10.0] and 1.0 <= slept[2] <= 2.0  # a date is not read: the computed wait applies


def test_the_key_is_in_the_header_only(monkeypatch):
    seen = []

    def answer(request):
        seen.append(request.headers.get("authorization"))
        return httpx.Response(401, text="bad credentials")

    client = ChatClient("http://localhost:9/v1", "m", api_key="sk-secret-123", transport=httpx.MockTransport(answer))
    with pytest.raises(EndpointError) as raised:
        client.complete([])
    assert seen == ["Bearer sk-secret-123"]
    assert "sk-secret-123" not in str(raised.value) and "sk-secret-123" not in repr(client)
