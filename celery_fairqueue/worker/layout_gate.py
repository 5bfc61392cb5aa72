"""Whether a worker may claim: the store's layout is this version's.

Asked before the first claim, and before each claim until it may. A store that still holds jobs
of the layout before records stops the worker (StoreLayoutError, store/writers/upgrade.py,
whose adoption of that layout's idempotency records runs here); a store at layout format 1 (an
earlier version wrote it) waits for `fairqueue upgrade` (store/shards/format_upgrade.py); a
store out of reach is asked again.
"""

from __future__ import annotations

import logging

from ..errors import FairqueueError, StoreLayoutError
from ..store import FairStore
from ..store.writers.upgrade import require_current_layout
from .outage import Outage

logger = logging.getLogger(__name__)


def layout_ready(store: FairStore, outage: Outage) -> bool:
    """True once the worker may claim; raises StoreLayoutError while the store holds jobs of
    the layout before records; a failure to reach the store goes to ``outage``."""
    try:
        store.check_shards()
        adopted = require_current_layout(store)
    except StoreLayoutError:
        raise
    except FairqueueError as exc:
        outage.failed(exc)
        return False
    if adopted:
        logger.info("fairqueue: adopted the idempotency records of %d business keys from the "
                    "previous store layout", adopted)
    return store.format_ready()
