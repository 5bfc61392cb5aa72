"""Process helpers: free ports, log tails, /proc lookups, polling, and children that die with us."""

from __future__ import annotations

import collections
import ctypes
import os
import random
import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent() -> None:
    """Run in the child before exec: a SIGKILLed test run must not leave servers behind."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


#: The harness's ports lie below the kernel's ephemeral range (32768-60999 on Linux): a client
#: connection's local port is never one of them, so none can take a port between the check and
#: the server's bind.
PORT_LOW, PORT_HIGH = 10000, 32767
#: Each pytest-xdist worker draws from its own residue class of the range (``gw0`` class 1,
#: ``gw1`` class 2, a run without xdist class 0), so two workers never pick the same port.
PORT_CLASSES = 16
#: Ports handed out lately, which this process does not hand out again: a caller may take
#: several (a cluster's six nodes, RabbitMQ's three) before it starts the first server.
_recent: collections.deque[int] = collections.deque(maxlen=512)


def xdist_worker_number() -> int:
    """1 for pytest-xdist's ``gw0``, 2 for ``gw1``, ...; 0 outside xdist (a serial run, a bench)."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name[2:]) + 1 if name.startswith("gw") and name[2:].isdigit() else 0


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(span: int = 0) -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now, from this xdist
    worker's own share of the range; with ``span``, ``port + span`` is free too (a Redis
    Cluster node's bus port)."""
    residue = xdist_worker_number() % PORT_CLASSES
    classes = (PORT_HIGH - span - PORT_LOW) // PORT_CLASSES
    for _ in range(1000):
        port = PORT_LOW + random.randrange(classes) * PORT_CLASSES + residue
        wanted = (port, port + span) if span else (port,)
        if any(p in _recent for p in wanted) or not all(_bindable(p) for p in wanted):
            continue
        _recent.extend(wanted)
        return port
    raise RuntimeError(f"no free port in {PORT_LOW}-{PORT_HIGH} (class {residue})")


def tail(path: Path, lines: int = 60) -> str:
    """Return the last ``lines`` lines of a log file ('' if it does not exist yet)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _read_from(path: Path, offset: int) -> str:
    """The text a log file gained after ``offset`` bytes (what the current run wrote)."""
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def _proc_stat(pid: int) -> tuple[str, int, int] | None:
    """Return (state, ppid, pgrp) of a process from /proc, or None if it no longer exists."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name is in parentheses and may itself contain spaces or parentheses.
    state, ppid, pgrp = stat[stat.rindex(")") + 2 :].split()[:3]
    return state, int(ppid), int(pgrp)


def _live_processes() -> Iterator[tuple[int, int, int]]:
    """Yield (pid, ppid, pgrp) of every process that is not a zombie."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _proc_stat(int(entry))
            if stat is not None and stat[0] != "Z":
                yield int(entry), stat[1], stat[2]


def pid_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (a zombie runs no code any more)."""
    stat = _proc_stat(pid)
    return stat is not None and stat[0] != "Z"


def process_group(pgid: int) -> list[int]:
    """PIDs of the live (non-zombie) processes in a process group."""
    return [pid for pid, _, pgrp in _live_processes() if pgrp == pgid]


def child_pids(pid: int) -> list[int]:
    """PIDs of the live (non-zombie) direct children of a process."""
    return sorted(child for child, ppid, _ in _live_processes() if ppid == pid)


def wait_until(condition: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Poll ``condition`` until it is true (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True
