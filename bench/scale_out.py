"""Scale-out: the ceiling of a store of 16 shards on a Redis Cluster of 1, 2 and 3 primaries.

    .venv/bin/python -m bench.scale_out [--quick] [--jobs N] [--rounds R] [--shards S]
        [--no-baseline]

A store of ``fairqueue_shards = 16`` (``--shards``) on a real Redis Cluster on loopback of 1, 2
and 3 primaries (no replicas), each made fresh and kept for the run; broker and ledger on a plain
redis-server of their own, so each node's CPU is the store's alone. Each round enqueues
``--jobs`` no-op jobs with a business key over 1,000 accounts (so every shard has work) from one
thread, then two workers of 8 threads (bench.redis_cost's 2x8 shape) drain them; each primary's
own Redis CPU (``used_cpu_user + used_cpu_sys``) and commands (those inside scripts counted) are
read before and after. The cluster sizes take turns, and each keeps its round whose busiest node
spent least (a busy machine only adds CPU time).

One Redis runs on one core, so the store's ceiling is set by its busiest node: 1e6 / (that
node's us of CPU per job) jobs/s. The ratio of the 3-primary ceiling to the 1-primary one says
how well the store scales out (acceptance >= 2.5). It is one figure over another, printed
beside it: the busiest node's share of the jobs (how evenly the shards, the accounts over them
and the home shard's store-wide work fall), and its CPU per job of its own beside the 1-primary
node's (what spreading adds per job); and the same ratio by commands (the most commands a node
ran per job beside the 1-primary node's), which does not depend on the machine. The last
section tells the store's work from this machine's: the home node's CPU per enqueue it ran
with the calls spread over the 3 primaries, and with all of them going to it (the others idle).

The baseline, beside it in the same run: the same workload with the store unsharded (S = 1),
on the 1-primary cluster and on one plain redis-server, and plain Celery's 2x8 run of
bench.redis_cost (its broker, ledger and 10 accounts on one redis-server).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import NamedTuple

from bench._common import fresh, ratio, redis_server, workers
from bench.environment import SHARDS_ENV, STORE_URL_ENV
from bench.redis_cost import Shape, commands_processed, cpu_phase, redis_cpu
from celery_fairqueue.store.formats.tags import shard_tag
from celery_fairqueue.store.shards.placement import account_shard
from tests.harness import RedisServer
from tests.harness.redis_cluster import ClusterGroup

SHAPE = Shape(2, 8)
SHARDS = 16
ACCOUNTS = 1000
PRIMARIES = (1, 2, 3)
PREFIX = "fairqueue"
TARGET = 2.5  # acceptance: ceiling with 3 primaries / with 1


class Target(NamedTuple):
    """Where a run puts the store: its URL, its shards, and the primaries that hold them."""
    name: str
    url: str
    shards: int
    nodes: list[RedisServer]
    held: dict[int, list[int]]  # a node's port -> the shards whose tags its slots hold


class Reading(NamedTuple):
    cpu: float  # seconds
    commands: int  # those inside scripts counted
    scripts: int  # script calls


class NodeCost(NamedTuple):
    port: int
    jobs: int  # of the round's, those whose account's shard is on this node
    enqueue: float  # Redis CPU seconds per job of the round, the enqueue loop
    total: float  # enqueue and drain
    commands: float  # per job of the round, those inside scripts counted
    scripts: int  # script calls: an enqueue per job; claims, acks settled alone, a few more


class Run(NamedTuple):
    nodes: list[NodeCost]

    @property
    def busiest(self) -> NodeCost:
        return max(self.nodes, key=lambda node: node.total)

    @property
    def jobs(self) -> int:
        return sum(node.jobs for node in self.nodes)

    def own(self, node: NodeCost) -> float:
        """``node``'s CPU seconds per job of its own (of the shards it holds)."""
        return node.total * self.jobs / node.jobs if node.jobs else float("inf")

    def share(self, node: NodeCost) -> float:
        """``node``'s share of the jobs."""
        return node.jobs / self.jobs

    @property
    def total(self) -> float:
        return sum(node.total for node in self.nodes)


def cluster_target(primaries: int, group: ClusterGroup, shards: int) -> Target:
    held: dict[int, list[int]] = {server.port: [] for server in group.servers}
    for index in range(shards):
        held[group.owner(f"{{{shard_tag(PREFIX, index)}}}").port].append(index)
    return Target(f"{primaries} primar{'y' if primaries == 1 else 'ies'}, S={shards}",
                  group.url, shards, group.servers, held)


