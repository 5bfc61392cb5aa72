"""Process helpers: free ports, log tails, /proc lookups, polling, and children that die with us."""

from __future__ import annotations

import ctypes
import os
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


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
