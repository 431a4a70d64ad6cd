"""The trusted runner's cache of prepared hidden tests: parsed once per source and format, bounded by size."""

from __future__ import annotations

import pytest

from rewardpipe.execution.runtime import harness, trusted

CHECK = "def check(candidate):\n    assert candidate(1) == {value}\n"
UNITTEST = (
    "import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n        pass\n"
    "    def test_b(self):\n        pass\n"
)


@pytest.fixture
def cache(monkeypatch):
    """An empty cache, and a count of the sources parsed."""
    monkeypatch.setattr(trusted, "_PREPARED", {})
    monkeypatch.setattr(trusted, "_PREPARED_CHARS", [0])
    parsed: list[str] = []
    real_parse = harness.parse_tests

    def counting_parse(source):
        parsed.append(source)
        return real_parse(source)

    monkeypatch.setattr(harness, "parse_tests", counting_parse)
    return parsed


def kept_chars() -> int:
    return sum(len(source) for source, _format in trusted._PREPARED)


def test_a_source_is_parsed_once_and_counted_per_format(cache):
    first = trusted._prepared_tests(UNITTEST, "unittest")
    again = trusted._prepared_tests(UNITTEST, "unittest")
    assert again is first and cache == [UNITTEST]
    code, names, expected = first
    assert expected == 2 and "unittest" in names and code.co_filename == "<hidden tests>"
    source = CHECK.format(value=2)
    assert trusted._prepared_tests(source, "check")[2] == 1
    with pytest.raises(harness.HarnessError, match="no test"):
        trusted._prepared_tests(source, "unittest")  # the same source read as another format: its own count


def test_the_oldest_sources_go_once_the_kept_characters_pass_the_bound(cache, monkeypatch):
    sources = [CHECK.format(value=10 + index) for index in range(20)]  # all of one length
    monkeypatch.setattr(trusted, "PREPARED_TESTS_CACHE_CHARS", len(sources[0]) * 5)
    for source in sources:
        trusted._prepared_tests(source, "check")
    assert trusted._PREPARED_CHARS[0] == kept_chars() <= len(sources[0]) * 5
    kept = [source for source, _ in trusted._PREPARED]
    assert kept == sources[-5:]
    trusted._prepared_tests(sources[-5], "check")  # used again: now the most recent, parsed no more
    assert [source for source, _ in trusted._PREPARED][-1] == sources[-5] and len(cache) == 20
    trusted._prepared_tests(sources[0], "check")  # evicted earlier: parsed again
    assert len(cache) == 21 and trusted._PREPARED_CHARS[0] == kept_chars()


def test_a_source_over_the_size_limit_is_prepared_for_its_job_only(cache, monkeypatch):
    monkeypatch.setattr(trusted, "PREPARED_TESTS_MAX_CHARS", 10)
    assert trusted._prepared_tests(UNITTEST, "unittest")[2] == 2
    assert trusted._PREPARED == {} and trusted._PREPARED_CHARS[0] == 0
    trusted._prepared_tests(UNITTEST, "unittest")
    assert len(cache) == 2
