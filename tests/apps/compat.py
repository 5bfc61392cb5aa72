"""A Celery app made fair as a whole (``task_cls``), as a user drops FairTask into an existing
app: tasks without an account fall back to ``fairqueue_default_account``, Celery's own tasks stay
on the broker, and the tasks use Celery's own retry options."""

import os
import time

import redis
from celery import Celery

import celery_fairqueue
from tests.apps._config import fair_test_conf
from tests.harness import REDIS_URL_ENV

REDIS_URL = os.environ[REDIS_URL_ENV]

app = Celery("compat", broker=REDIS_URL, backend=REDIS_URL,
             task_cls="celery_fairqueue:FairTask")
app.conf.update(fair_test_conf(), fairqueue_default_account="shared")
celery_fairqueue.install(app)

r = redis.Redis.from_url(REDIS_URL, decode_responses=True)


@app.task(shared=False)
def add(x, y):
    return x + y


@app.task(shared=False)
def boom(n):
    r.hincrby("attempts", f"boom:{n}", 1)
    raise ValueError(f"bad input {n}")


@app.task(shared=False, bind=True, autoretry_for=(TimeoutError,), max_retries=2,
          default_retry_delay=0)
def flaky(self, n):
    r.hincrby("attempts", f"flaky:{n}", 1)
    raise TimeoutError("upstream timed out")


@app.task(shared=False, typing=False)
def untyped(x):
    return x


@app.task(shared=False, bind=True)
def replaced(self, x):
    """Replaces itself, as Celery's own canvas tests do: the replacement keeps this task's id."""
    raise self.replace(add.s(x, 1))


@app.task(shared=False, bind=True)
def request_eta(self):
    return self.request.eta


@app.task(shared=False)
def identity(x):
    return x


@app.task(shared=False)
def note(text):
    """Leaves ``text`` in the ledger list ``ran``: what ran, in order."""
    r.rpush("ran", text)
    return text


@app.task(shared=False)
def total(numbers):
    return sum(numbers)


@app.task(shared=False, bind=True)
def replaced_total(self, numbers):
    """A chord body that replaces itself."""
    raise self.replace(total.s(numbers))


@app.task(shared=False)
def nap(seconds):
    """Runs ``seconds`` long, for the remote-control queries of a running job."""
    time.sleep(seconds)
    return seconds


@app.task(shared=False, acks_late=False)
def nap_acked_early(seconds):
    """:func:`nap`, acked before it runs, as Celery's tasks are by default."""
    time.sleep(seconds)
    return seconds
