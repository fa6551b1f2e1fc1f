"""The SMG bench's report from a result it could have written (no SMG run here): the run's
upstream requests per client request, the misses after the first wave, the goals judged."""

from __future__ import annotations

from typing import Any

from bench.smg.report import goals, markdown, summary


def wave(number: int, upstream: int, misses: int) -> dict[str, Any]:
    return {"wave": number, "requests": 128, "errors": 0, "upstream": upstream,
            "data_parts": 8, "reference_parts": 120, "misses": misses, "retries": misses,
            "processings": 8 if number == 1 else 0, "refused": misses}  # fmt: skip


def mode(name: str, waves: list[dict[str, Any]]) -> dict[str, Any]:
    result = {"mode": name, "policy": "consistent_hashing", "flags": [], "waves": waves,
              "references": None, "clips": 8}  # fmt: skip
    result["summary"] = summary(result)
    return result


def test_the_goals_judge_the_whole_run_and_the_later_waves() -> None:
    defaults = mode("defaults", [wave(1, 218, 90), *(wave(n, 128, 0) for n in range(2, 13))])
    recommended = mode("recommended", [wave(1, 128, 0), wave(2, 129, 1)])
    assert defaults["summary"]["upstream_per_request"] == (218 + 11 * 128) / (12 * 128)
    assert defaults["summary"]["misses_after_first_wave"] == 0
    results = {"date": "2026-12-04", "command": "python -m bench.smg", "clips": 8,
               "seconds": 3.0, "waves": 12, "stub": "a stub"}  # fmt: skip
    results["modes"] = [defaults, recommended]
    results["goals"] = goals(results)
    assert [goal["met"] for goal in results["goals"]] == [True, False]
    text = markdown(results)
    assert "| defaults | 1.059 |" in text
    assert "recommended flags: misses after the first wave: 1 (target 0): NOT met" in text
