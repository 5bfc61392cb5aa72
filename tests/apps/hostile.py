"""The test app of the hostile-values tests: a fair task that records exactly what it received.

Broker, result backend and fair store are the test Redis named by ``$FAIRQUEUE_TEST_REDIS_URL``,
so this module is imported only once the session Redis is up (the tests import it inside a
fixture). ``echo`` and ``echo_keyed`` push ``json.dumps([payload, kwargs], sort_keys=True)`` to
the ``RECEIVED`` list (canonical JSON: ASCII, lone surrogates and NaN spelled out, so it compares
byte for byte, and NaN == NaN as text) and the account they ran for to ``ACCOUNTS``; while the
``FAIL_FLAG`` key exists they then raise :class:`PermanentError`, whose message holds the text
stored at ``ERROR_TEXT`` as the hex of its UTF-8 bytes with surrogates passed through (see
:func:`error_text_value`: lossless, where JSON would read "\\ud800\\udcff" back as one astral
character), and the job is dead-lettered at once.
"""

import json
import os

import redis
from celery import Celery

import celery_fairqueue
from celery_fairqueue import FairTask, PermanentError
from tests.apps._config import fair_test_conf
from tests.harness import REDIS_URL_ENV

REDIS_URL = os.environ[REDIS_URL_ENV]

#: While this key exists, the tasks fail permanently after recording what they received.
FAIL_FLAG = "hostile:fail"
#: The text the permanent failure's message carries, as :func:`error_text_value` stores it.
ERROR_TEXT = "hostile:error-text"
#: Prefix of the failure message; the hostile text follows it.
ERROR_PREFIX = "refused: "
#: List of ``json.dumps([payload, kwargs], sort_keys=True)``, one per run.
RECEIVED = "hostile:received"
#: List of ``json.dumps([account argument, account header], sort_keys=True)``, one per run.
ACCOUNTS = "hostile:accounts"

app = Celery("hostile", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(fair_test_conf())
celery_fairqueue.install(app)

_ledger = redis.Redis.from_url(REDIS_URL, decode_responses=True)


def error_text_value(text: str) -> str:
    """How the tests store the failure text at ``ERROR_TEXT``: any str, lone surrogates too."""
    return text.encode("utf-8", "surrogatepass").hex()


def _echo(task, account, payload, kwargs):
    _ledger.rpush(RECEIVED, json.dumps([payload, kwargs], sort_keys=True))
    _ledger.rpush(ACCOUNTS, json.dumps(
        [account, getattr(task.request, "fairqueue_account", None)], sort_keys=True))
    if _ledger.exists(FAIL_FLAG):
        raw = _ledger.get(ERROR_TEXT)
        text = bytes.fromhex(raw).decode("utf-8", "surrogatepass") if raw else ""
        raise PermanentError(ERROR_PREFIX + text)


@app.task(shared=False, base=FairTask, bind=True, account_arg="account")
def echo(self, account, payload, **kwargs):
    """No business key: any JSON payload (NaN included) can be enqueued."""
    _echo(self, account, payload, kwargs)


@app.task(shared=False, base=FairTask, bind=True, account_arg="account",
          job_key=("account", "payload"))
def echo_keyed(self, account, payload, **kwargs):
    """Keyed by (account, payload): the key hashes canonical JSON, so NaN/inf are refused."""
    _echo(self, account, payload, kwargs)
