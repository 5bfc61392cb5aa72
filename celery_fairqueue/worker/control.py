"""Celery's remote control told about the fair store: ``celery inspect scheduled`` and
``query_task`` of a fair worker also answer for the delayed jobs that wait in the store.

Plain Celery keeps an eta or countdown task in the memory of the worker that received it, and
that worker lists it (``inspect scheduled``) and finds it (``query_task``: "scheduled"). A fair
job waits in the fair store until it is due and belongs to no worker until one claims it, so
one live worker per queue answers for the queue's delayed jobs: the first, by name (then by its
lease token), of the live workers that consume it. Each job is listed once across the workers
asked, with the reply shape of Celery's own entries (``eta``, ``priority``, ``request``, the
request as Celery's ``Request.info()`` shows it).

Celery's commands are wrapped, not replaced: their own answer comes first and is kept as is.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Collection, Iterable, Iterator
from datetime import datetime
from typing import Any

from celery.utils.imports import symbol_by_name
from celery.worker.control import Panel, inspect_command

from ..errors import FairqueueError
from ..protocol import task_id_of
from ..store import ScheduledJob, StoreInspector
from .channel import job_message, read_envelope

logger = logging.getLogger(__name__)

#: The priority of the timer entry Celery's strategy gives an eta request (its ``call_at(...,
#: priority=6)``), which ``inspect scheduled`` shows.
ETA_PRIORITY = 6
#: Most delayed jobs one worker's reply lists (soonest first): a reply travels as one message.
MAX_LISTED = 1000
#: A message's eta and the store's due time (a float of seconds) differ by rounding only when
#: the store waits for that eta; else the job waits for something else (a give-back, a retry).
SAME_TIME = 0.001

_WRAPPED = "_fairqueue_wrapped"


def install_control_commands() -> None:
    """Wrap Celery's ``scheduled`` and ``query_task`` inspect commands (once per process:
    Celery's registry of commands is global; a worker without the fair step adds nothing)."""
    for name, extend in (("scheduled", _scheduled), ("query_task", _query_task)):
        celerys = Panel.data[name]
        if getattr(celerys, _WRAPPED, False):
            continue
        meta = Panel.meta[name]
        command = _wrap(celerys, extend)
        inspect_command(name=name, alias=meta.alias, visible=meta.visible,
                        default_timeout=meta.default_timeout, help=meta.help,
                        signature=meta.signature, args=meta.args,
                        variadic=meta.variadic)(command)


def _wrap(celerys: Callable[..., Any], extend: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(celerys)
    def command(state: Any, *args: Any, **kwargs: Any) -> Any:
        reply = celerys(state, *args, **kwargs)
        delayed = DelayedJobs.of(state.consumer)
        if delayed is None:
            return reply
        try:
            return extend(reply, delayed, *args, **kwargs)
        except FairqueueError as exc:
            logger.warning("fairqueue: %s lists no delayed fair jobs: %s", celerys.__name__, exc)
            return reply

    setattr(command, _WRAPPED, True)
    return command


def _scheduled(reply: list[dict[str, Any]], delayed: DelayedJobs,
               **kwargs: Any) -> list[dict[str, Any]]:
    return [*reply, *delayed.entries()]


def _query_task(reply: dict[str, Any], delayed: DelayedJobs, ids: Any,
                **kwargs: Any) -> dict[str, Any]:
    wanted = {ids} if isinstance(ids, str) else set(ids or ())
    missing = wanted - set(reply)
    if not missing:
        return reply
    found = {entry["request"]["id"]: ("scheduled", entry["request"])
             for entry in delayed.entries(missing)}
    return {**reply, **found}


class DelayedJobs:
    """The delayed fair jobs this worker answers for, as Celery lists its scheduled requests."""

    def __init__(self, consumer: Any, queues: Iterable[str], token: str) -> None:
        self.consumer = consumer
        self.app = consumer.app
        self.queues = sorted(queues)
        self.token = token
        self.inspector = StoreInspector(self.app)

    @classmethod
    def of(cls, consumer: Any) -> DelayedJobs | None:
        """The delayed jobs of ``consumer``'s fair step (None: not a fair worker). The step
        sets ``consumer.fairqueue_dispatcher`` when it starts, as Celery's own steps set
        theirs (``consumer.heart``, ``consumer.gossip``)."""
        dispatcher = getattr(consumer, "fairqueue_dispatcher", None)
        if dispatcher is None:
            return None
        return cls(consumer, dispatcher.queues, dispatcher.token)

    def reported_queues(self) -> list[str]:
        """The queues whose delayed jobs this worker lists: those it consumes whose first live
        consumer (by name, then lease token) it is. A worker not in the registry yet (it
        registers as it starts, then on each heartbeat) counts itself."""
        me = (str(self.consumer.hostname), self.token)
        workers = self.inspector.console.workers()
        return [queue for queue in self.queues
                if min([me, *((w.name, w.id) for w in workers if queue in w.queues)]) == me]

    def entries(self, task_ids: Collection[str] | None = None) -> list[dict[str, Any]]:
        """Celery's ``inspect scheduled`` entries of the jobs this worker answers for (of the
        tasks ``task_ids`` only, when given)."""
        queues = self.reported_queues()
        if not queues:
            return []
        jobs = self.inspector.scheduled(queues, MAX_LISTED)
        if task_ids is not None:
            jobs = [job for job in jobs if task_id_of(job.job_id) in task_ids]
        return list(self._entries(jobs))

    def _entries(self, jobs: Iterable[ScheduledJob]) -> Iterator[dict[str, Any]]:
        for job in jobs:
            request = self._request(job)
            if request is None:
                continue
            yield {"eta": self._eta(request, job.due).isoformat(),
                   "priority": ETA_PRIORITY, "request": request.info()}

    def _request(self, job: ScheduledJob) -> Any:
        """Celery's request of the job, as this worker would receive it (None: a job it could
        not run, which its claim will dead-letter)."""
        try:
            envelope = read_envelope(job.envelope or "")
            task = self.app.tasks[envelope.task_name]
            request_cls = symbol_by_name(task.Request)
            return request_cls(job_message(envelope, job.queue, job.job_id), app=self.app,
                               hostname=self.consumer.hostname, task=task)
        except Exception as exc:
            logger.debug("fairqueue: delayed job %s (%s) is not listed: %s", job.job_id,
                         task_id_of(job.job_id), exc)
            return None

    def _eta(self, request: Any, due: float) -> datetime:
        """The message's own eta when the store waits for it, else the store's due time."""
        eta = getattr(request, "message_eta", None)
        if isinstance(eta, datetime) and abs(eta.timestamp() - due) < SAME_TIME:
            return eta
        return datetime.fromtimestamp(due, tz=self.app.timezone)
