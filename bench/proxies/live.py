"""The live environment of one `python -m bench` run (`Bench`): the stub, the proxies of every
mode, the load generators; it drives them and reads each timed run's CPU and cache misses."""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

from tqdm import tqdm

from bench.proxies import modes
from bench.shared import procstat, servers
from bench.shared.loadgen import LoadGeneratorProcess
from bench.shared.points import merge_runs, summarise
from bench.shared.workloads import Clip, ClipSet, Scenario

HUGE_CLIP_TIMEOUT_SECONDS = 600


class Bench:
    """The live environment of one run: the stub, the proxies, the load generators."""

    def __init__(self, scenario: Scenario, workdir: Path, progress: tqdm[Any]) -> None:
        self.scenario = scenario
        self.workdir = workdir
        self.audio_root = workdir / "audio"
        self.audio_root.mkdir()
        self.progress = progress
        self.nginx = modes.find_nginx()
        self.stub: servers.ServerProcess | None = None
        self.servers: dict[str, servers.ServerProcess | None] = {}
        self.loadgens: list[LoadGeneratorProcess] = []
        self.notes: list[str] = list(scenario.notes)
        self.modes = self._available_modes()

    def _available_modes(self) -> list[str]:
        chosen = [mode for mode in self.scenario.modes if mode in modes.MODES]
        if "nginx" in chosen and self.nginx is None:
            chosen.remove("nginx")
            self.notes.append(
                "nginx is not installed: the nginx mode was skipped (apt-get install nginx)"
            )
        return chosen

    def step(self, label: str) -> None:
        self.progress.set_postfix_str(label, refresh=False)
        self.progress.update()

    # --- lifetimes --------------------------------------------------------------------------

    def start(self) -> None:
        self.stub = servers.start_stub(self.workdir, self.audio_root, self.scenario.stub_timing)
        for index in range(self.scenario.loadgen_processes):
            self.loadgens.append(LoadGeneratorProcess(self.workdir / f"loadgen{index}.log"))
        for mode in self.modes:
            self.servers[mode] = modes.start_mode(
                mode, self.workdir, self.stub, self.audio_root, self.nginx
            )

    def stop(self) -> None:
        for loadgen in self.loadgens:
            loadgen.close()
        for server in self.servers.values():
            if server is not None:
                server.stop()
        if self.stub is not None:
            self.stub.stop()

    def target(self, mode: str) -> str:
        server = self.servers.get(mode)
        origin = server.url if server is not None else self.stub_url
        return origin + "/v1/chat/completions"

    @property
    def stub_url(self) -> str:
        assert self.stub is not None
        return self.stub.url

    # --- driving load -----------------------------------------------------------------------

    def load(self, key: str, clips: list[Clip], order: list[int]) -> None:
        command = {"op": "load", "key": key, "clips": [c.to_json() for c in clips], "order": order}
        for loadgen in self.loadgens:
            loadgen.call(command)

    def prepare(self, key: str, form: str) -> None:
        for loadgen in self.loadgens:
            loadgen.call({"op": "prepare", "key": key, "form": form})

    def drive(
        self, mode: str, key: str, concurrency: int, requests: int, offset: int = 0
    ) -> dict[str, Any]:
        """Send `requests` requests at `concurrency`, split over the load generators; the
        requests walk the workload's shuffled order from `offset` on."""
        share = max(1, min(len(self.loadgens), concurrency, requests))
        for index in range(share):
            count = requests // share + (index < requests % share)
            self.loadgens[index].send(
                {
                    "op": "run",
                    "key": key,
                    "form": modes.MODES[mode].form,
                    "url": self.target(mode),
                    "concurrency": concurrency // share + (index < concurrency % share),
                    "requests": count,
                    "offset": offset,
                    "check_every": self.scenario.sha_check_every if key == "a" else 1,
                    "timeout": HUGE_CLIP_TIMEOUT_SECONDS,
                    "connections": self.scenario.connections,
                }
            )
            offset += count
        return merge_runs([self.loadgens[index].receive() for index in range(share)])

    def sample(
        self, mode: str, key: str, concurrency: int, requests: int, offset: int = 0
    ) -> dict[str, Any]:
        """One timed run, raw: the loadgen's answer plus CPU and cache-miss deltas."""
        server = self.servers.get(mode)
        groups = {
            "proxy": server.pids() if server is not None else [],
            "stub": self.stub.pids() if self.stub is not None else [],
            "loadgen": [loadgen.pid for loadgen in self.loadgens],
        }
        misses_before = self.cache_misses(mode)
        busy_before = procstat.system_busy_seconds()
        before = {name: procstat.total_cpu_seconds(pids) for name, pids in groups.items()}
        run = self.drive(mode, key, concurrency, requests, offset)
        after = {name: procstat.total_cpu_seconds(pids) for name, pids in groups.items()}
        busy = procstat.system_busy_seconds() - busy_before
        misses_after = self.cache_misses(mode)
        run["cpu"] = {name: after[name] - before[name] for name in groups}
        run["cpu"]["other"] = max(0.0, busy - sum(run["cpu"].values()))
        run["cache_misses"] = (
            None if misses_before is None or misses_after is None else misses_after - misses_before
        )
        run["proxy_peak_rss_bytes"] = procstat.peak_rss_bytes(groups["proxy"]) if server else None
        return run

    def measure(
        self, mode: str, clipset: ClipSet, concurrency: int, requests: int, phase: str = "warm"
    ) -> dict[str, Any]:
        run = self.sample(mode, clipset.workload.key, concurrency, requests)
        return summarise(mode, clipset, concurrency, phase, [run])

    def cache_misses(self, mode: str) -> int | None:
        server = self.servers.get(mode)
        if server is None or not modes.MODES[mode].gateway:
            return None
        return read_cache_misses(server.url)


def read_cache_misses(origin: str) -> int:
    with urllib.request.urlopen(origin + "/gateway/metrics", timeout=10) as reply:
        text = reply.read().decode()
    for line in text.splitlines():
        if line.startswith("audio_gateway_cache_misses_total "):
            return int(float(line.split()[1]))
    raise RuntimeError("audio_gateway_cache_misses_total is missing from /gateway/metrics")