def use_store(target: Target) -> None:
    """Point bench.app at ``target``: the workers started next through the environment, this
    process (the producer) by dropping the store and settings it keeps on the app."""
    from bench import app

    os.environ[STORE_URL_ENV], os.environ[SHARDS_ENV] = target.url, str(target.shards)
    app.app.conf.update(fairqueue_redis_url=target.url, fairqueue_shards=target.shards)
    vars(app.app).pop("_fairqueue_settings", None)
    store = vars(app.app).pop("_fairqueue_store", None)
    if store is not None:
        store.client.close()


def readings(target: Target) -> dict[int, Reading]:
    """Each node's CPU, commands and script calls so far."""
    found = {}
    for node in target.nodes:
        with node.client() as client:
            calls = client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
            found[node.port] = Reading(redis_cpu(client), commands_processed(client), calls)
    return found


def measure(broker: RedisServer, target: Target, jobs: int) -> Run:
    """``jobs`` enqueued into an empty store at ``target``, then drained by SHAPE's workers."""
    from bench import app

    ledger = fresh(broker, "fair")
    for node in target.nodes:
        with node.client() as client:
            client.flushall()
    use_store(target)
    start = readings(target)
    for n in range(jobs):
        app.fair_keyed_noop.delay(f"acct{n % ACCOUNTS}", n)
    enqueued = readings(target)
    with workers(broker, SHAPE.workers, pool="threads", concurrency=SHAPE.concurrency):
        deadline = time.monotonic() + 600
        while int(ledger.get("done") or 0) < jobs:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{target.name}: only {ledger.get('done')} of {jobs} done")
            time.sleep(0.05)
        end = readings(target)
    on_shard = Counter(account_shard(f"acct{n % ACCOUNTS}", target.shards) for n in range(jobs))
    return Run([NodeCost(port, sum(on_shard[index] for index in target.held[port]),
                         (enqueued[port].cpu - was.cpu) / jobs, (end[port].cpu - was.cpu) / jobs,
                         (end[port].commands - was.commands) / jobs,
                         end[port].scripts - was.scripts)
                for port, was in start.items()])


@contextmanager
def targets(folder: Path, shards: int) -> Iterator[list[Target]]:
    """A fresh cluster of each size in PRIMARIES, stopped on the way out."""
    with ExitStack() as stack:
        found = []
        for primaries in PRIMARIES:
            group = ClusterGroup(folder / f"cluster{primaries}", masters=primaries,
                                 replicas=0)
            stack.callback(group.stop)
            found.append(cluster_target(primaries, group, shards))
        yield found


@contextmanager
def plain_target(folder: Path) -> Iterator[Target]:
    server = RedisServer(folder / "store").start()
    try:
        yield Target("redis-server, S=1", server.url, 1, [server], {server.port: [0]})
    finally:
        server.stop()


def print_run(target: Target, run: Run) -> None:
    busiest = run.busiest
    mean = run.total / len(run.nodes)
    print(f"  {target.name}: busiest node {busiest.total * 1e6:.0f} us/job, ceiling "
          f"{1 / busiest.total:,.0f} jobs/s; all nodes {run.total * 1e6:.0f} us/job; busiest "
          f"/ mean {ratio(busiest.total, mean):.2f}")
    for node in sorted(run.nodes, key=lambda node: -node.total):
        shards = target.held[node.port]  # the home shard, 0, holds the store-wide keys
        claims = node.scripts - node.jobs  # claim-script calls (acks alone too), but for a few
        print(f"    node {node.port}: {len(shards):2} shards{' (home)' if 0 in shards else '':7}"
              f"{node.total * 1e6:5.0f} us/job (enqueue {node.enqueue * 1e6:3.0f}) "
              f"{node.commands:5.1f} commands/job; {run.share(node):4.0%} of the jobs, "
              f"{run.own(node) * 1e6:4.0f} us per job of its own, "
              f"{ratio(node.jobs, claims):.1f} jobs a claim-script call")


def enqueue_cost(target: Target, accounts: list[str], jobs: int) -> float:
    """The home node's Redis CPU seconds per enqueue it ran, ``jobs`` over ``accounts``."""
    from bench import app

    home = next(port for port, held in target.held.items() if 0 in held)
    for node in target.nodes:
        with node.client() as client:
            client.flushall()
    use_store(target)
    start = readings(target)
    mine = 0
    for n in range(jobs):
        account = accounts[n % len(accounts)]
        app.fair_keyed_noop.delay(account, n)
        mine += account_shard(account, target.shards) in target.held[home]
    return (readings(target)[home].cpu - start[home].cpu) / mine


