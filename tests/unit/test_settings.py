"""Settings: lower-case fairqueue_* on app.conf, CELERY_FAIRQUEUE_* through Django's namespace."""

import pytest
from celery import Celery

from celery_fairqueue import ConfigurationError
from celery_fairqueue.settings import FairqueueSettings
from celery_fairqueue.worker.step import pace_broker_polling


def test_defaults_take_the_redis_broker_url():
    settings = FairqueueSettings.from_app(Celery("t", broker="redis://127.0.0.1:6390/2"))
    assert settings.redis_url == "redis://127.0.0.1:6390/2"
    assert settings.lease_seconds == 60.0


def test_django_style_namespaced_settings_are_read():
    class DjangoSettings:
        CELERY_BROKER_URL = "redis://127.0.0.1:6390/0"
        CELERY_FAIRQUEUE_LEASE_SECONDS = "120"
        CELERY_FAIRQUEUE_DEFAULT_RATE = "5/s"

    app = Celery("t")
    app.config_from_object(DjangoSettings, namespace="CELERY")
    settings = FairqueueSettings.from_app(app)
    assert settings.lease_seconds == 120.0
    assert settings.default_limit.per_second == 5.0


def test_a_non_redis_broker_needs_an_explicit_redis_url():
    with pytest.raises(ConfigurationError, match="fairqueue_redis_url is not set"):
        FairqueueSettings.from_app(Celery("t", broker="amqp://guest@localhost//"))
    app = Celery("t", broker="amqp://guest@localhost//")
    app.conf.fairqueue_redis_url = "redis://127.0.0.1:6390/0"
    assert FairqueueSettings.from_app(app).redis_url == "redis://127.0.0.1:6390/0"


@pytest.mark.parametrize("name,value,message", [
    ("fairqueue_lease_seconds", "soon", "fairqueue_lease_seconds = 'soon' is not a number"),
    ("fairqueue_lease_seconds", 0, "fairqueue_lease_seconds must be positive"),
    ("fairqueue_heartbeat_interval", 40, "at most half of fairqueue_lease_seconds"),
    ("fairqueue_claim_batch", 0, "fairqueue_claim_batch must be at least 1"),
    ("fairqueue_default_rate", "fast", "fairqueue_default_\\*: rate 'fast'"),
])
def test_invalid_settings_fail_fast_naming_the_setting(name, value, message):
    app = Celery("t", broker="redis://127.0.0.1:6390/0")
    app.conf[name] = value
    with pytest.raises(ConfigurationError, match=message):
        FairqueueSettings.from_app(app)


def test_the_guide_lists_every_setting_with_its_default():
    from dataclasses import fields
    from pathlib import Path

    from celery_fairqueue.settings import FairqueueSettings

    guide = (Path(__file__).parents[2] / "docs" / "guide.md").read_text()
    for spec in fields(FairqueueSettings):
        assert (f"| `fairqueue_{spec.name}` | `CELERY_FAIRQUEUE_{spec.name.upper()}` | "
                f"`{spec.default!r}` |") in guide, spec.name


def test_the_guide_lists_the_django_apps_own_settings():
    from pathlib import Path

    guide = (Path(__file__).parents[2] / "docs" / "guide.md").read_text()
    assert "| `fairqueue_recorder` | `CELERY_FAIRQUEUE_RECORDER` | `False` |" in guide
    assert "| - | `CELERY_FAIRQUEUE_APP` | `None` |" in guide


@pytest.mark.parametrize("broker, options, paced", [
    ("redis://127.0.0.1:6390/0", {}, 5.0),
    ("sentinel://127.0.0.1:26379/0", {"master_name": "m"}, 5.0),
    ("redis://127.0.0.1:6390/0", {"polling_interval": 1}, 1),  # the app's own choice stays
    ("amqp://127.0.0.1//", {}, None),  # elsewhere polling_interval is a sleep between polls
])
def test_a_fair_worker_paces_only_a_redis_brokers_polling(broker, options, paced):
    app = Celery("t", broker=broker)
    app.conf.broker_transport_options = dict(options)
    pace_broker_polling(app)
    assert app.conf.broker_transport_options.get("polling_interval") == paced
    assert {k: v for k, v in app.conf.broker_transport_options.items()
            if k != "polling_interval"} == {k: v for k, v in options.items()
                                            if k != "polling_interval"}
