"""The recorder as a Celery worker step: a thread in each worker's main process.

Turn it on with ``CELERY_FAIRQUEUE_RECORDER = True`` (``app.conf.fairqueue_recorder``, read when
the worker starts) after ``install(app)`` from this module. Every worker may run one: they share
a Redis lock, so one records and the others stand by (see recorder.py). A deployment that
prefers a process of its own runs ``manage.py fairqueue_recorder`` instead.
"""

from __future__ import annotations

import threading
from typing import Any

from celery import Celery, bootsteps

STOP_TIMEOUT = 10.0


class RecorderStep(bootsteps.StartStopStep):
    """Starts a :class:`~.recorder.Recorder` thread after the pool, stops it at shutdown."""

    label = "fairqueue recorder"
    requires = ("celery.worker.components:Pool",)

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.enabled = bool(worker.app.conf.get("fairqueue_recorder"))
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self, worker: Any) -> None:
        from .recording.recorder import (
            Recorder,  # the models need Django set up, which the worker did
        )

        recorder = Recorder(worker.app, consumer_name=worker.hostname)
        self.thread = threading.Thread(target=recorder.run_forever, args=(self.stop_event,),
                                       name="fairqueue-recorder", daemon=True)
        self.thread.start()

    def stop(self, worker: Any) -> None:
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(STOP_TIMEOUT)

    shutdown = stop


def install(app: Celery) -> Celery:
    """Add the recorder step to ``app``'s workers (it runs when ``fairqueue_recorder`` is on)."""
    if RecorderStep not in app.steps["worker"]:
        app.steps["worker"].add(RecorderStep)
    return app
