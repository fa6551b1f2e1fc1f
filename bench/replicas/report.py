"""The replicas bench's results: JSON, and a Markdown report of every wave, the goals (met or
not, with the figures) and the hot-clips case. `python -m bench.replicas.report RESULT.json`
renders a saved result again."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

KEY, SINGLE = "reference-key", "reference-single"
WITHOUT = ("reference-round_robin", "reference-consistent_hash")
PROCESSINGS_GOAL, CPU_GOAL = 1.05, 0.10


def rows_of(results: dict[str, Any], case: str, mode: str | None = None) -> list[dict[str, Any]]:
    return [r for r in results["rows"] if r["case"] == case and mode in (None, r["mode"])]


def per_clip(row: dict[str, Any]) -> float:
    return float(row["processings"]) / float(row["clips"])


def cpu_per_request(rows: list[dict[str, Any]]) -> float:
    requests = sum(int(r["requests"]) for r in rows)
    spent = sum(float(r["api_cpu_ms_per_request"]) * r["requests"] for r in rows)
    return float(spent) / max(requests, 1)


def wave_table(results: dict[str, Any], case: str) -> list[str]:
    lines = [
        "| mode | wave | clips | processings per clip | misses retried | API-server CPU ms "
        "per request (summed) | answered per replica | wall s | errors |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for row in sorted(rows_of(results, case), key=lambda r: (r["mode"], r["wave"])):
        misses = row.get("misses")
        lines.append(
            f"| {row['mode']} | {row['wave']} | {row['clips']} | {per_clip(row):.2f} | "
            f"{'-' if misses is None else int(misses)} | {row['api_cpu_ms_per_request']:.1f} | "
            f"{' / '.join(str(int(n)) for n in row['answered_per_replica'])} | "
            f"{row['wall_s']:.1f} | {row['errors']} |"
        )
    return lines


def goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    key, single = rows_of(results, "waves", KEY), rows_of(results, "waves", SINGLE)
    if not key:
        return []
    worst = max(per_clip(r) for r in key)
    both = all(sum(r["answered_per_replica"][i] for r in key) > 0 for i in (0, 1))
    later = sum(r.get("misses", 0) for r in key if r["wave"] > 1)
    found = [
        {"goal": "with the key: processings per clip per wave (the worst wave), both replicas "
                 "serving", "target": f"<= {PROCESSINGS_GOAL}, both",
         "measured": f"{worst:.2f}, {'both' if both else 'one'}",
         "met": worst <= PROCESSINGS_GOAL and both},
        {"goal": "with the key: reference misses after the first wave", "target": "0",
         "measured": f"{later:g}", "met": later == 0},
    ]  # fmt: skip
    if single:
        ratio = cpu_per_request(key) / cpu_per_request(single) - 1
        found.append({"goal": "with the key: API-server CPU per request summed over 2 replicas "
                              "against one replica", "target": f"within {CPU_GOAL:.0%}",
                      "measured": f"{ratio:+.1%}", "met": abs(ratio) <= CPU_GOAL})  # fmt: skip
    return found


def goal_lines(results: dict[str, Any]) -> list[str]:
    return [
        f"| {g['goal']} | {g['target']} | {g['measured']} | {'yes' if g['met'] else '**no**'} |"
        for g in goals(results)
    ]


def summary(results: dict[str, Any], case: str) -> list[str]:
    lines = [
        "| mode | processings per clip (mean) | misses retried | API-server CPU ms per request "
        "| answered per replica | wall s per wave (mean) |",
        "| --- | ---: | ---: | ---: | --- | ---: |",
    ]
    for mode in dict.fromkeys(r["mode"] for r in rows_of(results, case)):
        rows = rows_of(results, case, mode)
        answered = [sum(r["answered_per_replica"][i] for r in rows) for i in (0, 1)]
        misses = sum(r.get("misses", 0) for r in rows) if "misses" in rows[0] else None
        lines.append(
            f"| {mode} | {statistics.mean(per_clip(r) for r in rows):.2f} | "
            f"{'-' if misses is None else int(misses)} | {cpu_per_request(rows):.1f} | "
            f"{int(answered[0])} / {int(answered[1])} | "
            f"{statistics.mean(r['wall_s'] for r in rows):.1f} |"
        )
    return lines


def markdown(results: dict[str, Any]) -> str:
    lines = [
        f"# Replicas bench, {results['date']}: two engines behind vllm-router",
        "",
        f"Command: `{results['command']}`. Two replicas of the tiny Qwen2-Audio (vLLM 0.32.0, "
        f"CPU build) started side by side on one 2-core machine, both healthy "
        f"{max(results['engine']['startup_s']):.0f} s after the start; vllm-router 0.1.17 "
        f"(`--health-check-interval-secs 1 --cb-timeout-duration-secs 2`); {results['seeds']} "
        f"seeds a clip, {results['seconds']:g} s 16 kHz WAV clips, new clips every wave, "
        f"`reference_wait_ms = {results['reference_wait_ms']}`. Processings: vLLM's "
        "`vllm:mm_cache_queries_total` less `vllm:mm_cache_hits_total`, summed over replicas.",
        "",
        "## Goals",
        "",
        "| goal | target | measured | met |",
        "| --- | --- | --- | --- |",
        *goal_lines(results),
        "",
        "## Waves over 10 clips, by mode",
        "",
        *summary(results, "waves"),
        "",
        "## Hot clips: one clip a wave (fewer clips in flight than replicas)",
        "",
        *summary(results, "hot"),
        "",
        "## Every wave",
        "",
        *wave_table(results, "waves"),
        "",
        *wave_table(results, "hot"),
        "",
    ]
    return "\n".join(lines)


def write_results(results: dict[str, Any], directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    stem = directory / f"{results['date']}-{name}"
    stem.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    text = markdown(results)
    stem.with_suffix(".md").write_text(text)
    print(text)
    return stem.with_suffix(".md")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.replicas.report")
    parser.add_argument("result", type=Path)
    args = parser.parse_args(argv)
    results = json.loads(args.result.read_text())
    write_results(results, args.result.parent, args.result.stem.split("-", 3)[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