def report_interleave(target: Target, jobs: int, rounds: int) -> None:
    """The same enqueue calls on the same node, cheaper or dearer as other nodes take turns."""
    home = next(port for port, held in target.held.items() if 0 in held)
    everyone = [f"acct{n}" for n in range(ACCOUNTS)]
    its_own = [account for account in everyone
               if account_shard(account, target.shards) in target.held[home]]
    costs: dict[str, list[float]] = {"spread": [], "alone": []}
    for _ in range(rounds):
        costs["spread"].append(enqueue_cost(target, everyone, jobs))
        costs["alone"].append(enqueue_cost(target, its_own, jobs))
    spread, alone = min(costs["spread"]), min(costs["alone"])
    print(f"\n{target.name}, {jobs} enqueues only (best of {rounds}): the home node's CPU per "
          f"enqueue it ran, the calls spread over every node {spread * 1e6:.0f} us, all to it "
          f"{alone * 1e6:.0f} us ({ratio(spread, alone):.2f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 jobs, one round")
    parser.add_argument("--jobs", type=int, help="jobs a round (default 10,000)")
    parser.add_argument("--rounds", type=int, help="rounds of each cluster size (default 3)")
    parser.add_argument("--shards", type=int, default=SHARDS, help="fairqueue_shards (16)")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip the unsharded store and plain Celery")
    options = parser.parse_args()
    jobs = options.jobs or (1000 if options.quick else 10_000)
    rounds = options.rounds or (1 if options.quick else 3)
    with redis_server() as broker, tempfile.TemporaryDirectory(prefix="fq-scale-") as folder, \
            targets(Path(folder), options.shards) as clusters:
        runs: dict[str, list[Run]] = {target.name: [] for target in clusters}
        for _ in range(rounds):
            for target in clusters:
                runs[target.name].append(measure(broker, target, jobs))
        best = {target.name: min(runs[target.name], key=lambda run: run.busiest.total)
                for target in clusters}
        print(f"\nRedis CPU per job, {jobs} no-op jobs with a business key over {ACCOUNTS} "
              f"accounts, drained by {SHAPE} workers; each node's own CPU; the round whose "
              f"busiest node spent least, of {rounds}")
        for target in clusters:
            print_run(target, best[target.name])
        ceilings = {target.name: 1 / best[target.name].busiest.total for target in clusters}
        first = ceilings[clusters[0].name]
        one = best[clusters[0].name].total
        print("  ceiling / 1 primary's = (1 primary's us per job / the busiest node's us per job "
              "of its own) / the busiest node's share of the jobs")
        for target in clusters[1:]:
            run = best[target.name]
            busiest = run.busiest
            most = max(node.commands for node in run.nodes)
            print(f"    {target.name}: {ratio(ceilings[target.name], first):.2f} = "
                  f"{ratio(one, run.own(busiest)):.2f} / {run.share(busiest):.3f}; by commands "
                  f"{ratio(best[clusters[0].name].busiest.commands, most):.2f} (the most "
                  f"commands a node ran per job, beside 1 primary's)")
        report_interleave(clusters[-1], jobs, rounds)
        if not options.no_baseline:
            baseline(broker, clusters[0], Path(folder), jobs, rounds)
        scaled = ratio(ceilings[clusters[-1].name], first)
        print(f"\nacceptance: ceiling with {PRIMARIES[-1]} primaries / 1 >= {TARGET}: "
              f"{scaled:.2f}" + ("" if scaled >= TARGET else "  NOT MET"))


def baseline(broker: RedisServer, one: Target, folder: Path, jobs: int, rounds: int) -> None:
    """The same workload unsharded, on the 1-primary cluster (``one``) and on one plain
    redis-server: what shards cost, and what cluster mode does; and plain Celery's 2x8 run."""
    print(f"\nbaseline: the same workload, unsharded (best of {rounds})")
    port = one.nodes[0].port
    with plain_target(folder) as plain:
        for target in (one._replace(name="1 primary, S=1", shards=1, held={port: [0]}), plain):
            run = min((measure(broker, target, jobs) for _ in range(rounds)),
                      key=lambda run: run.total)
            print_run(target, run)
    plain = min((cpu_phase(broker, "plain", jobs, SHAPE) for _ in range(rounds)),
                key=lambda cost: cost.total)
    print(f"  plain Celery on one redis-server (bench.redis_cost, 10 accounts, broker and "
          f"ledger): {plain.total * 1e6:.0f} us/job, {1 / plain.total:,.0f} jobs/s a core")


if __name__ == "__main__":
    main()
