"""bench.replicas' report: each goal judged from the waves' rows, and the Markdown written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.replicas.counts import REPLICA_SAMPLES, Reading, pick
from bench.replicas.report import goals, markdown, write_results


def wave(
    mode: str, number: int, processings: float, answered: list[float], **extra: Any
) -> dict[str, Any]:
    return {
        "case": "waves", "mode": mode, "wave": number, "clips": 10, "requests": 160,
        "processings": processings, "answered_per_replica": answered, "errors": 0,
        "api_cpu_ms_per_request": extra.pop("cpu", 6.0), "wall_s": 12.0, **extra,
    }  # fmt: skip


def results(*rows: dict[str, Any]) -> dict[str, Any]:
    return {
        "date": "2026-12-04", "command": "python -m bench.system --replicas 2",
        "engine": {"startup_s": [50.0, 52.0], "rss_bytes": [0, 0]}, "seeds": 16,
        "seconds": 3.0, "reference_wait_ms": 30000, "rows": list(rows),
    }  # fmt: skip


def judged(*rows: dict[str, Any]) -> list[bool]:
    return [goal["met"] for goal in goals(results(*rows))]


def test_the_key_meets_its_goals_with_one_processing_a_clip_on_both_replicas() -> None:
    assert judged(
        wave("reference-key", 1, 10, [96, 64], misses=0),
        wave("reference-key", 2, 10, [80, 80], misses=0, cpu=6.5),
        wave("reference-single", 1, 10, [160, 0], misses=0, cpu=6.2),
    ) == [True, True, True]


def test_a_second_processing_one_replica_idle_later_misses_or_more_cpu_fail() -> None:
    assert judged(
        wave("reference-key", 1, 11, [160, 0], misses=0),
        wave("reference-key", 2, 10, [160, 0], misses=2, cpu=7.0),
        wave("reference-single", 1, 10, [160, 0], misses=0, cpu=5.0),
    ) == [False, False, False]


def test_without_the_key_rows_there_is_nothing_to_judge(tmp_path: Path) -> None:
    rows = (wave("reference-round_robin", 1, 20, [80, 80], misses=70),)
    assert goals(results(*rows)) == []
    written = write_results(results(*rows), tmp_path, "replicas")
    assert written == tmp_path / "2026-12-04-replicas.md"
    assert "| reference-round_robin | 2.00 | 70 |" in markdown(results(*rows))


def test_a_wave_is_what_each_replica_counted_between_two_readings() -> None:
    text = (
        'vllm:mm_cache_queries_total{engine="0",model_name="m"} 32.0\n'
        'vllm:mm_cache_hits_total{engine="0",model_name="m"} 30.0\n'
        'vllm:request_success_total{engine="0",finished_reason="length"} 32.0\n'
        'http_requests_total{handler="/v1/chat/completions",method="POST",status="4xx"} 3.0\n'
        'http_requests_total{handler="/v1/models",method="GET",status="4xx"} 5.0\n'
    )
    after = pick(text, REPLICA_SAMPLES)
    assert after == {"queries": 32.0, "hits": 30.0, "answered": 32.0, "refused": 3.0}
    zero = dict.fromkeys(after, 0.0)
    row = Reading([after, zero], [2.0, 1.0], {}, 10.0).since(
        Reading([zero, zero], [1.0, 1.0], {}, 4.0), 32
    )
    assert row["processings"] == 2.0 and row["answered_per_replica"] == [32.0, 0.0]
    assert row["api_cpu_ms_per_request"] == 1000 / 32 and row["wall_s"] == 6.0
