"""The fair-queue metrics as a Django view, oldest-ready age included (from the Job table).

``urlpatterns += [path("metrics", metrics_view.metrics)]``, behind whatever guards your other
internal endpoints: the view itself checks no permission, like a Prometheus exporter.
"""

from __future__ import annotations

from functools import cache

from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from ...metrics import make_registry
from .conf import celery_app
from .console.queries import oldest_ready_age_by_queue


@cache
def registry() -> CollectorRegistry:
    """Built on the first scrape, so the settings are read lazily."""
    return make_registry(celery_app(), oldest_ready_age=oldest_ready_age_by_queue)


def metrics(request: HttpRequest) -> HttpResponse:
    """The Prometheus text exposition of the fair store and the recorded job state."""
    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE_LATEST)
