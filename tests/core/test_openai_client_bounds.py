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
    assert len(slept) == 40 and max(slept) == MAX_BACKOFF_S and slept[:3] == [0.5, 1.0, 2.0]
