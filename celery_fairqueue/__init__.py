"""Fair, rate-limited, idempotent multi-tenant jobs for Celery."""

__version__ = "0.1.0"
