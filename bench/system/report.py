"""The system bench's results: JSON, a Markdown report that leads with the pair against vLLM
alone, the goals (met or not, with the figures) and one PNG. `python -m bench.system.report
RESULT.json` renders a saved result again."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.system.split import split_goals, split_section

DIRECT, REFERENCE, NORMALIZED = "vllm-direct", "gateway-reference", "gateway-reference-normalize"
GATEWAY_SHARE_GOAL = 0.10
REFERENCE_ABOVE_TEXT_GOAL = 0.25
NORMALIZED_CPU_GOAL, NORMALIZED_BYTES_GOAL = 0.5, 5.0
COLUMNS = ("api_server_cpu_ms", "vllm_cpu_ms", "gateway_cpu_ms", "p50_ms", "p95_ms", "upstream_kb")


def cell(results: dict[str, Any], workload: str, mode: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = results["cells"].get(f"{workload}|{mode}")
    return found


def wave_workloads(results: dict[str, Any]) -> list[str]:
    """The 16-seed workloads with audio (waves and conversations)."""
    return [w for w in results["workloads"] if not w.startswith("first") and "text" not in w]


def text_baseline(results: dict[str, Any], workload: str) -> dict[str, Any] | None:
    """Text only in the same shape: conversations for conversations, waves for waves."""
    name = "turns text only" if workload.startswith("turns") else "text only"
    return cell(results, name, DIRECT)


def pair_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Per 16-seed workload: vLLM's API server alone (direct) against the pair (reference)."""
    rows = []
    for workload in wave_workloads(results):
        text = text_baseline(results, workload)
        direct, reference = cell(results, workload, DIRECT), cell(results, workload, REFERENCE)
        if not (direct and reference):
            continue
        pair = reference["api_server_cpu_ms"] + reference["gateway_cpu_ms"]
        row = {
            "workload": workload,
            "direct_ms": direct["api_server_cpu_ms"],
            "reference_ms": reference["api_server_cpu_ms"],
            "gateway_ms": reference["gateway_cpu_ms"],
            "pair_ms": pair,
            "pair_over_direct": pair / direct["api_server_cpu_ms"],
            "gateway_share": reference["gateway_cpu_ms"] / reference["api_server_cpu_ms"],
            "above_text": None,
        }
        if text and direct["api_server_cpu_ms"] > text["api_server_cpu_ms"]:
            row["above_text"] = (reference["api_server_cpu_ms"] - text["api_server_cpu_ms"]) / (
                direct["api_server_cpu_ms"] - text["api_server_cpu_ms"]
            )
        rows.append(row)
    return rows


def goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    rows = pair_rows(results)
    found: list[dict[str, Any]] = []
    for row in rows:
        w = row["workload"]
        found.append(
            _goal(
                f"{w}: gateway CPU / API-server CPU",
                f"<= {GATEWAY_SHARE_GOAL}",
                row["gateway_share"],
                row["gateway_share"] <= GATEWAY_SHARE_GOAL,
            )
        )
        if row["above_text"] is not None:
            found.append(
                _goal(
                    f"{w}: (reference - text) / (direct - text), API server",
                    f"<= {REFERENCE_ABOVE_TEXT_GOAL}",
                    row["above_text"],
                    row["above_text"] <= REFERENCE_ABOVE_TEXT_GOAL,
                )
            )
        found.append(
            _goal(
                f"{w}: pair / vLLM alone",
                "< 1",
                row["pair_over_direct"],
                row["pair_over_direct"] < 1,
            )
        )
    for workload in results["workloads"]:
        if not (workload.startswith("first") and "44s" in workload):
            continue
        original, normalized = (
            cell(results, workload, REFERENCE),
            cell(results, workload, NORMALIZED),
        )
        if not (original and normalized):
            continue
        cpu = normalized["api_server_cpu_ms"] / original["api_server_cpu_ms"]
        found.append(
            _goal(
                f"{workload}: normalized / original, API-server CPU",
                f"<= {NORMALIZED_CPU_GOAL}",
                cpu,
                cpu <= NORMALIZED_CPU_GOAL,
            )
        )
        fewer = original["upstream_kb"] / max(normalized["upstream_kb"], 1e-9)
        found.append(
            _goal(
                f"{workload}: upstream bytes, original / normalized",
                f">= {NORMALIZED_BYTES_GOAL}",
                fewer,
                fewer >= NORMALIZED_BYTES_GOAL,
            )
        )
    return found + split_goals(results)


