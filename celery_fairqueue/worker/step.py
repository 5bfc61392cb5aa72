"""The consumer bootstep that ``install`` adds to every worker of the app."""

from __future__ import annotations

from typing import Any

from celery import bootsteps

from .dispatcher import FairDispatcher


class FairConsumerStep(bootsteps.StartStopStep):
    """Claims fair jobs for the consumer; starts after the task strategies exist."""

    requires = ("celery.worker.consumer.tasks:Tasks",)
    label = "FairQueue"

    def __init__(self, c: Any, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        self.dispatcher: FairDispatcher | None = None

    def start(self, c: Any) -> None:
        if self.dispatcher is None:
            self.dispatcher = FairDispatcher(c)
        self.dispatcher.start()

    def stop(self, c: Any) -> None:
        if self.dispatcher is not None:
            self.dispatcher.stop()

    def shutdown(self, c: Any) -> None:
        if self.dispatcher is not None:
            self.dispatcher.shutdown()
