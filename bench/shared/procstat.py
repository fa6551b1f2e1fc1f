"""CPU time and memory of benchmarked processes, read from /proc (Linux only).

CPU is the sum of each thread's time on the CPU in nanoseconds
(`/proc/<pid>/task/<tid>/schedstat`: the scheduler's sum_exec_runtime), not utime+stime
(`/proc/<pid>/stat`), whose clock ticks (10 ms) would show a few hundred requests' CPU as
multiples of 10 ms. A thread that ends keeps the time it had at its last reading (readings of
a process never go down); what it ran after that is lost (the processes measured keep their
worker threads: asyncio's executor and the resolver threads live as long as the process). A proxy is
its whole process tree (nginx: master + worker). Peak RSS is
VmHWM, which cannot be reset: a clean peak for one request needs a fresh process.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

CLOCK_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")
KIB = 1024
MIB = 1024 * 1024


# (pid, its start time) -> {tid: ns at its last reading}: ended threads keep their time
_threads_seen: dict[tuple[int, int], dict[str, int]] = {}


def cpu_seconds(pid: int) -> float:
    """The CPU time of one process's threads, in seconds at nanosecond resolution; 0.0 when
    the process is gone."""
    started = _start_time(pid)
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    if started is None:
        return 0.0
    seen = _threads_seen.setdefault((pid, started), {})
    for tid in tids:
        ran_ns = _schedstat_ns(f"/proc/{pid}/task/{tid}/schedstat")
        if ran_ns is not None:  # None: it ended while we read
            seen[tid] = ran_ns
    return sum(seen.values()) / 1e9


def _start_time(pid: int) -> int | None:
    """When the process started (clock ticks after boot: /proc/<pid>/stat field 22), which
    tells a reused pid apart; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(raw[raw.rindex(b")") + 2 :].split()[19])  # the command name may hold spaces


def _schedstat_ns(path: str) -> int | None:
    """A thread's time on the CPU in ns (the first field of its schedstat), None if gone."""
    try:
        with open(path, "rb") as handle:
            return int(handle.read().split()[0])
    except (FileNotFoundError, ProcessLookupError):
        return None


def total_cpu_seconds(pids: Iterable[int]) -> float:
    return sum(cpu_seconds(pid) for pid in pids)


def parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(raw[raw.rindex(b")") + 2 :].split()[1])


def process_tree(root: int) -> list[int]:
    """`root` and all its descendants alive now."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            parent = parent_of(int(entry))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry))
    tree, pending = [], [root]
    while pending:
        pid = pending.pop()
        tree.append(pid)
        pending.extend(children.get(pid, ()))
    return tree


def status_bytes(pid: int, field: str) -> int:
    """A memory line of /proc/<pid>/status (VmRSS, VmHWM, ...) in bytes; 0 when absent."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * KIB
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def peak_rss_bytes(pids: Iterable[int]) -> int:
    """The sum of the processes' VmHWM (each one's own peak since it started)."""
    return sum(status_bytes(pid, "VmHWM") for pid in pids)


def rss_bytes(pids: Iterable[int]) -> int:
    return sum(status_bytes(pid, "VmRSS") for pid in pids)


def system_busy_seconds() -> float:
    """CPU seconds all cores spent not idle (user, system, irq, steal, ...) since boot."""
    with open("/proc/stat") as handle:
        fields = [int(value) for value in handle.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / CLOCK_TICKS_PER_SECOND
