"""`python -m bench [--quick] [--name NAME] [--modes ...] [--workloads ...]
[--connection-per-request] [--unpaced-stub]`

Runs every selected mode against one stub upstream with one load generator, then writes
`bench/results/<date>-<name>.json`, the Markdown table beside it (also printed) and a PNG plot.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from bench.objects.run import OBJECT_MODES
from bench.proxies.modes import MODES
from bench.proxies.report import write_results
from bench.proxies.runner import run_benchmark
from bench.shared.clients import connections_mode
from bench.shared.results import RESULTS_DIR
from bench.shared.stub_timing import PLAIN, VLLM_LIKE
from bench.shared.workloads import ALL_MODES, Scenario, quick_scenario, standard_scenario

WORKLOAD_CHOICES = ("a", "b", "c", "s3", "repeats", "encode")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="audio-gateway vs direct, nginx and the seed reference: throughput, "
        "latency, CPU and memory, all modes in one run.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="every workload and mode, scaled down (minutes)"
    )
    parser.add_argument("--name", help="results file name part (default: standard or quick)")
    parser.add_argument(
        "--modes", nargs="+", choices=ALL_MODES, metavar="MODE",
        help=f"modes to run (default: all but gateway-keyed): {', '.join(ALL_MODES)}",
    )  # fmt: skip
    parser.add_argument(
        "--workloads", nargs="+", choices=WORKLOAD_CHOICES, metavar="W",
        help="a = ~56 KB clips, b = ~10 MB clips, c = one 256 MiB clip (peak RSS), "
        "s3 = ~56 KB clips on a local S3 server, "
        "repeats = clips sent again, repeats = data vs reference, "
        "encode = cold-encode MB/s vs base64 -w0 (default: all)",
    )  # fmt: skip
    parser.add_argument(
        "--loadgen-processes", type=int, default=None,
        help="load generator processes (default 1: see bench/README.md)",
    )  # fmt: skip
    parser.add_argument(
        "--connection-per-request", action="store_true",
        help="clients open a connection per request (default: keep-alive pools, as aiohttp "
        "and httpx clients do)",
    )  # fmt: skip
    parser.add_argument(
        "--unpaced-stub", action="store_true",
        help="the stub answers at once, head and body in one write (default: paced like vLLM, "
        f"{VLLM_LIKE.pace_answers} answers at a time {VLLM_LIKE.pace_ms:g} ms apart, head "
        "and body split; req/s is then the stub's pace)",
    )  # fmt: skip
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def scenario_from_args(args: argparse.Namespace) -> Scenario:
    scenario = quick_scenario() if args.quick else standard_scenario()
    if args.name:
        scenario = replace(scenario, name=args.name)
    if args.modes:
        scenario = scenario.with_modes(tuple(m for m in ALL_MODES if m in args.modes))
    if args.workloads:
        chosen = set(args.workloads)
        scenario = replace(
            scenario,
            workloads=tuple(w for w in scenario.workloads if w.key in chosen),
            huge_clip_bytes=scenario.huge_clip_bytes if "c" in chosen else 0,
            encode_file_bytes=scenario.encode_file_bytes if "encode" in chosen else 0,
        )
    scenario = replace(
        scenario,
        connections=connections_mode(args.connection_per_request),
        stub_timing=PLAIN if args.unpaced_stub else VLLM_LIKE,
    )
    if args.loadgen_processes:
        scenario = replace(scenario, loadgen_processes=args.loadgen_processes)
    return scenario


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    assert set(ALL_MODES) | set(OBJECT_MODES) == set(MODES)
    results = run_benchmark(scenario_from_args(args), progress=not args.no_progress)
    paths = write_results(results, args.results_dir, plot=not args.no_plot)
    print(paths["md"].read_text())
    print("written:", ", ".join(str(path) for path in paths.values()))
    failures = sum(p["errors"] for p in results["points"])
    failures += sum(h["errors"] for h in results["huge_clip"])
    failures += sum(row["errors"] for row in results.get("objects") or [])
    failures += sum(r["errors"] + r["mismatched"] for r in results.get("repeats") or [])
    failures += sum(1 for c in results["cache_checks"] if c.get("ok") is False)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
