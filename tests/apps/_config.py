"""Settings every fair test app shares; the crash tests shorten leases through the environment."""

import os


def fair_test_conf() -> dict:
    return {
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "broker_connection_retry_on_startup": True,
        "fairqueue_lease_seconds": float(os.environ.get("FQ_LEASE_SECONDS", "6")),
        "fairqueue_heartbeat_interval": float(os.environ.get("FQ_HEARTBEAT_SECONDS", "1")),
        "fairqueue_reap_interval": 0.5,
        "fairqueue_poll_interval": 0.05,
        "fairqueue_max_deliveries": int(os.environ.get("FQ_MAX_DELIVERIES", "10")),
    }
