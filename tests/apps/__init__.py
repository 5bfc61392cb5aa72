"""Celery apps that tests start real workers for (``celery -A tests.apps.<name> worker``)."""
