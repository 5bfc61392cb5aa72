"""The opt-in pytest plugin users get (celery_fairqueue.testing), run as a user's project would
run it: a pytest of its own in a folder outside this repository, against real Redis."""

import os
import subprocess
import sys
import textwrap
from importlib import metadata

APP = '''
import os
from celery import Celery
import celery_fairqueue
from celery_fairqueue import FairTask, PermanentError

app = Celery("proj", broker=os.environ["PROJ_REDIS_URL"])
app.conf.fairqueue_redis_url = os.environ["PROJ_REDIS_URL"]
app.conf.fairqueue_key_prefix = "userplugin"
celery_fairqueue.install(app)
sent = []

@app.task(base=FairTask, bind=True, account_arg="account", job_key=("account", "lead"))
def welcome(self, account, lead):
    sent.append((account, lead, self.request.job_key))
    return f"sent {lead}"

@app.task(base=FairTask, account_arg="account")
def doomed(account):
    raise PermanentError("lead deleted")
'''

CONFTEST = '''
import pytest
pytest_plugins = ["celery_fairqueue.testing"]

@pytest.fixture
def fairqueue_app():
    from proj import app
    return app
'''

TESTS = '''
from celery_fairqueue import DeadLetters
from proj import app, doomed, sent, welcome

def test_runs_ready_jobs_once_per_business_key(fairqueue_store, fairqueue_run):
    welcome.delay("acme", 1)
    welcome.delay("acme", 1)
    welcome.delay("beta", 1)
    jobs = fairqueue_run()
    assert [(j.account, j.state, j.result) for j in jobs] == [
        ("acme", "SUCCESS", "sent 1"), ("beta", "SUCCESS", "sent 1")]
    assert [s[:2] for s in sent] == [("acme", 1), ("beta", 1)] and all(s[2] for s in sent)
    assert fairqueue_run() == []

def test_a_permanent_failure_is_dead_lettered(fairqueue_store, fairqueue_run):
    [job] = fairqueue_run() if doomed.delay("acme") else []
    assert job.state == "FAILURE"
    [letter] = DeadLetters(app).list()
    assert letter.reason == "permanent: lead deleted"

def test_each_test_starts_with_an_empty_store(fairqueue_store, fairqueue_run):
    assert fairqueue_store.counts("celery")["ready"] == 0
    assert DeadLetters(app).count() == 0
'''


def run_pytest(folder, redis_url, *args):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST", "DJANGO_", "FAIRQUEUE_", "CELERY_"))}
    env.update(PROJ_REDIS_URL=redis_url, PYTHONPATH=str(folder))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *args], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_package_registers_no_pytest_plugin_of_its_own():
    plugins = [e for e in metadata.entry_points(group="pytest11")
               if e.value.startswith("celery_fairqueue")]
    assert plugins == []


def test_a_project_without_the_plugin_sees_no_fixture_of_ours(tmp_path, redis_url):
    (tmp_path / "test_nothing.py").write_text("def test_ok():\n    pass\n")
    out = run_pytest(tmp_path, redis_url, "--fixtures")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "fairqueue" not in out.stdout and "redis_server" not in out.stdout


def test_the_opt_in_plugin_runs_fair_jobs_inline_against_real_redis(tmp_path, redis_url):
    (tmp_path / "proj.py").write_text(textwrap.dedent(APP))
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp_path / "test_proj.py").write_text(textwrap.dedent(TESTS))
    out = run_pytest(tmp_path, redis_url)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "3 passed" in out.stdout
