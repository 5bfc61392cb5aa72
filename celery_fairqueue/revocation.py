"""A fair job taken out of the store while it waited (revoked, cancelled, purged) ends as Celery
ends a revoked task: ``REVOKED`` in the result backend and a ``task-revoked`` event.

Plain Celery's worker sends ``task-revoked`` when a revoked task's message reaches it. A waiting
fair job reaches no worker: the process that takes it out of the store (the caller of
``cancel``, ``app.control.revoke`` or ``purge``: a web request, Flower, the CLI) is where it
ends, so that process records it and sends the event, through a Dispatcher on the app's broker
connection, as a producer sends ``task-sent``; its node name (``gen<pid>@<host>``) is the
event's hostname. A job the claim drops past its ``expires`` is the worker's to announce
(``expired=True``, worker/request.py), as Celery's worker does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from celery import Celery

logger = logging.getLogger(__name__)

CANCELLED = "cancelled while waiting in the fair store"
PURGED = "purged from the fair store while waiting"


def announce_revoked(app: Celery, task_ids: Iterable[str], reason: str = CANCELLED) -> None:
    """Record the Celery tasks ``task_ids``, taken out of the store unrun, as revoked: in the
    result backend and with a ``task-revoked`` event each. The event is best effort: a broker
    that cannot take it costs the event, logged, not the revoke."""
    ids = list(dict.fromkeys(task_ids))
    if not ids:
        return
    for task_id in ids:
        app.backend.mark_as_revoked(task_id, reason=reason)
    try:
        with app.producer_or_acquire() as producer:
            # a broker that is away costs one short try (~2 s), not the default retries (~6 s)
            producer.connection.ensure_connection(max_retries=1)
            with app.events.Dispatcher(producer.connection, channel=producer.channel,
                                       buffer_while_offline=False) as dispatcher:
                for task_id in ids:
                    dispatcher.send("task-revoked", uuid=task_id, terminated=False,
                                    signum=None, expired=False)
    except Exception as exc:  # the broker's errors, whichever transport it is
        logger.warning("fairqueue: %d revoked fair jobs (%s...) sent no task-revoked event: %s",
                       len(ids), ids[0], exc)
