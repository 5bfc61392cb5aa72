"""The fair publish path: Celery builds its normal message, and we store it instead of sending it.

Every way Celery sends a task (``apply_async``, canvas, ``self.retry``, chord callbacks,
``send_task``) goes through ``app.amqp.send_task_message``; ``install`` wraps it so that messages
of fair tasks go to the fair store and all others to the broker, untouched.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from celery import Celery, signals
from celery.utils.time import maybe_iso8601
from kombu import Queue
from kombu.exceptions import EncodeError
from kombu.serialization import dumps

from .bulk import PendingJob, install_bulk, joining
from .envelope import JSON_CONTENT_TYPE, Envelope
from .errors import (
    DeadLetterNotFound,
    EnqueueError,
    PayloadTooLargeError,
    ReplayLostError,
    SerializationError,
)
from .protocol import (
    ACCOUNT_HEADER,
    JOB_KEY_HEADER,
    LEGACY_JOB_KEY_HEADER,
    SLOW_DOWN_OPTION,
    delivery_of,
    is_fair,
    last_enqueued_task_id,
    task_id_of,
)
from .redaction import Secrets, redact_arguments
from .results import install_result_subscription, put_off_calls, subscribe
from .settings import settings_for
from .store import EnqueueResult, store_for
from .task import FairTask

logger = logging.getLogger(__name__)

#: The encoder of the event's arguments, made once (json.dumps makes one a call).
_SHOWN = json.JSONEncoder(default=str)

# send_task_message keywords that steer publishing; any others become message properties.
PUBLISH_OPTIONS = frozenset({
    "exchange", "routing_key", "queue", "event_dispatcher", "retry", "retry_policy",
    "serializer", "delivery_mode", "compression", "declare", "headers", "exchange_type",
    "timeout", "confirm_timeout", "fairqueue_replays",
})


def install_publish_path(app: Celery) -> None:
    """Wrap ``app.amqp.send_task_message`` so fair tasks' messages go to the fair store.

    Celery's sender (a cached property) reads ``app.conf`` when it is made, so it is made at
    the first send, not here: ``install`` must not freeze Celery's defaults before the app's
    configuration (Django's settings) is loaded. A fair task's result subscription waits for the
    store to take the job (see results.py)."""
    install_result_subscription(app)
    install_bulk(app)
    amqp = app.amqp
    made: list[Any] = [amqp.__dict__.get("send_task_message")]
    if getattr(made[0], "fairqueue", False):
        return

    def broker_send(producer: Any, name: str, message: Any, **options: Any) -> Any:
        if made[0] is None:
            made[0] = type(amqp).send_task_message.func(amqp)
        return made[0](producer, name, message, **options)

    def send_task_message(producer: Any, name: str, message: Any, **options: Any) -> Any:
        task = app.tasks.get(name)
        if not is_fair(task):
            return broker_send(producer, name, message, **options)
        batch = joining()
        if batch is not None:  # a group's, a chord header's: stored as the group's block ends
            try:
                pending = prepare_fair(app, task, producer, message, options)
            except EnqueueError as exc:  # refused: told in its place as the block ends
                batch.refuse(task_id_of(delivery_of(message[0])), exc)
                return None
            batch.add(pending)
            return None
        try:
            result = publish_fair(app, task, producer, message, options)
        except DeadLetterNotFound as exc:  # a KeyError: kombu would call it a lost connection
            raise ReplayLostError(str(exc)) from exc
        last_enqueued_task_id.set(result.task_id)
        return None

    send_task_message.fairqueue = True  # type: ignore[attr-defined]
    amqp.send_task_message = send_task_message


def queue_name(app: Celery, options: dict[str, Any]) -> str:
    queue = options.get("queue")
    if isinstance(queue, Queue):
        return str(queue.name)
    if queue:
        return str(queue)
    return str(options.get("routing_key") or app.conf.task_default_queue)


def eta_timestamp(app: Celery, eta: Any) -> float | None:
    if not eta:
        return None
    when = maybe_iso8601(eta)
    if not isinstance(when, datetime):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=app.timezone)
    return when.timestamp()


def publish_fair(app: Celery, task: FairTask, producer: Any, message: Any,
                 options: dict[str, Any]) -> EnqueueResult:
    """Store one Celery task message of a fair task; returns the job that holds it."""
    pending = prepare_fair(app, task, producer, message, options)
    result = store_for(app).enqueue(**pending.job)
    pending.announce(result)
    return result


def prepare_fair(app: Celery, task: FairTask, producer: Any, message: Any,
                 options: dict[str, Any]) -> PendingJob:
    """One Celery task message of a fair task made ready to store: the store's enqueue
    keywords, and what to announce once it is stored (Celery's ``after_task_publish`` and
    task-sent event for a new job, the result subscription put off by results.py)."""
    headers, properties, body, sent_event = message
    options = dict(options)
    slow_down = options.pop(SLOW_DOWN_OPTION, None)  # a retry's (slowdown.py)
    if options.get("headers"):
        headers.update(options["headers"])
    serializer = options.get("serializer") or app.conf.task_serializer
    if serializer != "json":
        raise SerializationError(
            f"task {task.name}: fair jobs are serialized as JSON only, not {serializer!r} "
            "(set task_serializer='json')")
    args, kwargs, _embed = body
    data = serialize_body(task.name, body)
    named = task.bind_call(args, kwargs)  # once, for the account, the key and the event
    if task.redact:  # whoever built the message (send_task by name too): no value in clear
        mask_reprs(Secrets.of_named(dict(kwargs) if named is None else named, task.redact),
                    headers, sent_event)
    account = task.resolve_account(args, kwargs, options.pop("account", None), named)
    job_key = task.job_key_for(account, args, kwargs, options, named)
    headers[ACCOUNT_HEADER] = account
    headers[JOB_KEY_HEADER] = job_key
    headers.pop(LEGACY_JOB_KEY_HEADER, None)
    properties.update({k: v for k, v in options.items() if k not in PUBLISH_OPTIONS})
    qname = queue_name(app, options)

    signals.before_task_publish.send(
        sender=task.name, body=body, exchange="", routing_key=qname, declare=[],
        headers=headers, properties=properties, retry_policy={})
    envelope = encode_envelope(app, task.name, data, headers, properties)
    # a retry, or a replacement (Task.replace), is the next delivery of a job already stored:
    # never deduplicated against the business key it holds itself
    first = not headers.get("retries") and not headers.get("replaced_task_nesting")
    job = {
        "queue": qname, "account": account, "job_id": delivery_of(headers),
        "envelope": envelope, "due": eta_timestamp(app, headers.get("eta")),
        "job_key": job_key, "dedupe": first, "task": task.name,
        "priority": _priority(properties.get("priority")),
        "expires": eta_timestamp(app, headers.get("expires")),
        "replays": options.get("fairqueue_replays") or "",
        "slow_down": slow_down,
        "shown_args": shown_arguments(dict(kwargs) if named is None else named, task.redact)}
    subscriptions = put_off_calls()

    def announce(result: EnqueueResult) -> None:
        subscribe(subscriptions, task.name, result.task_id)
        if not result.created:
            return
        signals.after_task_publish.send(
            sender=task.name, body=body, exchange="", routing_key=qname, headers=headers,
            properties=properties)
        if sent_event:
            dispatcher = options.get("event_dispatcher") or app.amqp._event_dispatcher
            if dispatcher is not None:
                sent_event.update({"queue": qname, "exchange": "", "routing_key": qname})
                dispatcher.publish("task-sent", sent_event, producer)

    return PendingJob(job, announce)


def mask_reprs(secrets: Secrets, headers: dict[str, Any], sent_event: Any = None) -> None:
    """Celery's ``argsrepr``/``kwargsrepr`` (in the message and its task-sent event), the
    secrets masked wherever they quote them (a truncating repr's cut-off start too)."""
    for key, event_key in (("argsrepr", "args"), ("kwargsrepr", "kwargs")):
        if isinstance(headers.get(key), str):
            headers[key] = secrets.cut_text(headers[key])
        if isinstance(sent_event, dict) and isinstance(sent_event.get(event_key), str):
            sent_event[event_key] = secrets.cut_text(sent_event[event_key])


def shown_arguments(named: dict[str, Any], redact: Sequence[str]) -> str:
    """The job's arguments as its event shows them: by name, the ``redact`` ones masked."""
    return _SHOWN.encode(redact_arguments((), named, redact)["kwargs"] if redact else named)


def serialize_body(task_name: str, body: Any) -> str:
    """The message body as JSON; refuse what JSON cannot hold, naming the task."""
    try:
        content_type, _encoding, data = dumps(body, serializer="json")
    except EncodeError as exc:
        raise SerializationError(
            f"task {task_name}: arguments are not JSON-serializable ({exc}); pass ids and plain "
            "values, not objects") from None
    assert content_type == JSON_CONTENT_TYPE
    return str(data)


def encode_envelope(app: Celery, task_name: str, data: str, headers: dict[str, Any],
                    properties: dict[str, Any]) -> str:
    """The stored form of a message; refuse one over ``fairqueue_max_payload_bytes``."""
    envelope = Envelope(body=data, headers=headers, properties=properties).to_json()
    limit = settings_for(app).max_payload_bytes
    size = len(envelope.encode())
    if size > limit:
        raise PayloadTooLargeError(
            f"task {task_name} (account {headers.get(ACCOUNT_HEADER)!r}): message of {size} bytes "
            f"is over fairqueue_max_payload_bytes={limit}; store large data elsewhere and pass "
            "its id")
    return envelope


def _priority(value: Any) -> int:
    """Celery's ``priority`` as the Redis transport reads it: 0 (the default) first, 9 last."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
