"""The system bench's split of the gateway's CPU: per uuid-only request, and for the one
request of a wave that carries the clip.

Each 16-seed wave of a new clip is followed by a wave of the same clip (`<workload> again`).
By reference, the first wave sends the clip's data once and its other seeds uuid-only; the
second wave sends only uuids (its `KB to vLLM` shows it). So:

    uuid-only request     = the gateway's CPU per request on the second wave
    the request with clip = the first wave's CPU - (seeds - 1) x a uuid-only request

CPU is read around whole waves (a wave is a few scheduler ticks; schedstat counts nanoseconds),
so the clip's share is a difference of sums, not a per-request reading.
"""

from __future__ import annotations

from typing import Any

AGAIN_SUFFIX = " again"
REFERENCE_MODES = ("gateway-reference", "gateway-reference-normalize")
UUID_ONLY_GOAL_MS = 0.6


def again_name(workload: str) -> str:
    return workload + AGAIN_SUFFIX


def split_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Per 16-seed wave workload and reference mode: the gateway's CPU split, and the ratios to
    vLLM's API server on the same waves."""
    rows = []
    seeds = results["seeds"]
    for again in results.get("uuid_only_waves", []):
        workload = again.removesuffix(AGAIN_SUFFIX)
        for mode in REFERENCE_MODES:
            first = results["cells"].get(f"{workload}|{mode}")
            second = results["cells"].get(f"{again}|{mode}")
            if not (first and second and first["requests"] and second["requests"]):
                continue
            uuid_ms, first_ms = second["gateway_cpu_ms"], first["gateway_cpu_ms"]
            rows.append(
                {
                    "workload": workload,
                    "mode": mode,
                    "first_wave_ms": first_ms,
                    "uuid_only_ms": uuid_ms,
                    "clip_request_ms": seeds * first_ms - (seeds - 1) * uuid_ms,
                    "api_first_wave_ms": first["api_server_cpu_ms"],
                    "api_uuid_only_ms": second["api_server_cpu_ms"],
                    "first_wave_share": _share(first_ms, first["api_server_cpu_ms"]),
                    "uuid_only_share": _share(uuid_ms, second["api_server_cpu_ms"]),
                    "uuid_only_kb": second["upstream_kb"],
                }
            )
    return rows


def _share(gateway_ms: float, api_ms: float) -> float | None:
    return gateway_ms / api_ms if api_ms > 0 else None


def split_goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "goal": f"{row['workload']}: gateway CPU per uuid-only request",
            "target": f"<= {UUID_ONLY_GOAL_MS} ms",
            "measured": round(row["uuid_only_ms"], 3),
            "met": row["uuid_only_ms"] <= UUID_ONLY_GOAL_MS,
        }
        for row in split_rows(results)
        if row["mode"] == "gateway-reference"
    ]


def split_section(results: dict[str, Any]) -> list[str]:
    """The Markdown section (empty when the result has no second waves)."""
    rows = split_rows(results)
    if not rows:
        return []
    lines = [
        "",
        "## The gateway's CPU per request: uuid-only, and the request carrying the clip",
        "",
        "Each wave of a new clip is followed by a wave of the same clip, uuid-only by "
        "reference (`KB to vLLM` of that wave). The clip's request = the first wave's CPU minus "
        f"{results['seeds'] - 1} uuid-only requests. Clients: "
        f"{(results.get('client') or {}).get('connections', 'keep-alive')}.",
        "",
        "| workload | mode | gateway, 1st wave ms/req | gateway, uuid-only ms/req | "
        "gateway, request with the clip ms | API server, 1st wave ms/req | "
        "API server, uuid-only ms/req | gateway / API server, 1st wave | "
        "gateway / API server, uuid-only | KB to vLLM, uuid-only wave |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        lines.append(
            f"| {row['workload']} | {row['mode']} | {row['first_wave_ms']:.3f} | "
            f"{row['uuid_only_ms']:.3f} | {row['clip_request_ms']:.2f} | "
            f"{row['api_first_wave_ms']:.2f} | {row['api_uuid_only_ms']:.2f} | "
            f"{_percent(row['first_wave_share'])} | {_percent(row['uuid_only_share'])} | "
            f"{row['uuid_only_kb']:.1f} |"
        )
    return lines


def _percent(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.1f}%"
