import logging

from celery_fairqueue.errors import StoreUnavailableError
from celery_fairqueue.worker.outage import Outage


def test_an_outage_is_logged_when_it_starts_when_its_cause_changes_and_when_it_ends(caplog):
    outage = Outage("claiming")
    with caplog.at_level(logging.DEBUG, logger="celery_fairqueue.worker"):
        outage.answered()  # nothing to say
        for _ in range(100):
            outage.failed(StoreUnavailableError("fair store at redis://x is full during claim"))
        outage.failed(StoreUnavailableError("fair store at redis://x: Redis is busy during claim"))
        outage.answered()
        outage.answered()
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 3
    assert lines[0].startswith("fairqueue: claiming failed") and "is full" in lines[0]
    assert "still failing, now" in lines[1] and "busy" in lines[1]
    assert "works again after" in lines[2] and "(101 calls failed)" in lines[2]
