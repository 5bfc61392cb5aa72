"""A provider's "slow down" answer held by its scope: a fair task's failure that says so (a 429 or
503 with ``Retry-After``, ``RetryableError(retry_after=...)``, :class:`~.retry.SlowDown`) is
retried when the pause ends, and its scope waits with it: the account's jobs in the job's queue
(``slow_down_scope = "account"``, the default), every job of the queue (``"queue"``: a
provider-wide answer) or the job alone (``"job"``).

Which failures say so and for how long: retry.py (``FailureVerdict.slow_down``, cut to
``fairqueue_max_slow_down``). Where it is held: the store, in the same enqueue that stores the
retry (enqueue.lua writes the pause; the claim defers the account, or skips the queue, until it
ends: lib/rotation.lua).
"""

from __future__ import annotations

from typing import Any

from .errors import ConfigurationError
from .protocol import SLOW_DOWN_OPTION
from .retry import SLOW_DOWN_SCOPES, FailureVerdict, SlowDown


class ScopedSlowDown:
    """FairTask's part: the ``slow_down_scope`` option and the retry options that carry a
    "slow down" answer's pause to the store."""

    name: str
    #: What a "slow down" answer holds back with its job until it ends: "account" (the
    #: account's jobs in the job's queue), "queue" (the queue's jobs) or "job" (the job alone).
    slow_down_scope: str = "account"

    @classmethod
    def on_bound(cls, app: Any) -> None:
        super().on_bound(app)  # type: ignore[misc]
        if cls.slow_down_scope not in SLOW_DOWN_SCOPES:
            raise ConfigurationError(f"task {cls.name}: slow_down_scope must be one of "
                                     f"{', '.join(SLOW_DOWN_SCOPES)}, not {cls.slow_down_scope!r}")

    def slow_down(self, exc: BaseException, verdict: FailureVerdict) -> dict[str, Any]:
        """The retry's options for a "slow down" answer: the job runs again when its scope's
        pause ends, which the store writes with the retry. The scope is SlowDown's own, else
        the task's."""
        scope = (exc.scope if isinstance(exc, SlowDown) else None) or self.slow_down_scope
        if verdict.slow_down is None or scope == "job":
            return {}
        return {"countdown": verdict.slow_down,
                SLOW_DOWN_OPTION: (scope, verdict.slow_down, verdict.cause or "")}
