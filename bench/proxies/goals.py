"""The goals of `python -m bench`, each judged met / not met with the figures behind it: the
gateway's req/s against nginx and the seed reference, its added p50, workload (c)'s peak RSS
growth and the cold encode against GNU base64. bench/README.md lists them."""

from __future__ import annotations

from typing import Any


def find_point(
    results: dict[str, Any], workload: str, mode: str, concurrency: int | None = None
) -> dict[str, Any] | None:
    point: dict[str, Any]
    for point in results["points"]:
        if (
            point["workload"] == workload
            and point["mode"] == mode
            and point["phase"] == "warm"
            and (concurrency is None or point["concurrency"] == concurrency)
        ):
            return point
    return None


def _goal(goal: str, target: str, measured: str, met: bool | None) -> dict[str, Any]:
    return {"goal": goal, "target": target, "measured": measured, "met": met}


def _ratio_goal(
    results: dict[str, Any], goal: str, workload: str, other: str, minimum: float, conc: int | None
) -> dict[str, Any]:
    ours, theirs = (find_point(results, workload, m, conc) for m in ("gateway", other))
    if ours is None or theirs is None or not theirs["rps"]:
        return _goal(goal, f">= {minimum}x", f"n/a ({other} or gateway not run)", None)
    ratio = ours["rps"] / theirs["rps"]
    at = f"c={ours['concurrency']}"
    measured = f"{ratio:.2f}x ({ours['rps']:.0f} vs {theirs['rps']:.0f} req/s, {at})"
    if ours["proxy_cpu_s_per_1k"] and theirs["proxy_cpu_s_per_1k"]:
        measured += (
            f"; proxy CPU {ours['proxy_cpu_s_per_1k']:.2f} vs "
            f"{theirs['proxy_cpu_s_per_1k']:.2f} ms/req"
        )
    return _goal(goal, f">= {minimum}x", measured, ratio >= minimum)


def _paced(results: dict[str, Any]) -> bool:
    return bool((results.get("stub") or {}).get("paced"))


PACED_NOTE = "; n/a: the stub was paced, so req/s and p50 are its pace (--unpaced-stub)"


def _unless_paced(results: dict[str, Any], goal: dict[str, Any]) -> dict[str, Any]:
    """Throughput and latency goals say nothing about the proxy when the stub paces answers."""
    if not _paced(results) or goal["met"] is None:
        return goal
    return {**goal, "measured": goal["measured"] + PACED_NOTE, "met": None}


def evaluate_goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    goals = [
        _ratio_goal(results, "(a) gateway vs nginx req/s at c=32", "a", "nginx", 0.9, 32),
        _ratio_goal(results, "(a) gateway vs seed-reference req/s at c=32", "a",
                    "seed-reference", 3.0, 32),
        _ratio_goal(results, "(b) gateway vs seed-reference req/s", "b", "seed-reference",
                    5.0, None),
    ]  # fmt: skip
    ours, nginx = find_point(results, "a", "gateway", 1), find_point(results, "a", "nginx", 1)
    if ours is None or nginx is None:
        goals.append(_goal("(a) gateway p50 - nginx p50 at c=1", "<= 0.3 ms", "n/a", None))
    else:
        added = ours["p50_ms"] - nginx["p50_ms"]
        measured = f"{added:+.3f} ms ({ours['p50_ms']:.3f} vs {nginx['p50_ms']:.3f} ms)"
        goals.append(_goal("(a) gateway p50 - nginx p50 at c=1", "<= 0.3 ms", measured,
                           added <= 0.3))  # fmt: skip
    goals = [_unless_paced(results, goal) for goal in goals]
    huge = {row["mode"]: row for row in results.get("huge_clip") or []}
    if "gateway" in huge:
        row = huge["gateway"]
        seed = huge.get("seed-reference")
        contrast = f"; seed-reference {seed['growth_mib']:.0f} MiB" if seed else ""
        ok = row["growth_mib"] <= 48 and row["errors"] == 0
        measured = f"{row['growth_mib']:.1f} MiB for {row['clip_bytes'] / 2**20:.0f} MiB{contrast}"
        goals.append(_goal("(c) gateway peak RSS growth", "<= 48 MiB", measured, ok))
    else:
        goals.append(_goal("(c) gateway peak RSS growth", "<= 48 MiB", "n/a", None))
    encode = results.get("encode") or {}
    if "gateway_mb_s" in encode and "base64_w0_mb_s" in encode:
        ratio = encode["gateway_mb_s"] / encode["base64_w0_mb_s"]
        measured = (
            f"{ratio:.2f}x ({encode['gateway_mb_s']:.0f} vs {encode['base64_w0_mb_s']:.0f} MB/s)"
        )
        goals.append(_goal("cold encode vs GNU base64 -w0", ">= 2x", measured, ratio >= 2))
    else:
        goals.append(_goal("cold encode vs GNU base64 -w0", ">= 2x", "n/a", None))
    return goals
