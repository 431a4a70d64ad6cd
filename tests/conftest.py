"""Suite-wide hooks: the xdist group of the running test, for tests/synth_group.py's rule; the command line's paths
grouped by directory (tests/collection_order.py)."""

from __future__ import annotations

import pytest

from tests import synth_group
from tests.collection_order import grouped


def pytest_configure(config: pytest.Config) -> None:
    """Group the command line's paths by directory (:mod:`tests.collection_order`: pytest 9.1 lost a subdirectory's
    conftest fixtures when its files were given apart)."""
    config.args[:] = grouped(list(config.args))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    marker = item.get_closest_marker("xdist_group")
    group = None if marker is None else (marker.args[0] if marker.args else marker.kwargs.get("name"))
    synth_group.running = (item.nodeid, group)


@pytest.hookimpl(trylast=True)
def pytest_runtest_logfinish(nodeid: str, location: tuple) -> None:
    synth_group.running = None
