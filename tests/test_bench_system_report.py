"""bench.system's report: the pair against vLLM alone, and each goal judged from the cells."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.system.report import goals, markdown, pair_rows, write_results
from bench.system.split import split_rows


def row(api: float, gateway: float = 0.0, kb: float = 100.0) -> dict[str, Any]:
    return {
        "requests": 16, "errors": 0, "api_server_cpu_ms": api, "vllm_cpu_ms": 3 * api,
        "gateway_cpu_ms": gateway, "upstream_kb": kb, "p50_ms": 50.0, "p95_ms": 80.0,
        "error_samples": [],
    }  # fmt: skip


def results() -> dict[str, Any]:
    return {
        "date": "2026-12-03",
        "engine": {"startup_s": 50.0, "rss_bytes": 3 * 2**30, "can_resample": True},
        "waves": 1,
        "seeds": 16,
        "skipped": [],
        "modes": ["vllm-direct", "gateway-reference", "gateway-reference-normalize"],
        "workloads": [
            "30s wav16",
            "turns 3s wav16",
            "turns text only",
            "first 30s wav44s",
            "text only",
        ],
        "cells": {
            "30s wav16|vllm-direct": row(20.0),
            "30s wav16|gateway-reference": row(8.0, gateway=1.0, kb=80.0),
            "turns 3s wav16|vllm-direct": row(18.0),
            "turns 3s wav16|gateway-reference": row(17.0, gateway=1.0),
            "turns text only|vllm-direct": row(16.0),
            "text only|vllm-direct": row(5.0),
            "first 30s wav44s|gateway-reference": row(60.0, kb=7000.0),
            "first 30s wav44s|gateway-reference-normalize": row(20.0, gateway=9.0, kb=1280.0),
        },
    }


def test_the_pair_is_gateway_plus_api_server_against_direct() -> None:
    first = pair_rows(results())[0]
    assert first["workload"] == "30s wav16"
    assert first["pair_ms"] == 9.0 and first["pair_over_direct"] == 9.0 / 20.0
    assert first["above_text"] == (8.0 - 5.0) / (20.0 - 5.0)  # waves against text waves


def test_conversations_are_held_to_text_conversations() -> None:
    turns = pair_rows(results())[1]
    assert turns["above_text"] == (17.0 - 16.0) / (18.0 - 16.0)
    assert turns["pair_over_direct"] == 1.0


def test_each_goal_is_judged() -> None:
    judged = {g["goal"]: g["met"] for g in goals(results())}
    assert judged["30s wav16: gateway CPU / API-server CPU"] is False  # 1/8 > 0.10
    assert judged["30s wav16: (reference - text) / (direct - text), API server"] is True
    assert judged["30s wav16: pair / vLLM alone"] is True
    assert judged["turns 3s wav16: pair / vLLM alone"] is False  # 18/18 is not below 1
    assert judged["first 30s wav44s: normalized / original, API-server CPU"] is True
    assert judged["first 30s wav44s: upstream bytes, original / normalized"] is True  # 5.47x


def test_the_report_leads_with_the_pair(tmp_path: Path) -> None:
    text = markdown(results())
    assert text.index("against vLLM alone") < text.index("## Goals") < text.index("## Every cell")
    stem = write_results(results(), tmp_path, "system", plot_png=True)
    assert stem.with_suffix(".json").is_file() and stem.with_suffix(".png").stat().st_size > 0


def with_second_waves() -> dict[str, Any]:
    """`30s wav16` again: the gateway spends 0.5 ms a uuid-only request, 1.0 on the first wave."""
    data = results()
    data["uuid_only_waves"] = ["30s wav16 again"]
    data["cells"]["30s wav16 again|vllm-direct"] = row(15.0)
    data["cells"]["30s wav16 again|gateway-reference"] = row(4.0, gateway=0.5, kb=0.6)
    data["client"] = {"connections": "per-request", "description": "one per request",
                      "connections_opened": 96, "requests": 96}  # fmt: skip
    return data


def test_uuid_only_requests_and_the_clip_request_are_split() -> None:
    (split,) = split_rows(with_second_waves())
    assert split["mode"] == "gateway-reference"
    assert split["uuid_only_ms"] == 0.5 and split["first_wave_ms"] == 1.0
    assert split["clip_request_ms"] == 16 * 1.0 - 15 * 0.5  # the first wave less 15 uuid-only
    assert split["uuid_only_share"] == 0.5 / 4.0 and split["first_wave_share"] == 1.0 / 8.0
    judged = {g["goal"]: g["met"] for g in goals(with_second_waves())}
    assert judged["30s wav16: gateway CPU per uuid-only request"] is True  # 0.5 <= 0.6
    assert split_rows(results()) == []  # a result without second waves has no split


def test_the_report_says_how_the_client_held_connections() -> None:
    text = markdown(with_second_waves())
    assert "Client: one per request: 96 connections for 96 requests." in text
    assert "uuid-only, and the request carrying the clip" in text
    assert "| 30s wav16 | gateway-reference | 1.000 | 0.500 | 8.50 |" in text
    assert "| 30s wav16 again | gateway-reference |" in text  # every cell, second waves too
