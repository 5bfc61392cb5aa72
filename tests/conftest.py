"""Shared fixtures. The harness plugin is registered here only when the installed package's
``pytest11`` entry point has not already done it (e.g. when running from a plain checkout)."""

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("celery_fairqueue"):
        config.pluginmanager.import_plugin("celery_fairqueue.testing")
