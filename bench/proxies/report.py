"""The results as files: `<date>-<name>.json`, a Markdown table beside it, and a PNG plot.

The goals (bench/proxies/goals.py) are judged when the results are written.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.proxies.goals import evaluate_goals
from bench.proxies.plot import render_plot
from bench.repeats.report import repeats_section
from bench.shared.workloads import ALL_MODES

MODE_ORDER = ALL_MODES


# --- Markdown -----------------------------------------------------------------------------


def _fmt(value: Any, spec: str = ".2f", none: str = "-") -> str:
    if value is None:
        return none
    return format(value, spec)


def _spread(rates: list[float]) -> str:
    """Half the range of a point's per-round req/s, in % of their mean: differences between
    modes smaller than this are noise ("-" for a point of one round)."""
    if len(rates) < 2:
        return "-"
    return f"{50 * (max(rates) - min(rates)) / (sum(rates) / len(rates)):.0f}%"


def _status(met: bool | None) -> str:
    return {True: "met", False: "**not met**", None: "n/a"}[met]


POINT_COLUMNS: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    ("mode", lambda p: p["mode"] + (" (cold)" if p["phase"] == "cold" else "")),
    ("c", lambda p: str(p["concurrency"])),
    ("req/s", lambda p: _fmt(p["rps"], ".0f")),
    ("rounds ±", lambda p: _spread(p.get("round_rps") or [])),
    ("p50 ms", lambda p: _fmt(p["p50_ms"], ".2f")),
    ("p99 ms", lambda p: _fmt(p["p99_ms"], ".2f")),
    ("proxy CPU s/1k req", lambda p: _fmt(p["proxy_cpu_s_per_1k"], ".3f")),
    ("proxy peak RSS MiB", lambda p: _fmt(p["proxy_peak_rss_mib"], ".0f")),
    ("stub CPU s/1k", lambda p: _fmt(p["stub_cpu_s_per_1k"], ".3f")),
    ("loadgen CPU", lambda p: _fmt(p["loadgen_cpu_util"] and 100 * p["loadgen_cpu_util"], ".0f")
     + "%"),
    ("other CPU", lambda p: _fmt(p.get("other_cpu_util"), ".2f")),
    ("requests", lambda p: str(p["requests"])),
    ("conns/req", lambda p: _fmt(p.get("connections_opened", 0) / max(p["requests"], 1), ".2f")),
    ("errors", lambda p: str(p["errors"])),
    ("cache misses", lambda p: _fmt(p["cache_misses"], "d")),
]  # fmt: skip


COLD_NOTE = (
    "`gateway (cold)` is the gateway's first pass over the workload (every clip a cache miss), "
    "run once before the rounds, so it has no `rounds ±`. An encode is a small part of what a "
    "request costs on small clips, so the cold and warm rows may come out in either order from "
    "one run to the next: what tells them apart is `cache misses`, not req/s."
)


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _mode_rank(mode: str) -> int:
    return MODE_ORDER.index(mode) if mode in MODE_ORDER else len(MODE_ORDER)


def workload_table(results: dict[str, Any], key: str) -> list[str]:
    points = [p for p in results["points"] if p["workload"] == key]
    points.sort(key=lambda p: (p["phase"] != "cold", p["concurrency"], _mode_rank(p["mode"])))
    rows = [[render(p) for _, render in POINT_COLUMNS] for p in points]
    return _table([name for name, _ in POINT_COLUMNS], rows)


def objects_section(rows: list[dict[str, Any]]) -> list[str]:
    """Workload (s3): req/s and GETs per clip, cold and warm, per object mode."""
    if not rows:
        return []
    lines = ["", f"## Workload (s3): {rows[0]['distinct_clips']} clips on a local S3 server "
             f"(moto), c={rows[0]['concurrency']}", ""]  # fmt: skip
    lines += _table(
        ["mode", "phase", "req/s", "p50 ms", "p99 ms", "GETs per clip", "HEADs per request",
         "proxy CPU s/1k req", "errors"],
        [
            [r["mode"], r["phase"], _fmt(r["rps"], ".0f"), _fmt(r["p50_ms"]), _fmt(r["p99_ms"]),
             _fmt(r["gets_per_clip"]), _fmt(r["heads_per_request"]),
             _fmt(r["proxy_cpu_s_per_1k"]), str(r["errors"])]
            for r in rows
        ],
    )  # fmt: skip
    lines += ["", "Each mode: a fresh proxy, the shuffled order walked twice (cold, then warm); "
              "GETs and HEADs counted at the S3 server. moto (in the bench process) serves "
              "every request on the same 2 cores."]  # fmt: skip
    return lines


def _parts(seconds: dict[str, float] | None) -> str:
    """Where the run's time went, as " (set-up 9 s, a 31 s, ...)"; "" for older results."""
    if not seconds:
        return ""
    return " (" + ", ".join(f"{part} {value:.0f} s" for part, value in seconds.items()) + ")"


def _conditions(results: dict[str, Any]) -> list[str]:
    """How the clients held connections and how the stub answered (older results: unknown)."""
    client, stub = results.get("client"), results.get("stub")
    if not client or not stub:
        return []
    return [
        f"Clients: {client['description']} ({client['connections_opened']} connections for "
        f"{client['requests']} requests). Stub: {stub['description']}.",
        "",
    ]


