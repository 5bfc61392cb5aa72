"""A job's whole life is about three script calls on a real worker: its enqueue, the claim that
leases it (which writes its started marker) and the next claim, which acks it and marks its key
done (shared with the jobs that claim leases)."""

import threading
import time
from collections import Counter

from tests.harness import wait_until

APP = "tests.apps.fair"
NO_POLL = {"FQ_POLL_INTERVAL": "60"}  # the claims counted are the ones the drain itself made


class Monitor:
    """Redis's MONITOR feed while a block runs: the top-level commands, scripts by name."""

    def __init__(self, client, script_names: dict[str, str]) -> None:
        self.client = client
        self.script_names = script_names
        self.commands: Counter[str] = Counter()
        self.marker_writes = 0
        self._stop = threading.Event()

    def __enter__(self) -> "Monitor":
        self._monitor = self.client.monitor()
        self._monitor.connection.send_command("MONITOR")
        self._monitor.connection.read_response()  # OK: every command from here on is seen
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                entry = self._monitor.next_command()
            except Exception:
                return
            words = entry["command"].split()
            if entry.get("client_type") == "lua" or not words:
                continue
            name = words[0].upper()
            if name == "EVALSHA":
                name = self.script_names.get(words[1], "other script")
            elif any("markers" in word for word in words[1:2]):
                self.marker_writes += 1
            self.commands[name] += 1

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.client.ping()  # a last command, so the reader wakes up and sees the stop
        self._thread.join(timeout=5)
        self._monitor.connection.disconnect()


def test_a_finished_job_is_acked_by_the_next_claim_and_marks_its_key_there(
        fair, celery_worker_factory, fair_store, redis_client, ledger):
    jobs = 60
    for n in range(jobs):
        fair.job.delay(f"acct{n % 6}", n)
    names = {script.sha: name for name, script in fair_store._scripts.items()}
    with Monitor(redis_client, names) as seen:
        celery_worker_factory(APP, concurrency=4, env=NO_POLL)
        assert wait_until(lambda: len(ledger) >= jobs, timeout=60), ledger.counts()
        assert wait_until(lambda: fair_store.stats().get("acked", 0) >= jobs, timeout=10)
    assert seen.commands["ack"] == 0  # every ack rode with a claim
    assert seen.marker_writes == 0  # the claim and its ack wrote the markers, not the task
    assert seen.commands["claim"] <= jobs + 5, seen.commands  # about one claim a job, no more
    for n in range(jobs):  # each job's key is done: enqueued again, nothing new is stored
        assert fair.job.delay(f"acct{n % 6}", n).id
    assert fair_store.stats()["enqueued"] == jobs


def test_a_claim_cut_short_by_max_skips_asks_to_claim_again_at_once(make_store):
    store = make_store(max_skips=1)
    no_limit, one_a_second = "0 1 0 -", "1 1 0 -"  # packed: rate, burst, cap, windows
    for account in ("a", "b"):  # no token left (the bucket was last filled in the future)
        store.client.hset(store.keys.limits, account, one_a_second)
        store.client.hset(store.keys.buckets, account, "0 9999999999")
    for account in ("a", "b", "c"):
        store.enqueue(queue="default", account=account, job_id=f"{account}:0", envelope="{}")
    claim = store.claim(["default"], 1, "w", no_limit)  # a and b are skipped, then it stops
    assert claim.leases == [] and claim.next_due == 0  # c is still in rotation: again at once
    assert [job.account for job in store.claim(["default"], 1, "w", no_limit).leases] == ["c"]


def test_a_fair_task_acked_before_it_runs_still_marks_its_key_done(fair, celery_worker_factory,
                                                                   fair_store):
    result = fair.acked_early.delay("acme", 7)
    celery_worker_factory(APP)
    assert result.get(timeout=20) == 7
    key = fair.acked_early.business_key("acme", ("acme", 7), {})
    assert wait_until(lambda: getattr(fair_store.marker(key), "state", None) == "done", timeout=10)


def test_a_claim_with_nothing_due_reads_each_sets_head_once_and_promotes_nothing(
        make_store, redis_client):
    store = make_store()
    store.enqueue(queue="default", account="a", job_id="later:0", envelope="{}",
                  due=time.time() + 60)
    store.enqueue(queue="default", account="b", job_id="now:0", envelope="{}")
    store.client.hset(store.keys.limits, "b", "1 1 0 -")  # one a second, and no token left:
    store.client.hset(store.keys.buckets, "b", "0 9999999999")  # the claim defers b for 1 s
    redis_client.config_resetstat()
    claim = store.claim(["default"], 1, "w", "0 1 0 -")
    commands = redis_client.info("commandstats")
    assert claim.leases == []
    assert "cmdstat_zrangebyscore" not in commands  # nothing was due: no promotion asked
    assert commands["cmdstat_zrange"]["calls"] == 2  # the delayed and paused heads, once each
    assert claim.next_due is not None and 0.9 < claim.next_due <= 1.0  # b, deferred just now
