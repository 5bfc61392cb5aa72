"""A fair store behind a password and TLS (``rediss://``): jobs run, the password stays out of
logs and errors, and a wrong one fails with a clear error."""

import importlib
import subprocess
import sys
from urllib.parse import quote

import pytest

from celery_fairqueue.errors import StoreUnavailableError
from celery_fairqueue.settings import FairqueueSettings
from celery_fairqueue.store import FairStore
from tests.harness import free_port, wait_until
from tests.integration.conftest import put

PASSWORD = "s3cret/with:odd@chars"


def make_certificates(folder):
    """A throwaway CA and a server certificate for 127.0.0.1 that it signed."""
    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
            "/CN=fairqueue test CA", "-keyout", "ca.key", "-out", "ca.crt")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
            "-keyout", "server.key", "-out", "server.csr")
    (folder / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "1", "-extfile", "san.cnf", "-out", "server.crt")
    return {name: str(folder / f"{name}") for name in ("ca.crt", "server.crt", "server.key")}


@pytest.fixture
def secure_redis(redis_server_factory, tmp_path):
    files = make_certificates(tmp_path)
    return redis_server_factory(
        port="0", tls_port=str(free_port()), tls_cert_file=files["server.crt"],
        tls_key_file=files["server.key"], tls_ca_cert_file=files["ca.crt"],
        tls_auth_clients="no", requirepass=PASSWORD)


@pytest.fixture
def secured(secure_redis, monkeypatch, redis_server):
    monkeypatch.setenv("FQ_STORE_REDIS_URL", secure_redis.url)
    sys.modules.pop("tests.apps.secured", None)  # the URL is read at import
    module = importlib.import_module("tests.apps.secured")
    yield module
    sys.modules.pop("tests.apps.secured", None)


def test_jobs_run_through_a_password_protected_tls_store(figure, secured, secure_redis, ledger,
                                                         celery_worker_factory, redis_client):
    assert secure_redis.url.startswith("rediss://:")
    worker = celery_worker_factory("tests.apps.secured",
                                   env={"FQ_STORE_REDIS_URL": secure_redis.url})
    results = [secured.job.delay("acme", n) for n in range(5)]
    assert [r.get(timeout=20) for r in results] == list(range(5))
    assert ledger.counts() == {f"acme:{n}": 1 for n in range(5)}
    with secure_redis.client() as client:
        assert client.connection_pool.connection_class.__name__ == "SSLConnection"
        # a finished job's ack can ride on the worker's next claim, after its result is out
        assert wait_until(lambda: int(client.hget("{fairqueue}:stats", "acked") or 0) >= 5,
                          timeout=10)
        assert int(client.hget("{fairqueue}:stats", "acked")) == 5
    assert not redis_client.keys("{fairqueue}*")  # nothing fair-queued in the broker's Redis
    log = worker.log_tail(10_000)
    assert "claiming fair jobs from queues celery of rediss://:**@127.0.0.1" in log
    leaked = PASSWORD in log or quote(PASSWORD, safe="") in log
    figure(f"secure store: 5 jobs over rediss:// with a password, 0 lost, password in the "
           f"worker log (plain or percent-encoded): {leaked}")
    assert not leaked


def test_a_wrong_password_is_a_clear_error_without_the_password(secure_redis):
    wrong = secure_redis.url.replace(quote(PASSWORD, safe=""), "wrong-guess")
    store = FairStore.from_settings(FairqueueSettings(redis_url=wrong))
    with pytest.raises(StoreUnavailableError) as raised:
        put(store, "acme", 1)
    message = str(raised.value)
    assert "wrong-guess" not in message and PASSWORD not in message
    assert "rediss://:**@127.0.0.1" in message and "invalid username-password" in message
