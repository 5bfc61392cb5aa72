"""The task strategy of fair tasks: Celery's default, plus adoption of strays from the broker,
and the task events of fair requests through request.FairEvents (a job's ETA kept).

A fair task's message can still reach the broker when a process that never called ``install``
sends it (``send_task`` by name from another service). The worker moves such a message into the
fair store, where it waits its turn like any other job, and acks it on the broker.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.worker.strategy import default

from ..envelope import Envelope
from ..errors import StoreUnavailableError
from ..protocol import ACCOUNT_HEADER, JOB_KEY_HEADER, delivery_of
from ..publish import eta_timestamp, mask_reprs
from ..redaction import Secrets
from ..store import Lease, store_for
from ..task import FairTask
from .request import FairEvents

logger = logging.getLogger(__name__)

KEPT_PROPERTIES = ("correlation_id", "reply_to", "priority")


def fair_strategy(task: FairTask, app: Any, consumer: Any, **kwargs: Any) -> Any:
    # Celery's strategy takes the consumer's event dispatcher as it is made, for its own
    # task-received event and for each request's: fair jobs' events go through FairEvents.
    dispatcher = getattr(consumer, "event_dispatcher", None)
    if dispatcher is None:  # no events to send (a consumer without the Events step)
        handle = default(task, app, consumer, **kwargs)
    else:
        consumer.event_dispatcher = FairEvents(dispatcher)
        try:
            handle = default(task, app, consumer, **kwargs)
        finally:
            consumer.event_dispatcher = dispatcher

    def task_message_handler(message: Any, body: Any, ack: Any, reject: Any, callbacks: Any,
                             **options: Any) -> Any:
        if isinstance(message.channel, Lease):
            return handle(message, body, ack, reject, callbacks, **options)
        try:
            adopt(app, task, message)
        except StoreUnavailableError as exc:
            # the message is good and the store is away: the broker keeps it for later
            logger.warning("fairqueue: %s[%s] from the broker was not moved into the fair "
                           "store (%s); returned to the broker", task.name,
                           (message.headers or {}).get("id"), exc)
            reject(logger, consumer.connection_errors, requeue=True)
            return None
        ack(logger, consumer.connection_errors)  # the promise of message.ack_log_error
        return None

    return task_message_handler


def adopt(app: Any, task: FairTask, message: Any) -> None:
    """Store a fair task's message that came through the broker; dead-letter it, with why, if
    it cannot be queued (undecodable, not JSON, no account). Only a store failure raises."""
    headers = dict(message.headers or {})
    job_id = delivery_of(headers)
    store = store_for(app)
    body = message.body
    envelope = Envelope(
        body=body.decode("utf-8", "backslashreplace") if isinstance(body, bytes) else str(body),
        content_type=message.content_type, content_encoding=message.content_encoding,
        headers=headers,
        properties={k: message.properties[k] for k in KEPT_PROPERTIES if k in message.properties},
    )
    try:
        args, kwargs, _embed = message.decode()
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise TypeError("its arguments are not a list and a mapping")
        account = task.resolve_account(args, kwargs, headers.get(ACCOUNT_HEADER))
        job_key = task.job_key_for(account, args, kwargs, {})
    except Exception as exc:
        logger.error("fairqueue: %s[%s] from the broker cannot be fair-queued: %s; "
                     "dead-lettered", task.name, headers.get("id"), exc)
        store.bury(job_id, f"arrived through the broker and {exc}",
                   record={"task": task.name, "envelope": envelope.to_json(),
                           "replayable": False})
        return
    headers[ACCOUNT_HEADER] = account
    headers[JOB_KEY_HEADER] = job_key
    if task.redact:  # its sender's reprs, which Celery's events show
        mask_reprs(Secrets.of_call(task.run, args, kwargs, task.redact), headers)
    queue = message.delivery_info.get("routing_key") or app.conf.task_default_queue
    store.enqueue(queue=queue, account=account, job_id=job_id, envelope=envelope.to_json(),
                  job_key=job_key, task=task.name, priority=message.properties.get("priority"),
                  expires=eta_timestamp(app, headers.get("expires")),
                  dedupe=not headers.get("retries") and not headers.get("replaced_task_nesting"))
    logger.info("fairqueue: moved %s[%s] from the broker into the fair store", task.name,
                headers.get("id"))
