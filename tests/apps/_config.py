"""Settings every fair test app shares; the crash and scale tests shorten leases and retention
through the environment."""

import os
import time


def fair_test_conf() -> dict:
    return {
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "broker_connection_retry_on_startup": True,
        "fairqueue_lease_seconds": float(os.environ.get("FQ_LEASE_SECONDS", "6")),
        "fairqueue_heartbeat_interval": float(os.environ.get("FQ_HEARTBEAT_SECONDS", "1")),
        "fairqueue_reap_interval": 0.5,
        "fairqueue_poll_interval": float(os.environ.get("FQ_POLL_INTERVAL", "0.05")),
        # off only where a test needs the worker's pub/sub connections to be the store's own
        "worker_enable_remote_control": os.environ.get("FQ_REMOTE_CONTROL", "1") == "1",
        "fairqueue_max_deliveries": int(os.environ.get("FQ_MAX_DELIVERIES", "10")),
        "fairqueue_job_retention": float(os.environ.get("FQ_JOB_RETENTION", "86400")),
        "fairqueue_shards": int(os.environ.get("FQ_SHARDS", "1")),
        "fairqueue_shards_check_interval": float(os.environ.get("FQ_SHARDS_CHECK_SECONDS", "60")),
    }


def apply_clock_skew() -> None:
    """Skew this process's wall clock by ``$FQ_CLOCK_SKEW`` seconds (the clock-skew tests).

    Debian's libfaketime would do it for the whole process, but under it Python's timed waits
    hang (a faked monotonic clock) or ``time.sleep`` fails with EINVAL (a real one), so the
    Python-level clock is shifted instead: it is what Celery and this package would read.
    """
    skew = float(os.environ.get("FQ_CLOCK_SKEW", "0"))
    if skew:
        real_time, real_time_ns = time.time, time.time_ns
        time.time = lambda: real_time() + skew
        time.time_ns = lambda: real_time_ns() + int(skew * 1e9)
