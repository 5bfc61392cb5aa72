"""The consumer bootstep that ``install`` adds to every worker of the app."""

from __future__ import annotations

from typing import Any

from celery import Celery, bootsteps
from kombu.transport.redis import Transport as RedisTransport

from .control import install_control_commands
from .dispatcher import FairDispatcher

# How long a fair worker's BRPOP on a Redis broker waits before it asks again: kombu's
# ``polling_interval`` transport option, 1 s by default. A message still arrives at once; the
# wait only paces an idle worker's questions (and kombu's check of a silent connection, which
# comes this much later). Fair jobs never pass through the broker: the store wakes the worker.
BROKER_POLL_SECONDS = 5.0


def pace_broker_polling(app: Celery) -> None:
    """Let an idle fair worker ask a Redis broker for messages every :data:`BROKER_POLL_SECONDS`
    instead of every second, unless the app sets ``polling_interval`` itself. Other brokers
    are left as they are: there ``polling_interval`` is a sleep between polls."""
    options = app.conf.broker_transport_options or {}
    if "polling_interval" in options:
        return
    connection = app.connection_for_read()
    try:
        if not issubclass(connection.get_transport_cls(), RedisTransport):
            return
    finally:
        connection.release()
    app.conf.broker_transport_options = {**options, "polling_interval": BROKER_POLL_SECONDS}


class FairConsumerStep(bootsteps.StartStopStep):
    """Claims fair jobs for the consumer; starts after the task strategies exist."""

    requires = ("celery.worker.consumer.tasks:Tasks",)
    label = "FairQueue"

    def __init__(self, c: Any, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        self.dispatcher: FairDispatcher | None = None
        pace_broker_polling(c.app)  # before the Connection step connects to the broker
        install_control_commands()  # inspect scheduled, query_task: the delayed fair jobs

    def start(self, c: Any) -> None:
        if self.dispatcher is None:
            self.dispatcher = FairDispatcher(c)
            c.fairqueue_dispatcher = self.dispatcher  # for the inspect commands (control.py)
        self.dispatcher.start()

    def stop(self, c: Any) -> None:
        if self.dispatcher is not None:
            self.dispatcher.stop()

    def shutdown(self, c: Any) -> None:
        if self.dispatcher is not None:
            self.dispatcher.shutdown()
