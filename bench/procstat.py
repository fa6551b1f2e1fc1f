"""CPU time and memory of benchmarked processes, read from /proc (Linux only).

CPU is each live thread's on-CPU time in nanoseconds (`/proc/<pid>/task/<tid>/schedstat`, the
scheduler's sum_exec_runtime), plus whatever the process's utime+stime (`/proc/<pid>/stat`,
clock ticks: 10 ms) holds beyond its live threads' ticks: the threads that already ended.
Tick resolution alone would show a few hundred requests' CPU as multiples of 10 ms. A proxy is
its whole process tree (nginx: master + worker). Peak RSS is
VmHWM, which cannot be reset: a clean peak for one request needs a fresh process.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

CLOCK_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")
KIB = 1024
MIB = 1024 * 1024


def cpu_seconds(pid: int) -> float:
    """The CPU time of one process (all its threads, ended ones included), 0.0 when it is
    gone: live threads at nanosecond resolution, ended ones at clock-tick resolution."""
    total_ticks = _stat_ticks(f"/proc/{pid}/stat")
    if total_ticks is None:
        return 0.0
    live_ns = live_ticks = 0
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError):
        return total_ticks / CLOCK_TICKS_PER_SECOND
    for tid in threads:
        ran_ns = _schedstat_ns(f"/proc/{pid}/task/{tid}/schedstat")
        ticks = _stat_ticks(f"/proc/{pid}/task/{tid}/stat")
        if ran_ns is None or ticks is None:
            continue  # ended while we read: the process's ticks hold it
        live_ns, live_ticks = live_ns + ran_ns, live_ticks + ticks
    ended_ticks = max(0, total_ticks - live_ticks)
    return live_ns / 1e9 + ended_ticks / CLOCK_TICKS_PER_SECOND


def _stat_ticks(path: str) -> int | None:
    """utime + stime of a /proc stat file (a process's: all its threads), None if gone."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = raw[raw.rindex(b")") + 2 :].split()  # the command name may hold spaces
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5)


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
