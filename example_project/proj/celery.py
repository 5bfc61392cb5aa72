"""The usual Celery-Django wiring: settings come from Django's ``CELERY_*`` names."""

import os

from celery import Celery

import celery_fairqueue
from celery_fairqueue.contrib.django import worker as fairqueue_worker

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")

app = Celery("proj")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
celery_fairqueue.install(app)  # fair publish path for FairTask tasks, and the worker step
fairqueue_worker.install(app)  # records job state in the database (CELERY_FAIRQUEUE_RECORDER)
