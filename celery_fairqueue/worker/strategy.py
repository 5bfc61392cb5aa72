"""The task strategy of fair tasks: Celery's default, plus adoption of strays from the broker.

A fair task's message can still reach the broker when a process that never called ``install``
sends it (``send_task`` by name from another service). The worker moves such a message into the
fair store, where it waits its turn like any other job, and acks it on the broker.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.worker.strategy import default

from ..envelope import Envelope
from ..errors import FairqueueError
from ..protocol import ACCOUNT_HEADER, JOB_KEY_HEADER, delivery_id
from ..store import store_for
from ..task import FairTask
from .channel import FairChannel

logger = logging.getLogger(__name__)

KEPT_PROPERTIES = ("correlation_id", "reply_to", "priority")


def fair_strategy(task: FairTask, app: Any, consumer: Any, **kwargs: Any) -> Any:
    handle = default(task, app, consumer, **kwargs)

    def task_message_handler(message: Any, body: Any, ack: Any, reject: Any, callbacks: Any,
                             **options: Any) -> Any:
        if isinstance(message.channel, FairChannel):
            return handle(message, body, ack, reject, callbacks, **options)
        adopt(app, task, message)
        ack(logger, consumer.connection_errors)  # the promise of message.ack_log_error
        return None

    return task_message_handler


def adopt(app: Any, task: FairTask, message: Any) -> None:
    """Store a fair task's message that came through the broker; bury it if it can't be queued."""
    headers = dict(message.headers)
    raw_body = message.body.decode() if isinstance(message.body, bytes) else message.body
    envelope = Envelope(
        body=raw_body, content_type=message.content_type,
        content_encoding=message.content_encoding, headers=headers,
        properties={k: message.properties[k] for k in KEPT_PROPERTIES if k in message.properties},
    )
    store = store_for(app)
    job_id = delivery_id(headers.get("id", ""), int(headers.get("retries") or 0))
    try:
        args, kwargs, _embed = message.decode()
        account = task.resolve_account(args, kwargs, headers.get(ACCOUNT_HEADER))
        job_key = task.business_key(account, args, kwargs)
        headers[ACCOUNT_HEADER] = account
        headers[JOB_KEY_HEADER] = job_key
        queue = message.delivery_info.get("routing_key") or app.conf.task_default_queue
        store.enqueue(queue=queue, account=account, job_id=job_id, envelope=envelope.to_json(),
                      job_key=job_key, dedupe=not headers.get("retries"), task=task.name)
        logger.info("fairqueue: moved %s[%s] from the broker into the fair store", task.name,
                    headers.get("id"))
    except (FairqueueError, ValueError, TypeError) as exc:
        logger.error("fairqueue: %s[%s] from the broker cannot be fair-queued: %s; "
                     "dead-lettered", task.name, headers.get("id"), exc)
        store.bury(job_id, f"arrived through the broker and {exc}",
                   record={"task": task.name, "envelope": envelope.to_json()})
