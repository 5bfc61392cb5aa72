"""What each script call of a fair job asks of Redis, and what a pending job holds: sections (6)
and (7) of ``bench.redis_cost`` (``--only commands``, ``--only memory``).

(6) Exact commands per script call, counted by Redis itself: ``CONFIG RESETSTAT`` before one
    call, then ``INFO stats commandstats`` (Redis 7 counts the commands a script runs, so
    ``total_commands_processed`` is the script call plus its inner commands, and
    ``commandstats`` says which). No worker runs: the calls are made here, through the store's
    public API, on a flushed store whose scripts are loaded and whose clock reading is fresh,
    so the store's client sends nothing but the script call. For the keyed fair task
    (``bench.app.fair_keyed_noop``), without and with the recorder's event stream: a keyed
    enqueue into an account with ready jobs and into an empty one; a claim leasing 1 job and
    one leasing 8 (per job and fixed cost); an ack riding on a claim that leases nothing, and
    an ack alone (``Lease.ack`` with no holder).
(7) Bytes per pending job: ``used_memory`` around 5,000 real ``.delay()`` calls with a
    realistic payload (``bench._common.message``), beside the floor: the same messages, read
    back from the store, each in one hash under a job id's length and nothing else.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import NamedTuple, TypeVar

import redis

from bench._common import floor_bytes, fresh, message, stored_messages, used_memory
from celery_fairqueue.limits import AccountLimit
from celery_fairqueue.store import Lease
from tests.harness import RedisServer

T = TypeVar("T")
QUEUES = ["celery"]
TOKEN = "bench-worker"
SCRIPT_CALLS = ("evalsha", "eval", "fcall")
#: job numbers, never reused, so no business key is ever seen twice
numbers = itertools.count(1)


class Commands(NamedTuple):
    """The commands Redis ran for one call: all of them, and how many of each name."""
    total: int  # total_commands_processed: the script call itself and its inner commands
    calls: dict[str, int]  # commandstats: command name -> calls

    @property
    def inner(self) -> int:
        """The commands the script ran (the script call itself left out)."""
        return self.total - sum(self.calls.get(name, 0) for name in SCRIPT_CALLS)

    def listing(self) -> str:
        ordered = sorted(self.calls.items(), key=lambda item: (-item[1], item[0]))
        return ", ".join(f"{name} x{count}" for name, count in ordered)


def counted(client: redis.Redis, call: Callable[[], T]) -> tuple[Commands, T]:
    """Run ``call``; the commands Redis ran for it. ``INFO`` is not counted in its own reply;
    the ``CONFIG RESETSTAT`` before it is, once, and taken off."""
    client.config_resetstat()
    result = call()
    info = client.info("stats", "commandstats")
    calls = {name.removeprefix("cmdstat_"): int(stat["calls"])
             for name, stat in info.items() if name.startswith("cmdstat_")}
    calls.pop("config|resetstat", None)
    return Commands(int(info["total_commands_processed"]) - 1, calls), result


class Bench:
    """The bench app's keyed fair task and its store, claimed from as a worker would."""

    def __init__(self, server: RedisServer, stream: bool) -> None:
        from bench import app
        from celery_fairqueue.settings import settings_for
        from celery_fairqueue.store import store_for

        self.task = app.fair_keyed_noop
        self.store = store_for(app.app)
        self.client = fresh(server, "fair")
        self.limit = settings_for(app.app).default_limit.pack(self.store.server_time())
        # load the enqueue, claim and ack scripts and read Redis's clock, then forget the job
        self.enqueue("warm-up")
        self.claim(1)[0].ack()
        self.client.flushall()
        if stream:
            fresh(server, "fair+stream")

    def enqueue(self, account: str) -> None:
        self.task.delay(account, next(numbers))

    def claim(self, want: int, acks: list[Lease] | None = None) -> list[Lease]:
        """The leases of one claim of up to ``want`` jobs, carrying ``acks``."""
        claim = self.store.claim(QUEUES, want, TOKEN, self.limit, acks=acks or [])
        if claim.lost:
            raise RuntimeError(f"acks lost their leases: {claim.lost}")
        return claim.leases


def leasing(bench: Bench, want: int) -> Commands:
    commands, leases = counted(bench.client, lambda: bench.claim(want))
    if len(leases) != want:
        raise RuntimeError(f"a claim of {want} leased {len(leases)} jobs")
    return commands


def measure(server: RedisServer, stream: bool) -> dict[str, Commands]:
    """Each call of the hot path, once, on a store set up for it."""
    bench = Bench(server, stream)
    for n in range(32):  # a backlog: 16 accounts with 2 ready jobs each
        bench.enqueue(f"acct{n % 16}")
    found = {"enqueue, account with ready jobs": counted(bench.client,
                                                         lambda: bench.enqueue("acct0"))[0],
             "enqueue, empty account": counted(bench.client, lambda: bench.enqueue("new"))[0],
             "claim leasing 1 job": leasing(bench, 1),
             "claim leasing 8 jobs": leasing(bench, 8)}

    for label, quota in (("a queue quota", AccountLimit(rate="100000/s", burst=100000)),
                         ("a quota with concurrency",
                          AccountLimit(rate="100000/s", burst=100000, concurrency=1000))):
        bench = Bench(server, stream)  # the same backlog, under a queue's shared limit
        bench.store.set_queue_limit(QUEUES[0], quota)
        for n in range(32):
            bench.enqueue(f"acct{n % 16}")
        found[f"claim leasing 1 job, {label}"] = leasing(bench, 1)
        found[f"claim leasing 8 jobs, {label}"] = leasing(bench, 8)

    bench = Bench(server, stream)  # nothing ready once the two jobs are leased
    bench.enqueue("acct0")
    bench.enqueue("acct0")
    riding, alone = bench.claim(2)
    riding.succeeded()
    found["ack riding on a claim leasing nothing"], leases = counted(
        bench.client, lambda: bench.claim(1, acks=[riding]))
    found["the same claim without the ack"], more = counted(bench.client, lambda: bench.claim(1))
    if leases or more:
        raise RuntimeError("a claim with nothing ready leased a job")
    alone.succeeded()
    found["ack alone (Lease.ack, no holder)"] = counted(bench.client, alone.ack)[0]

    bench = Bench(server, stream)  # a trickle: one job at a time into an empty store
    bench.enqueue("warm")  # (the producer has asked whether a recorder listens)
    bench.claim(1)[0].ack()
    found["trickle: enqueue"] = counted(bench.client, lambda: bench.enqueue("lone"))[0]
    found["trickle: claim leasing it"] = leasing(bench, 1)
    lone = bench.store.claim(QUEUES, 0, TOKEN, bench.limit).leases  # nothing: a lease to ack
    assert lone == []
    return found