def _goal(what: str, target: str, measured: float, met: bool) -> dict[str, Any]:
    return {"goal": what, "target": target, "measured": round(measured, 3), "met": met}


def markdown(results: dict[str, Any]) -> str:
    engine = results["engine"]
    lines = [
        f"# System bench, {results['date']}: the gateway + vLLM pair against vLLM alone",
        "",
        "Real vLLM 0.32.0 (CPU build) serving the tiny random-weight Qwen2-Audio of "
        f"engine/models.py; healthy after {engine['startup_s']:.0f} s, "
        f"{engine['rss_bytes'] / 2**30:.2f} GiB RSS; "
        f"{results['waves']} interleaved waves per workload and mode, {results['seeds']} seeds a "
        "wave, `max_tokens` 4. CPU per request is each thread's time on the CPU "
        "(/proc/<pid>/task/*/schedstat). " + _client_line(results) + "Command: "
        f"`{' '.join(['python -m bench.system', *results.get('argv', [])])}`.",
        "",
        "## What the pair costs against vLLM alone (16-seed waves, CPU ms per request)",
        "",
        "| workload | vLLM alone (direct) | pair: gateway + vLLM (reference) | of which gateway "
        "| pair / alone | gateway / vLLM API server |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in pair_rows(results):
        lines.append(
            f"| {row['workload']} | {row['direct_ms']:.1f} | {row['pair_ms']:.1f} | "
            f"{row['gateway_ms']:.2f} | {row['pair_over_direct']:.2f} | "
            f"{100 * row['gateway_share']:.0f}% |"
        )
    lines += [
        "",
        "## Goals",
        "",
        "| goal | target | measured | met |",
        "| --- | --- | ---: | --- |",
    ]
    lines += [
        f"| {g['goal']} | {g['target']} | {g['measured']} | {'yes' if g['met'] else '**no**'} |"
        for g in goals(results)
    ]
    lines += split_section(results)
    lines += [
        "",
        "## Every cell",
        "",
        "| workload | mode | API server ms | all vLLM ms | "
        "gateway ms | p50 ms | p95 ms | KB to vLLM | requests | errors |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for workload in results["workloads"] + results.get("uuid_only_waves", []):
        for mode in results["modes"]:
            if found := cell(results, workload, mode):
                figures = " | ".join(f"{found[c]:.1f}" for c in COLUMNS)
                lines.append(
                    f"| {workload} | {mode} | {figures} | {found['requests']} | {found['errors']} |"
                )
    if results["skipped"]:
        lines += ["", "Left out: " + "; ".join(results["skipped"]) + "."]
    return "\n".join(lines) + "\n"


def _client_line(results: dict[str, Any]) -> str:
    client = results.get("client")
    if not client:
        return ""
    return (
        f"Client: {client['description']}: {client['connections_opened']} connections for "
        f"{client['requests']} requests. "
    )


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = results["workloads"]
    modes = results["modes"]
    figure, axis = plt.subplots(figsize=(max(10, len(names) * 1.1), 5))
    width = 0.8 / len(modes)
    for index, mode in enumerate(modes):
        api = [(cell(results, w, mode) or {}).get("api_server_cpu_ms", 0.0) for w in names]
        gateway = [(cell(results, w, mode) or {}).get("gateway_cpu_ms", 0.0) for w in names]
        xs = [i + index * width for i in range(len(names))]
        axis.bar(xs, api, width, label=f"{mode}: vLLM API server")
        axis.bar(xs, gateway, width, bottom=api, label=f"{mode}: gateway", hatch="//", alpha=0.6)
    axis.set_xticks(
        [i + 0.4 - width / 2 for i in range(len(names))], names, rotation=30, ha="right"
    )
    axis.set_ylabel("CPU ms per request")
    axis.set_title("Gateway + vLLM API server against vLLM alone (real engine, CPU)")
    axis.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write_results(
    results: dict[str, Any], directory: Path, name: str, plot_png: bool = True
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    stem = directory / f"{results['date']}-{name}"
    results = {**results, "goals": goals(results)}
    stem.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    text = markdown(results)
    stem.with_suffix(".md").write_text(text)
    print(text)
    if plot_png:
        plot(results, stem.with_suffix(".png"))
    return stem


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.system.report", description=__doc__)
    parser.add_argument("result", type=Path, help="a bench/results/*-system.json")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    results = json.loads(args.result.read_text())
    name = args.result.stem.split("-", 3)[-1]
    write_results(results, args.result.parent, name, plot_png=not args.no_plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
