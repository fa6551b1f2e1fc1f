"""The bench's PNG shows every workload that ran, one panel each, and says "not run" for one
that did not: drawn from saved results (the committed runs), no benchmark needed. It also
holds procstat's CPU figures to a resolution finer than the clock tick."""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import matplotlib
import pytest

from bench.proxies import plot
from bench.shared import procstat

matplotlib.use("Agg")
import matplotlib.pyplot as plt

RESULTS = Path(__file__).resolve().parent.parent / "bench" / "results"
WORKLOAD_OF = {
    "throughput": "a", "latency": "a", "proxy_cpu": "a", "long_form": "b", "huge_clip": "c",
    "objects": "s3", "repeats": "repeats", "encode": "encode",
}  # fmt: skip


def full_results() -> dict[str, Any]:
    """The standard run, with the repeats run's rows: every workload present."""
    results: dict[str, Any] = json.loads((RESULTS / "2026-12-02-standard.json").read_text())
    results["repeats"] = json.loads((RESULTS / "2026-12-03-repeats.json").read_text())
    return results


def drawn(axis: Any) -> int:
    return len(axis.lines) + len(axis.patches)


def says_not_run(axis: Any) -> bool:
    return any(text.get_text() == "not run" for text in axis.texts)


def test_every_workload_has_a_panel() -> None:
    assert {panel.__name__ for panel in plot.PANELS} == set(WORKLOAD_OF)
    assert set(WORKLOAD_OF.values()) == {"a", "b", "c", "s3", "repeats", "encode"}


@pytest.mark.parametrize("panel", plot.PANELS, ids=lambda panel: panel.__name__)
def test_each_panel_draws_its_workload(panel: Any) -> None:
    figure, axis = plt.subplots()
    try:
        panel(axis, full_results())
        assert drawn(axis) > 0 and not says_not_run(axis)
    finally:
        plt.close(figure)


@pytest.mark.parametrize("panel", plot.PANELS, ids=lambda panel: panel.__name__)
def test_a_workload_not_run_says_so(panel: Any) -> None:
    empty = {"name": "x", "date": "d", "points": [], "huge_clip": [], "objects": [],
             "repeats": [], "encode": None}  # fmt: skip
    figure, axis = plt.subplots()
    try:
        panel(axis, empty)
        assert drawn(axis) == 0 and says_not_run(axis)
    finally:
        plt.close(figure)


def test_the_png_is_written(tmp_path: Path) -> None:
    path = tmp_path / "all.png"
    plot.render_plot(full_results(), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --- procstat -----------------------------------------------------------------------------------


def spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_cpu_seconds_resolve_below_a_clock_tick_and_never_go_down() -> None:
    tick = 1 / procstat.CLOCK_TICKS_PER_SECOND
    spun, done = threading.Event(), threading.Event()

    def work() -> None:
        spin(0.03)
        spun.set()
        done.wait()

    worker = threading.Thread(target=work)
    before = procstat.cpu_seconds(os.getpid())
    worker.start()
    spin(0.0123)
    assert spun.wait(30)
    after = procstat.cpu_seconds(os.getpid())  # the worker alive, its 30 ms run
    done.set()
    worker.join()
    assert 0.0123 + 0.03 <= after - before <= 0.0123 + 0.03 + 0.05
    time.sleep(0.05)  # the worker's OS thread is gone from /proc: its time stays counted
    assert procstat.cpu_seconds(os.getpid()) >= after
    # Readings of a spinning process differ by less than a tick, which ticks cannot show.
    readings = []
    for _ in range(5):
        spin(0.001)
        readings.append(procstat.cpu_seconds(os.getpid()))
    steps = [b - a for a, b in itertools.pairwise(readings)]
    assert all(0 < step < tick for step in steps), steps
