"""bench/repeats/ cannot rot: one wave of 2 clips in each mode, real stub and gateway
processes, the stub's recorded bodies read back. Counts only, no timings (and no vLLM venv).

The counts hold when every follower of a wave is released by its seed's stream head (vLLM, and
the stub, start a stream once they hold the clip), not by `reference_wait_ms` running out first:
then it goes by reference before the clip is held, misses and is sent again with its data. With
the default 100 ms a loaded machine sometimes gets there first, so the wait here is one the test
never reaches."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.repeats.run import run_phase
from bench.shared.workloads import WORKLOAD_REPEATS, make_clips


class TinyBench:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.audio_root = workdir / "audio"
        self.audio_root.mkdir()
        self.stub = None
        self.servers: dict[str, Any] = {}
        self.loadgens: list[Any] = []

    def step(self, label: str) -> None:
        pass


WAIT_NEVER_REACHED_MS = 60_000


def test_one_wave_by_data_and_by_reference(tmp_path: Path) -> None:
    bench = TinyBench(tmp_path)
    clipset = make_clips(replace(WORKLOAD_REPEATS, clips=2, seeds=4), bench.audio_root)
    rows = {
        mode: run_phase(
            bench, clipset, "waves-streamed", mode, WAIT_NEVER_REACHED_MS, measure_vllm=False
        )
        for mode in ("data", "reference")
    }
    for row in rows.values():
        assert row["requests"] == 8 and row["errors"] == 0 and row["mismatched"] == 0
        assert row["upstream_requests"] == 8 + sum(row["retries"].values())
        assert row["frontend"] is None
    assert rows["data"]["decodes_per_wave"] == 4
    assert rows["reference"]["decodes_per_wave"] == 1
    assert rows["reference"]["parts"] == {"data": 2.0, "reference": 6.0}
    ratio = (
        rows["data"]["upstream_bytes_per_request"] / rows["reference"]["upstream_bytes_per_request"]
    )
    assert ratio > 2