def render_markdown(results: dict[str, Any]) -> str:
    machine = results["machine"]
    scenario = results["scenario"]
    lines = [
        f"# audio-gateway bench: {results['name']} ({results['date']})",
        "",
        f"{machine['cpus']} CPUs ({machine['cpu_model']}), Linux {machine['kernel']}, "
        f"Python {machine['python']}, aiohttp {machine['aiohttp']}, "
        f"nginx {machine['nginx'] or 'absent'}; git `{machine['git']}`; "
        f"{'quick run, ' if results['quick'] else ''}took {results['duration_seconds']:.0f} s"
        f"{_parts(results.get('part_seconds'))}. "
        "Command: `python -m bench " + " ".join(results["argv"]) + "`.",
        "",
        *_conditions(results),
        "## Goals (issue 5)",
        "",
    ]
    goals = results["goals"]
    lines += _table(
        ["goal", "target", "measured", "status"],
        [[g["goal"], g["target"], g["measured"], _status(g["met"])] for g in goals],
    )
    for workload in scenario["workloads"]:
        key = workload["key"]
        if not any(p["workload"] == key for p in results["points"]):
            continue
        lines += ["", f"## Workload ({key}): {workload['title']}", ""]
        lines += workload_table(results, key)
        if any(p["workload"] == key and p["phase"] == "cold" for p in results["points"]):
            lines += ["", COLD_NOTE]
    if results["cache_checks"]:
        lines += ["", "## Cache misses (gateway, whole workload incl. its cold pass)", ""]
        lines += _table(
            ["workload", "misses", "distinct clips", "equal"],
            [
                [c["workload"], _fmt(c.get("misses"), "d"), str(c["distinct_clips"]),
                 "yes" if c.get("ok") else "**no**" if "ok" in c else "-"]
                for c in results["cache_checks"]
            ],
        )  # fmt: skip
    if results["huge_clip"]:
        lines += ["", "## Workload (c): one huge clip through a fresh proxy (path form)", ""]
        lines += _table(
            ["mode", "clip MiB", "RSS before MiB", "peak RSS MiB", "growth MiB", "seconds",
             "errors"],
            [
                [h["mode"], _fmt(h["clip_bytes"] / 2**20, ".0f"), _fmt(h["rss_before_mib"], ".0f"),
                 _fmt(h["peak_rss_mib"], ".0f"), _fmt(h["growth_mib"], ".1f"),
                 _fmt(h["seconds"], ".2f"), str(h["errors"])]
                for h in results["huge_clip"]
            ],
        )  # fmt: skip
        lines.append("")
        lines.append("Growth = VmHWM after the request minus VmRSS before it (after one small "
                     "warm-up request), summed over the proxy's processes.")  # fmt: skip
    lines += objects_section(results.get("objects") or [])
    lines += repeats_section(results.get("repeats") or [])
    encode = results.get("encode")
    if encode:
        lines += ["", f"## Cold encode, {encode['file_bytes'] / 1e6:.0f} MB WAV, warm page cache, "
                      f"best of {encode['repeats']}", ""]  # fmt: skip
        base = encode.get("base64_w0_mb_s")
        rows = []
        for name, label in (("gateway", "gateway encode_clip (pybase64, chunked), best"),
                            ("gateway_first", "gateway encode_clip, first in a fresh process"),
                            ("stdlib", "stdlib base64.b64encode(read_bytes())"),
                            ("base64_w0", f"GNU `{encode['command']}`")):  # fmt: skip
            speed = encode.get(f"{name}_mb_s")
            ratio = speed / base if speed and base else None
            rows.append([label, _fmt(speed, ".0f"), _fmt(ratio, ".2f") + "x"])
        lines += _table(["encoder", "MB/s of audio", "vs base64 -w0"], rows)
        lines += [f"- {note}" for note in encode.get("notes", [])]
    if results["notes"]:
        lines += ["", "## Notes", ""] + [f"- {note}" for note in results["notes"]]
    errors = [p for p in results["points"] if p["errors"]]
    if errors:
        lines += ["", "## Errors", ""]
        lines += [f"- {p['workload']} {p['mode']} c={p['concurrency']}: {p['errors']} errors, "
                  f"e.g. {p['error_samples'][:1]}" for p in errors]  # fmt: skip
    return "\n".join(lines) + "\n"


def rerender(json_path: Path, plot: bool = True) -> dict[str, Path]:
    """Rewrite the Markdown (and PNG) of a saved result, goals re-evaluated."""
    results = json.loads(json_path.read_text())
    return write_results(results, json_path.parent, plot=plot)


def write_results(results: dict[str, Any], directory: Path, plot: bool = True) -> dict[str, Path]:
    """Evaluate the goals, then write the JSON, Markdown and PNG; returns their paths."""
    results["goals"] = evaluate_goals(results)
    directory.mkdir(parents=True, exist_ok=True)
    stem = directory / f"{results['date']}-{results['name']}"
    paths = {"json": stem.with_suffix(".json"), "md": stem.with_suffix(".md")}
    paths["json"].write_text(json.dumps(results, indent=1) + "\n")
    paths["md"].write_text(render_markdown(results))
    if plot:
        paths["png"] = stem.with_suffix(".png")
        render_plot(results, paths["png"])
    return paths


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.proxies.report",
        description="Re-render saved results: each RESULT.json's Markdown and PNG, goals "
        "evaluated again (the Markdown is also printed).",
    )
    parser.add_argument("results", nargs="+", type=Path, metavar="RESULT.json")
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG")
    args = parser.parse_args(argv)
    for path in args.results:
        print(rerender(path, plot=not args.no_plot)["md"].read_text())


if __name__ == "__main__":
    main()
