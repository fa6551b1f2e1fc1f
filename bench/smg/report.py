"""The SMG bench's results: a summary per mode, the goals judged, a Markdown report of every
wave. `python -m bench.smg.report RESULT.json` renders a saved result again."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

SEEDS = 16
REQUESTS_GOAL = 1.1


def summary(result: dict[str, Any]) -> dict[str, float]:
    waves = result["waves"]
    requests = sum(w["requests"] for w in waves)
    later = waves[1:]
    return {
        "upstream_per_request": sum(w["upstream"] for w in waves) / requests,
        "first_wave_upstream_per_request": waves[0]["upstream"] / waves[0]["requests"],
        "later_upstream_per_request": sum(w["upstream"] for w in later)
        / max(sum(w["requests"] for w in later), 1),
        "misses": sum(w["misses"] for w in waves),
        "misses_after_first_wave": sum(w["misses"] for w in later),
        "processings_per_clip_wave": sum(w["processings"] for w in waves)
        / (len(waves) * result["clips"]),
        "errors": sum(w["errors"] for w in waves),
    }


def markdown(results: dict[str, Any]) -> str:
    lines = [
        f"# SMG in front of two stub replicas ({results['date']})",
        "",
        f"`{results['command']}`: {results['clips']} clips of {results['seconds']:g} s, "
        f"{SEEDS} seeds each a wave, {results['waves']} waves; {results['stub']}.",
        "",
        "| mode | upstream per client request (run) | first wave | later waves | misses "
        "(after the first wave) | processings per clip a wave | errors |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for result in results["modes"]:
        s = result["summary"]
        lines.append(
            f"| {result['mode']} | {s['upstream_per_request']:.3f} | "
            f"{s['first_wave_upstream_per_request']:.3f} | {s['later_upstream_per_request']:.3f} | "
            f"{int(s['misses'])} ({int(s['misses_after_first_wave'])}) | "
            f"{s['processings_per_clip_wave']:.2f} | {s['errors']} |"
        )
    lines += ["", "Goals:", ""]
    for goal in results["goals"]:
        lines.append(
            f"- {goal['goal']}: {goal['measured']} (target {goal['target']}): "
            f"{'met' if goal['met'] else 'NOT met'}"
        )
    for result in results["modes"]:
        lines += [
            "",
            f"## {result['mode']}: `--policy {result['policy']} "
            f"{' '.join(result['flags'])}`".rstrip()
            + "`" * 0,
            "",
            "| wave | requests | upstream | data parts | reference parts | misses | "
            "processings | errors |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for w in result["waves"]:
            lines.append(
                f"| {w['wave']} | {w['requests']} | {int(w['upstream'])} | "
                f"{int(w['data_parts'])} | {int(w['reference_parts'])} | {int(w['misses'])} | "
                f"{int(w['processings'])} | {w['errors']} |"
            )
        lines += [
            "",
            f"The gateway's `/gateway/health` references at the end: "
            f"`{json.dumps(result['references'])}`",
        ]
    return "\n".join(lines) + "\n"


def goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    by_mode = {r["mode"]: r["summary"] for r in results["modes"]}
    found = []
    if "defaults" in by_mode:
        ratio = by_mode["defaults"]["upstream_per_request"]
        found.append(
            {
                "goal": "SMG's defaults: upstream requests per client request over the run",
                "target": f"<= {REQUESTS_GOAL}",
                "measured": f"{ratio:.3f}",
                "met": ratio <= REQUESTS_GOAL,
            }
        )
    if "recommended" in by_mode:
        later = by_mode["recommended"]["misses_after_first_wave"]
        found.append(
            {
                "goal": "recommended flags: misses after the first wave",
                "target": "0",
                "measured": f"{int(later)}",
                "met": later == 0,
            }
        )
    return found


def write_results(results: dict[str, Any], directory: Path, name: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    stem = directory / f"{results['date']}-{name}"
    stem.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    text = markdown(results)
    stem.with_suffix(".md").write_text(text)
    print(text)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.smg.report", description="Render a saved SMG bench result again."
    )
    parser.add_argument("result", type=Path, help="a results/<date>-smg.json")
    args = parser.parse_args(argv)
    print(markdown(json.loads(args.result.read_text())), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
