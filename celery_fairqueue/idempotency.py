"""Business-key idempotency: a job's key is the sha256 of who it is for and what it does, and
its markers guard the side effect: started before the run, done after it (MarkerGuard)."""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import ConfigurationError, SerializationError, StoreUnavailableError
from .protocol import LeaseTicket
from .store.records import Marker

if TYPE_CHECKING:
    from .store import FairStore

logger = logging.getLogger(__name__)

JobKeySpec = Sequence[str] | Callable[..., Any] | None


def hash_identity(parts: Sequence[Any]) -> str:
    """sha256 of canonical JSON: the same parts give the same key in any process or Python."""
    try:
        material = json.dumps(list(parts), sort_keys=True, separators=(",", ":"),
                              ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"job key parts must be JSON values (no NaN or infinity): "
                                 f"{exc}") from None
    return hashlib.sha256(material.encode("ascii")).hexdigest()


@functools.lru_cache(maxsize=4096)
def _signature(run: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(run)


def bound_arguments(run: Callable[..., Any], args: Sequence[Any],
                    kwargs: dict[str, Any]) -> dict[str, Any]:
    """The task's arguments by parameter name, defaults filled in (the signature is read once
    per task: enqueue asks for it up to three times a job)."""
    try:
        signature = _signature(run)
    except TypeError:  # an unhashable callable
        signature = inspect.signature(run)
    bound = signature.bind_partial(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def compute_job_key(task_name: str, account: str, spec: JobKeySpec, run: Callable[..., Any],
                    args: Sequence[Any], kwargs: dict[str, Any]) -> str | None:
    """The business key of one job, or None when the task declares no ``job_key``.

    The task name and account are always part of the identity, so two tasks, or two tenants
    with the same lead id, never share a key.
    """
    if spec is None:
        return None
    if callable(spec):
        identity = spec(*args, **kwargs)
        parts = list(identity) if isinstance(identity, (tuple, list)) else [identity]
    else:
        named = bound_arguments(run, args, kwargs)
        missing = [name for name in spec if name not in named]
        if missing:
            raise ConfigurationError(
                f"task {task_name}: job_key names {missing} that are not among its arguments "
                f"{sorted(named)}")
        parts = [named[name] for name in spec]
    return hash_identity([task_name, account, *parts])


@dataclass(frozen=True)
class MarkerGuard:
    """The markers around one run of a job with a business key. A job claimed from the fair
    store (``ticket``) had its started marker written by the claim, which also read the marker
    as it was; any other delivery reads and writes its markers here."""

    store: FairStore
    task: str  # "name[task id]", for the log
    ticket: LeaseTicket | None

    def before_run(self, job_key: str, job_id: str,
                   already_applied: Callable[[], Any]) -> tuple[bool, Any]:
        """``(True, external id)`` when the job must not run again (done already, or
        ``already_applied`` found its side effect after a crash), else ``(False, None)``, the
        started marker written."""
        marker = self.store.marker(job_key) if self.ticket is None else \
            Marker.read(self.ticket.marker)
        if marker and marker.done:
            logger.info("fairqueue: %s is already done (job key %s...); not run again",
                        self.task, job_key[:12])
            return True, marker.external_id
        if marker and marker.state == "started" and (external_id := already_applied()):
            logger.warning("fairqueue: %s had already applied its side effect before a crash "
                           "(external id %s); marked done, not run again", self.task,
                           external_id)
            self.store.mark_done(job_key, job_id, str(external_id))
            return True, external_id
        if self.ticket is None:
            self.store.mark_started(job_key, job_id)
        return False, None

    def after_run(self, job_key: str, job_id: str, external_id: str | None,
                  timeout: float) -> None:
        """Write the done marker, waiting out a failing store for up to ``timeout`` seconds
        (the side effect has happened); then StoreUnavailableError (a redelivery asks
        ``already_applied``, or repeats the call with the same key)."""
        deadline = time.monotonic() + timeout
        pause = 0.1
        while True:
            try:
                self.store.mark_done(job_key, job_id, external_id)
                return
            except StoreUnavailableError:
                if time.monotonic() + pause > deadline:
                    raise
                time.sleep(pause)
                pause = min(2 * pause, 1.0)
