"""The idempotency markers of a business key around one run: started before the side effect,
done after it, and the reconciliation hook asked when a crash left only the started one."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import StoreUnavailableError
from .protocol import LeaseTicket
from .store import FairStore
from .store.formats.records import Marker

logger = logging.getLogger(__name__)


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
