"""The kombu side of fair jobs: a claimed job becomes the message Celery would have received
from the broker, and Celery's ack, reject and requeue of it settle the job's lease."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from kombu.message import Message
from kombu.serialization import loads

from ..envelope import JSON_CONTENT_TYPE, Envelope, MalformedEnvelopeError
from ..protocol import EXPIRED_HEADER, MARKER_HEADER
from ..store import ClaimedJob

if TYPE_CHECKING:
    from .dispatcher import FairDispatcher

ACCEPT = {JSON_CONTENT_TYPE}


class Settler(Protocol):
    def settle(self, job_id: str, outcome: str, reason: str | None = None) -> None: ...

    def succeeded(self, job_id: str) -> None: ...


class FairChannel:
    """What kombu's ``Message.ack``/``reject``/``requeue`` call, routed to the fair store."""

    no_ack_consumers = None

    def __init__(self, dispatcher: FairDispatcher | Settler) -> None:
        self.dispatcher = dispatcher

    def basic_ack(self, delivery_tag: str, multiple: bool = False) -> None:
        self.dispatcher.settle(delivery_tag, "ack")

    def basic_reject(self, delivery_tag: str, requeue: bool = False) -> None:
        self.dispatcher.settle(delivery_tag, "requeue" if requeue else "reject")

    def succeeded(self, delivery_tag: str) -> None:
        """The task succeeded (called before Celery's ack): the ack marks its key done."""
        self.dispatcher.succeeded(delivery_tag)

    def give_back(self, delivery_tag: str) -> None:
        """The run could not write to the store: again after a moment (see FairRequest)."""
        self.dispatcher.settle(delivery_tag, "give_back")


def read_envelope(job: ClaimedJob) -> Envelope:
    """The job's stored message, checked to be Celery's ``[args, kwargs, embed]`` in JSON;
    raises what is wrong with it, so one bad job is dead-lettered alone, with its reason."""
    envelope = Envelope.from_json(job.envelope)
    body = loads(envelope.body, envelope.content_type, envelope.content_encoding, accept=ACCEPT)
    if not (isinstance(body, list) and len(body) == 3 and isinstance(body[0], list)
            and isinstance(body[1], dict) and isinstance(body[2], dict | None)):
        raise MalformedEnvelopeError("the body is not [args (a list), kwargs (an object), "
                                     "embed (an object)]")
    if not isinstance(envelope.task_name, str):
        raise MalformedEnvelopeError("the message names no task")
    return envelope


def job_message(job: ClaimedJob, envelope: Envelope, channel: Any,
                expired: bool = False) -> Message:
    """The kombu message of a claimed job, as the broker would have delivered it, with the
    marker the claim found (see protocol.MARKER_HEADER); ``expired`` marks one the claim
    dropped past its ``expires``, for Celery to record as revoked."""
    # The eta stays in the headers for the task's request (self.request.eta), as with the
    # broker; FairRequest keeps Celery's strategy from waiting for it again.
    headers = {**envelope.headers, MARKER_HEADER: job.marker}
    if expired:
        headers[EXPIRED_HEADER] = True
    # kombu's virtual transports default the priority property to 0, and Celery reports it
    # as delivery_info['priority'].
    properties = {**envelope.properties, "priority": envelope.properties.get("priority") or 0}
    return Message(
        body=envelope.body, delivery_tag=job.job_id, content_type=envelope.content_type,
        content_encoding=envelope.content_encoding, headers=headers,
        properties=properties, channel=channel, accept=ACCEPT,
        delivery_info={"exchange": "", "routing_key": job.queue,
                       "redelivered": job.deliveries > 1, "priority": properties["priority"]},
    )
