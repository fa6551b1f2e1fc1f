"""The Markdown of workload (repeats): one row per (phase, mode), and issue 17's goals."""

from __future__ import annotations

import math
from typing import Any

GOALS = (
    # phase, what, the data/reference ratio the issue asks for
    ("waves", "vLLM frontend audio CPU per wave", "audio", 8.0),
    ("waves", "upstream bytes per request", "bytes", 10.0),
    ("waves-streamed", "vLLM frontend audio CPU per wave", "audio", 8.0),
    ("waves-streamed", "upstream bytes per request", "bytes", 10.0),
    ("turns", "vLLM frontend audio CPU per conversation", "audio", 3.5),
    ("turns", "upstream bytes per request", "bytes", 3.5),
)


def _fmt(value: Any, spec: str = ".2f") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)


def _audio(row: dict[str, Any]) -> float | None:
    """vLLM's frontend audio CPU per wave when measured, else the stub's decodes per wave."""
    value = row.get("frontend_audio_cpu_ms_per_wave")
    return value if value is not None else row.get("decodes_per_wave")


def _pairs(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    pairs: dict[str, dict[str, dict[str, Any]]] = {}
    for row in rows:
        pairs.setdefault(row["phase"], {})[row["mode"]] = row
    return pairs


def repeats_goals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    pairs = _pairs(rows)
    goals = []
    for phase, what, kind, target in GOALS:
        pair = pairs.get(phase, {})
        data, ref = pair.get("data"), pair.get("reference")
        ratio = None
        if data and ref:
            a, b = (
                (_audio(data), _audio(ref))
                if kind == "audio"
                else (data["upstream_bytes_per_request"], ref["upstream_bytes_per_request"])
            )
            ratio = a / b if a is not None and b else None
        goal = f"({phase}) {what}, data / reference"
        goals.append({"goal": goal, "target": f">= {target}x", "ratio": ratio,
                      "met": None if ratio is None else ratio >= target})  # fmt: skip
    for phase, pair in pairs.items():
        data, ref = pair.get("data"), pair.get("reference")
        if data and ref:
            a, b = data["gateway_cpu_ms_per_request"], ref["gateway_cpu_ms_per_request"]
            goal = f"({phase}) gateway CPU per request, reference / data"
            goals.append({"goal": goal, "target": "<= 1", "ratio": b / a if a else None,
                          "met": b <= a})  # fmt: skip
    return goals


def repeats_section(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    measured = all(r.get("frontend_audio_cpu_ms_per_wave") is not None for r in rows)
    clip_kb = rows[0].get("clip_bytes", 0) / 1000
    lines = ["", f"## Workload (repeats): {rows[0]['waves']} clips of ~{clip_kb:.0f} KB, "
             "data vs reference", ""]  # fmt: skip
    header = ["phase", "mode", "requests", "req/s", "p50 ms", "upstream KB/req",
              "gateway CPU ms/req", "retries /1k", "stub decodes /wave",
              "vLLM audio CPU ms/wave", "vLLM body CPU ms/wave", "errors"]  # fmt: skip
    body = [
        [r["phase"], r["mode"], str(r["requests"]), _fmt(r["rps"], ".0f"), _fmt(r["p50_ms"]),
         _fmt(r["upstream_bytes_per_request"] / 1000, ".1f"),
         _fmt(r["gateway_cpu_ms_per_request"], ".3f"), _fmt(r["retries_per_1k"], ".1f"),
         _fmt(r["decodes_per_wave"]), _fmt(r.get("frontend_audio_cpu_ms_per_wave")),
         _fmt(r.get("frontend_body_cpu_ms_per_wave")),
         str(r["errors"] + r["mismatched"])]
        for r in rows
    ]  # fmt: skip
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    lines += ["", "| goal | target | ratio | status |", "|---|---|---|---|"]
    for goal in repeats_goals(rows):
        status = "n/a" if goal["met"] is None else ("met" if goal["met"] else "NOT met")
        lines.append(f"| {goal['goal']} | {goal['target']} | {_fmt(goal['ratio'])} | {status} |")
    if not measured:
        lines += [
            "",
            "vLLM's frontend audio CPU was not measured (no vllm venv or "
            "bench/vllm_frontend_cpu/): the audio goals use the stub's decodes.",
        ]
    lines += ["", "vLLM audio CPU: `bench/vllm_frontend_cpu/` (vLLM 0.33's JSON + request "
              "validation, content-part parsing with media fetch and decode, data parser) on "
              "the bodies the stub received, minus the same bodies with their audio parts "
              "taken out; body CPU: the whole bodies (a uuid-only body still pays JSON and "
              "validation of its text)."]  # fmt: skip
    lines += ["", "A wave is one clip's 16 seeds sent together (4 waves in flight, a wave "
              "started every 64 ms: 250 requests/s in both modes); turns: one 4-turn "
              "conversation (16 in flight, one started every 16 ms). Fresh stub (processor cache, "
              "preprocessing delay, body log) and gateway per row; upstream bytes are the "
              "bodies the stub received, retries included."]  # fmt: skip
    return lines