def trickle(found: dict[str, Commands]) -> int:
    """A trickling job's three scripts together: its enqueue into an empty account, the claim
    leasing it (its account's only job), and its ack alone."""
    return (found["trickle: enqueue"].inner + found["trickle: claim leasing it"].inner
            + found["ack alone (Lease.ack, no holder)"].inner)


def report_commands(server: RedisServer) -> bool:
    print("\n(6) Redis commands per script call, counted by Redis (INFO stats, commandstats); "
          "the keyed fair task, no worker")
    figures: dict[str, tuple[int, float, int, int, int]] = {}
    extra: dict[str, float] = {}  # more commands a leased job under a queue's shared limit
    for label, stream in (("without the event stream", False), ("with the event stream", True)):
        found = measure(server, stream)
        print(f"    {label}: inner commands (the script call left out), then by name")
        for name, commands in found.items():
            print(f"      {name:40}{commands.inner:4}   {commands.listing()}")
        one, eight = found["claim leasing 1 job"].inner, found["claim leasing 8 jobs"].inner
        per_job = (eight - one) / 7
        share = (found["ack riding on a claim leasing nothing"].inner
                 - found["the same claim without the ack"].inner)
        print(f"      a claim: {per_job:.1f} a leased job, {one - per_job:.1f} fixed; an ack "
              f"riding on a claim: {share}")
        for quota in ("a queue quota", "a quota with concurrency"):
            one_q = found[f"claim leasing 1 job, {quota}"].inner
            per_job_q = (found[f"claim leasing 8 jobs, {quota}"].inner - one_q) / 7
            print(f"      under {quota}: {per_job_q:.1f} a leased job "
                  f"({per_job_q - per_job:+.1f}), {one_q - per_job_q:.1f} fixed "
                  f"({one_q - per_job_q - (one - per_job):+.1f})")
            extra[quota] = max(extra.get(quota, 0.0), per_job_q - per_job)
        print(f"      a trickling job (enqueue into an empty store, the claim leasing it, its "
              f"ack alone): {trickle(found)}")
        figures[label] = (found["enqueue, account with ready jobs"].inner, per_job, share,
                          found["ack alone (Lease.ack, no holder)"].inner, trickle(found))
    without, with_stream = figures.values()

    def both(n: int) -> str:
        return f"without {without[n]:g}, with the stream {with_stream[n]:g}"

    print(f"    acceptance: keyed enqueue into an account with ready jobs <= 8 inner commands: "
          f"{both(0)}")
    print(f"    acceptance: a claimed job <= 10 commands: {both(1)}")
    print(f"    acceptance: an ack <= 6 inner commands, riding on a claim: {both(2)}; alone: "
          f"{both(3)}")
    print(f"    acceptance: a queue's shared rate adds <= 2 inner commands a claimed job: "
          f"{extra['a queue quota']:+g} (with its concurrency too: "
          f"{extra['a quota with concurrency']:+g})")
    print(f"    acceptance (issue 46): keyed enqueue into an account with ready jobs <= 5 inner "
          f"commands: {both(0)}; a trickling job's three scripts <= 30: {both(4)}")
    return extra["a queue quota"] <= 2 and all(
        enqueue <= 5 and per_job <= 10 and share <= 6 and ack <= 6 and trickled <= 30
        for enqueue, per_job, share, ack, trickled in figures.values())


def report_memory(server: RedisServer, jobs: int = 5000, accounts: int = 200) -> None:
    from bench import app

    client = fresh(server, "fair")
    app.fair_keyed_message.delay("warm-up", 0, message(0))  # loads the script, reads the clock
    client.flushall()
    before = used_memory(client)
    for n in range(jobs):
        app.fair_keyed_message.delay(f"account-{n % accounts}", n, message(n))
    per_job = (used_memory(client) - before) / jobs
    messages = stored_messages(client)
    mean = sum(map(len, messages)) / len(messages)
    floor = floor_bytes(client, messages)
    print(f"\n(7) bytes per pending job: {jobs} real .delay() jobs over {accounts} accounts, "
          "bodies of 300 to 800 characters, no event stream")
    print(f"    per job {per_job:7.0f} B of used_memory")
    print(f"    floor   {floor:7.0f} B: the stored message alone (mean {mean:.0f} B, "
          f"{len(messages)} read back), in one hash under a 38-character id")
    print(f"    above the floor {per_job - floor:.0f} B a job")
