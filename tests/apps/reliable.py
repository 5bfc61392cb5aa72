"""The test app of the reliable-jobs tests: failures on demand, crash windows, a fake API.

Behaviour is steered through the test Redis, so a test can change it while workers run:
``fail:<lead>`` holds how the next attempts fail ("permanent", "retry:<n>", "http:<status>:<n>",
"retry_after:<seconds>:<n>"); ``attempts`` counts attempts per lead and ``attempt_times`` lists
them. Side effects go through ``fake_api``, which, like a real API with an idempotency-key
header, accepts each key once; the ledger counts what it accepted, ``calls`` what was sent.
"""

import os
import time

import redis
from celery import Celery

import celery_fairqueue
from celery_fairqueue import FairTask, PermanentError, ReliableTask, RetryableError, RetryPolicy
from tests.apps._config import fair_test_conf
from tests.harness import LEDGER_KEY, REDIS_URL_ENV, IdempotentAPI

REDIS_URL = os.environ[REDIS_URL_ENV]

app = Celery("reliable", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(fair_test_conf())
celery_fairqueue.install(app)

r = redis.Redis.from_url(REDIS_URL, decode_responses=True)
FAST = RetryPolicy(base=0.05, cap=0.2, max_attempts=4)


class HTTPError(Exception):
    def __init__(self, status: int, headers: dict | None = None) -> None:
        super().__init__(f"HTTP {status}")
        self.status_code = status
        self.headers = headers or {}


def fail_as_told(lead_id: int) -> None:
    r.hincrby("attempts", str(lead_id), 1)
    r.rpush(f"attempt_times:{lead_id}", time.time())
    mode = r.get(f"fail:{lead_id}")
    if not mode:
        return
    kind, *rest = mode.split(":")
    remaining = int(rest[-1]) if rest else 1
    if kind == "permanent":
        raise PermanentError(f"lead {lead_id} was deleted")
    if remaining <= 0:
        return
    r.set(f"fail:{lead_id}", ":".join([kind, *rest[:-1], str(remaining - 1)]))
    if kind == "retry":
        raise TimeoutError("upstream timed out")
    if kind == "http":
        raise HTTPError(int(rest[0]))
    if kind == "retry_after":
        raise RetryableError("rate limited upstream", retry_after=float(rest[0]))


fake_api = IdempotentAPI(r)


@app.task(shared=False, base=FairTask, bind=True, account_arg="account_id",
          job_key=("account_id", "lead_id"), retry_policy=FAST)
def send_message(self, account_id: str, lead_id: int) -> str:
    fail_as_told(lead_id)
    return fake_api(self.request.job_key, f"{account_id}:{lead_id}")


@app.task(shared=False, base=FairTask, bind=True, account_arg="account_id",
          job_key=("account_id", "lead_id"), retry_policy=FAST)
def send_then_linger(self, account_id: str, lead_id: int, linger: float) -> str:
    """The API-idempotency-key path: a crash after the call makes the rerun call again."""
    started = time.time()
    r.hincrby("starts", f"{account_id}:{lead_id}", 1)
    external_id = fake_api(self.request.job_key, f"{account_id}:{lead_id}")
    time.sleep(max(0.0, linger - (time.time() - started)))
    return external_id


class Reconciled(FairTask):
    """The reconciliation path: the external system is asked whether the send happened."""

    def already_applied(self, job_key, account_id, lead_id, linger):
        r.hincrby("reconciled", f"{account_id}:{lead_id}", 1)
        return r.get(f"sent:{job_key}")


@app.task(shared=False, base=Reconciled, bind=True, account_arg="account_id",
          job_key=("account_id", "lead_id"), retry_policy=FAST)
def send_reconciled(self, account_id: str, lead_id: int, linger: float) -> str:
    r.hincrby("starts", f"{account_id}:{lead_id}", 1)
    # a side effect with no idempotency key, which the external system records as it happens
    with r.pipeline() as send:  # MULTI: the send and its record, as one
        send.hincrby(LEDGER_KEY, f"{account_id}:{lead_id}", 1)
        send.set(f"sent:{self.request.job_key}", f"ext-{lead_id}")
        send.execute()
    self.set_external_id(f"ext-{lead_id}")
    time.sleep(linger)
    return f"ext-{lead_id}"


@app.task(shared=False, base=FairTask, bind=True, account_arg="account_id",
          job_key=("account_id", "lead_id"), retry_policy=FAST)
def storm_job(self, account_id: str, lead_id: int, seconds: float = 0.03) -> str:
    """A short job for the kill storm; one in a hundred fails permanently."""
    if lead_id % 100 == 99:
        raise PermanentError(f"lead {lead_id} does not exist")
    time.sleep(seconds)
    return fake_api(self.request.job_key, f"{account_id}:{lead_id}")


@app.task(shared=False, base=ReliableTask, bind=True, account_arg="account_id",
          job_key=("account_id", "lead_id"), retry_policy=FAST, redact=("email",))
def plain_send(self, account_id: str, lead_id: int, email: str = "") -> str:
    """A plain Celery task (broker, no fair queue) with the reliable base class."""
    r.hincrby("plain_runs", str(lead_id), 1)
    fail_as_told(lead_id)
    return fake_api(self.request.job_key, f"plain:{lead_id}")


@app.task(shared=False, base=FairTask, bind=True, account_arg="account_id", retry_policy=FAST,
          redact=("email", "phone"))
def notify(self, account_id: str, lead_id: int, email: str, profile: dict | None = None) -> str:
    """Quotes its secrets carelessly: in its error text when ``lead_id`` is odd, else in its
    return value, which Celery logs; a ``profile`` with ``busy`` (seconds) retries after them
    first, quoting them in its retryable error too; with ``linger`` (seconds) it takes that
    long."""
    time.sleep((profile or {}).get("linger", 0))
    if profile and profile.get("busy") and not self.request.retries:
        raise RetryableError(f"mailbox {email} is busy", retry_after=profile["busy"])
    if lead_id % 2:
        raise ValueError(f"mailbox {email} rejected the message (phone {profile['phone']})")
    return f"sent to {email}"


@app.task(shared=False, base=FairTask, bind=True, account_arg="account_id",
          job_key=("account_id", "lead_id", "step", "campaign_rev"), retry_policy=FAST,
          redact=("email",))
def send_step(self, account_id: str, lead_id: int, step: str, campaign_rev: int,
              email: str = "") -> str:
    """A campaign step: the jobs search finds it by its key's parts and by its arguments,
    never by its redacted ``email``."""
    return fake_api(self.request.job_key, f"{account_id}:{lead_id}:{step}:{campaign_rev}")
