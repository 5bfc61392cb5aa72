"""The kombu side of a lease: a claimed job becomes the message Celery would have received from
the broker, whose channel is the lease itself, so Celery's ack, reject and requeue of it settle
the lease (see store/writers/leases.py)."""

from __future__ import annotations

from typing import Any

from kombu.message import Message
from kombu.serialization import loads

from ..envelope import JSON_CONTENT_TYPE, Envelope, MalformedEnvelopeError
from ..protocol import EXPIRED_HEADER, LEASE_HEADER
from ..store import Lease

ACCEPT = {JSON_CONTENT_TYPE}


def read_envelope(job: Lease | str) -> Envelope:
    """The job's stored message (of a lease, or as stored), checked to be Celery's ``[args,
    kwargs, embed]`` in JSON; raises what is wrong with it, so one bad job is dead-lettered
    alone, with its reason."""
    envelope = Envelope.from_json(job if isinstance(job, str) else job.envelope)
    body = loads(envelope.body, envelope.content_type, envelope.content_encoding, accept=ACCEPT)
    if not (isinstance(body, list) and len(body) == 3 and isinstance(body[0], list)
            and isinstance(body[1], dict) and isinstance(body[2], dict | None)):
        raise MalformedEnvelopeError("the body is not [args (a list), kwargs (an object), "
                                     "embed (an object)]")
    if not isinstance(envelope.task_name, str):
        raise MalformedEnvelopeError("the message names no task")
    return envelope


def lease_message(lease: Lease, envelope: Envelope, acked_after_run: bool) -> Message:
    """The kombu message of a leased job, as the broker would have delivered it, with the
    lease's ticket for the task (``acked_after_run``: its task's ``acks_late``); an expired
    lease's message is marked for Celery to record it as revoked."""
    # The eta stays in the headers for the task's request (self.request.eta), as with the
    # broker; FairRequest keeps Celery's strategy from waiting for it again.
    headers: dict[str, Any] = {LEASE_HEADER: lease.ticket(acked_after_run).header()}
    if lease.expired:
        headers[EXPIRED_HEADER] = True
    return job_message(envelope, lease.queue, lease.job_id, redelivered=lease.deliveries > 1,
                       channel=lease, headers=headers)


def job_message(envelope: Envelope, queue: str, job_id: str, *, redelivered: bool = False,
                channel: Lease | None = None, headers: dict[str, Any] | None = None) -> Message:
    """The kombu message of a stored job as the broker would have delivered it from ``queue``
    (``channel``: the lease that settles it; None for a job only shown, not run), with
    ``headers`` added to its own."""
    # kombu's virtual transports default the priority property to 0, and Celery reports it
    # as delivery_info['priority'].
    properties = {**envelope.properties, "priority": envelope.properties.get("priority") or 0}
    return Message(
        body=envelope.body, delivery_tag=job_id, content_type=envelope.content_type,
        content_encoding=envelope.content_encoding, headers={**envelope.headers, **(headers or {})},
        properties=properties, channel=channel, accept=ACCEPT,
        delivery_info={"exchange": "", "routing_key": queue, "redelivered": redelivered,
                       "priority": properties["priority"]},
    )
