"""Moved to the console room: :mod:`celery_fairqueue.contrib.django.console.overview`.

This path is deprecated and warns."""

import warnings

from .console.overview import OverviewPage, account_overview, overview_page

__all__ = ["OverviewPage", "account_overview", "overview_page"]

warnings.warn("celery_fairqueue.contrib.django.overview is deprecated; import from "
              "celery_fairqueue.contrib.django.console.overview",
              DeprecationWarning, stacklevel=2)
