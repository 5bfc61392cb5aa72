"""The kombu channel of fair jobs: Celery acks and rejects messages, we settle the lease."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .dispatcher import FairDispatcher


class FairChannel:
    """What kombu's ``Message.ack``/``reject``/``requeue`` call, routed to the fair store."""

    no_ack_consumers = None

    def __init__(self, dispatcher: FairDispatcher) -> None:
        self.dispatcher = dispatcher

    def basic_ack(self, delivery_tag: str, multiple: bool = False) -> None:
        self.dispatcher.settle(delivery_tag, "ack")

    def basic_reject(self, delivery_tag: str, requeue: bool = False) -> None:
        self.dispatcher.settle(delivery_tag, "requeue" if requeue else "reject")
