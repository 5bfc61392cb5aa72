"""A real Redis Cluster on loopback: three primaries, one replica each, made by ``redis-cli
--cluster create``, for the cluster tests (the counterpart of the sentinel group); or one or two
primaries without replicas, joined by hand (``redis-cli`` will not create fewer than three),
for the scale-out bench's smaller clusters."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from pathlib import Path
from typing import Any

import redis
from redis.cluster import RedisCluster

from tests.harness.processes import free_port, tail, wait_until
from tests.harness.redis_server import RedisServer

#: How long a primary may be silent before the others call it failed and its replica takes
#: over. Short, so a failover takes a couple of seconds; not shorter, so a busy 2-core machine
#: does not fail over a primary that is only slow.
NODE_TIMEOUT_MS = 1500
#: A cluster node also listens on its port + 10000 (the cluster bus), and both must be free.
BUS_OFFSET = 10000
HASH_SLOTS = 16384


def free_cluster_port() -> int:
    """A port on 127.0.0.1 that is free, as is the bus port 10000 above it."""
    return free_port(span=BUS_OFFSET)


class ClusterGroup:
    """``masters * (1 + replicas)`` ``redis-server --cluster-enabled yes`` on free ports (six by
    default), joined into one cluster."""

    def __init__(self, directory: Path, masters: int = 3, replicas: int = 1,
                 **config: str) -> None:
        if shutil.which("redis-cli") is None:
            raise RuntimeError("redis-cli is not on PATH; run `make services` to install it")
        config = {"cluster_enabled": "yes", "cluster_config_file": "nodes.conf",
                  "cluster_node_timeout": str(NODE_TIMEOUT_MS),
                  "repl_diskless_sync_delay": "0", **config}
        self.servers = [RedisServer(directory / f"node{n}", port=free_cluster_port(),
                                    config=config)
                        for n in range(masters * (1 + replicas))]
        if masters < 3 and replicas:
            raise ValueError("fewer than three primaries are made without replicas")
        for server in self.servers:
            server.start()
        if masters < 3:
            self._join_by_hand()
        else:
            self._create(replicas)
        self.wait_ready()

    def _create(self, replicas: int) -> None:
        addresses = [f"127.0.0.1:{server.port}" for server in self.servers]
        created = subprocess.run(
            ["redis-cli", "--cluster", "create", *addresses, "--cluster-replicas", str(replicas),
             "--cluster-yes"], capture_output=True, text=True, timeout=60)
        if created.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed:\n{created.stdout}\n"
                               f"{created.stderr}")

    def _join_by_hand(self) -> None:
        """What ``redis-cli --cluster create`` does, for one or two primaries: each takes an
        equal contiguous range of the slots and its own config epoch (so no two claim a slot
        at the same epoch), then meets the first."""
        count = len(self.servers)
        for n, server in enumerate(self.servers):
            first = n * HASH_SLOTS // count
            last = (n + 1) * HASH_SLOTS // count - 1
            with self.node(server) as client:
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
                client.execute_command("CLUSTER", "SET-CONFIG-EPOCH", n + 1)
        for server in self.servers[1:]:
            with self.node(server) as client:
                client.execute_command("CLUSTER", "MEET", "127.0.0.1", self.servers[0].port)

    @property
    def url(self) -> str:
        """The store's URL: every node a startup node, as a deployment would list them."""
        return ";".join(f"redis+cluster://127.0.0.1:{s.port}" for s in self.servers[:3])

    def client(self, **kwargs: Any) -> RedisCluster:
        """A plain redis-py cluster client (the test's own, not the store's)."""
        alive = next(s for s in self.servers if s.is_alive())
        return RedisCluster(host="127.0.0.1", port=alive.port, decode_responses=True, **kwargs)

    def node(self, server: RedisServer) -> redis.Redis:
        return server.client(decode_responses=True, socket_timeout=2)

    def _info(self, server: RedisServer) -> dict[str, str]:
        with self.node(server) as client:
            text = client.execute_command("CLUSTER", "INFO")
        if isinstance(text, dict):
            return {k: str(v) for k, v in text.items()}
        return dict(line.split(":", 1) for line in str(text).split() if ":" in line)

    def state_ok(self) -> bool:
        """Every live node says the cluster is ok and that it has all slots covered."""
        try:
            return all(self._info(s)["cluster_state"] == "ok" and
                       self._info(s)["cluster_slots_ok"] == str(HASH_SLOTS)
                       for s in self.servers if s.is_alive())
        except (redis.RedisError, KeyError):
            return False

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Cluster state ok on every node and each replica in sync with its primary."""
        def ready() -> bool:
            if not self.state_ok():
                return False
            try:
                for server in self.servers:
                    with self.node(server) as client:
                        info = client.info("replication")
                    if info["role"] == "slave" and info.get("master_link_status") != "up":
                        return False
            except redis.RedisError:
                return False
            return True

        assert wait_until(ready, timeout, 0.2), self.log_tail()

    def owner(self, key: str) -> RedisServer:
        """The live server that is the primary of ``key``'s slot, as the live nodes see it."""
        slot = redis.cluster.key_slot(key.encode())
        for server in self.servers:
            if not server.is_alive():
                continue
            with contextlib.suppress(redis.RedisError), self.node(server) as client:
                for start, end, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
                    if int(start) <= slot <= int(end):
                        return self.server(int(primary[1]))
        raise RuntimeError(f"no live node knows the owner of slot {slot}")

    def server(self, port: int) -> RedisServer:
        return next(s for s in self.servers if s.port == port)

    def node_id(self, server: RedisServer) -> str:
        with self.node(server) as client:
            return str(client.execute_command("CLUSTER", "MYID"))

    def primaries(self) -> list[RedisServer]:
        found = []
        for server in self.servers:
            if server.is_alive():
                with contextlib.suppress(redis.RedisError), self.node(server) as client:
                    if client.info("replication")["role"] == "master":
                        found.append(server)
        return found

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

    def log_tail(self) -> str:
        return "\n".join(f"--- node {s.port}\n{tail(s.log_path, 10)}" for s in self.servers)
