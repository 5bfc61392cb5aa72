"""Fault-injection tests: each prints one figure line, e.g. ``redis restart (AOF): ...``."""

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/reliability/" in str(item.fspath):
            item.add_marker(pytest.mark.reliability)
