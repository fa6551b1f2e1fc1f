"""The PNG beside a result: one panel per measured figure, every workload that ran.

(a) throughput, latency and proxy CPU per request against concurrency; (b) long-form req/s;
(c) the huge clip's peak RSS growth; (s3) req/s cold and warm per object mode; (repeats)
upstream bytes per request, data vs reference, per phase; (encode) cold-encode
MB/s. A workload that did not run leaves its panel saying so, never a blank or a stale figure.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.shared.workloads import ALL_MODES

Axis = Any  # matplotlib's Axes: imported only when a plot is drawn
MODE_ORDER = ALL_MODES


def _mode_rank(mode: str) -> int:
    return MODE_ORDER.index(mode) if mode in MODE_ORDER else len(MODE_ORDER)


def _colour(mode: str) -> str:
    return f"C{_mode_rank(mode) % 10}"


def _not_run(axis: Axis, title: str) -> None:
    axis.set_title(title)
    axis.text(0.5, 0.5, "not run", ha="center", va="center", transform=axis.transAxes)
    axis.set_xticks([])
    axis.set_yticks([])


def _warm(results: dict[str, Any], workload: str) -> list[dict[str, Any]]:
    return [p for p in results["points"] if p["workload"] == workload and p["phase"] == "warm"]


def _per_concurrency(
    axis: Axis, results: dict[str, Any], title: str, unit: str, *series: tuple[str, str, str]
) -> None:
    """Workload (a): `series` = (point key, line style, label suffix) per mode against c."""
    points = _warm(results, "a")
    if not points:
        return _not_run(axis, title)
    for mode in sorted({p["mode"] for p in points}, key=_mode_rank):
        mine = sorted((p for p in points if p["mode"] == mode), key=lambda p: p["concurrency"])
        xs = [p["concurrency"] for p in mine]
        for index, (key, style, suffix) in enumerate(series):
            ys = [p[key] for p in mine]
            if any(y is None for y in ys):
                continue  # direct mode has no proxy
            label = f"{mode}{suffix}" if index == 0 else None
            axis.plot(xs, ys, style, label=label, color=_colour(mode), alpha=1 - 0.4 * index)
    levels = sorted({p["concurrency"] for p in points})
    axis.set_xscale("log", base=2)
    axis.set_xticks(levels, [str(level) for level in levels])
    axis.set_xlabel("concurrency")
    axis.set_ylabel(unit)
    axis.set_title(title)
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=7)


def _bars(axis: Axis, title: str, unit: str, bars: list[tuple[str, float, str]]) -> None:
    """One bar per (label, value, colour); a panel saying "not run" when there are none."""
    if not bars:
        return _not_run(axis, title)
    labels = [label for label, _, _ in bars]
    axis.bar(labels, [value for _, value, _ in bars], color=[colour for *_, colour in bars])
    axis.set_title(title)
    axis.set_ylabel(unit)
    axis.tick_params(axis="x", rotation=35, labelsize=7)
    axis.grid(True, axis="y", alpha=0.3)


def throughput(axis: Axis, results: dict[str, Any]) -> None:
    _per_concurrency(axis, results, "(a) throughput", "requests/s", ("rps", "o-", ""))


def latency(axis: Axis, results: dict[str, Any]) -> None:
    _per_concurrency(
        axis, results, "(a) latency: p50 (solid), p99 (dashed)", "ms",
        ("p50_ms", "o-", ""), ("p99_ms", "x--", ""),
    )  # fmt: skip
    if _warm(results, "a"):
        axis.set_yscale("log")


def proxy_cpu(axis: Axis, results: dict[str, Any]) -> None:
    _per_concurrency(
        axis, results, "(a) proxy CPU per request", "ms", ("proxy_cpu_s_per_1k", "o-", "")
    )


def long_form(axis: Axis, results: dict[str, Any]) -> None:
    points = sorted(_warm(results, "b"), key=lambda p: _mode_rank(p["mode"]))
    at = f", c={points[0]['concurrency']}" if points else ""
    bars = [(p["mode"], p["rps"], _colour(p["mode"])) for p in points]
    _bars(axis, f"(b) long-form ~10 MB clips{at}", "requests/s", bars)


def huge_clip(axis: Axis, results: dict[str, Any]) -> None:
    rows = results.get("huge_clip") or []
    size = f" ({rows[0]['clip_bytes'] / 2**20:.0f} MiB clip)" if rows else ""
    bars = [(row["mode"], row["growth_mib"], _colour(row["mode"])) for row in rows]
    _bars(axis, f"(c) peak RSS growth{size}", "MiB", bars)
    if bars:
        axis.set_yscale("log")


def objects(axis: Axis, results: dict[str, Any]) -> None:
    rows = results.get("objects") or []
    shade = {"cold": "C7", "warm": "C2"}
    bars = [(f"{r['mode']} {r['phase']}", r["rps"], shade.get(r["phase"], "k")) for r in rows]
    _bars(axis, "(s3) objects on a local S3 server", "requests/s", bars)


def repeats(axis: Axis, results: dict[str, Any]) -> None:
    rows = results.get("repeats") or []
    shade = {"data": "C0", "reference": "C1"}  # the two [splice] repeats modes
    bars = [
        (f"{r['phase']} {r['mode']}", r["upstream_bytes_per_request"] / 1000, shade[r["mode"]])
        for r in rows
    ]
    _bars(axis, "(repeats) upstream bytes per request", "kB", bars)


def encode(axis: Axis, results: dict[str, Any]) -> None:
    figures = results.get("encode") or {}
    names = (
        ("gateway", "gateway best"),
        ("gateway_first", "gateway first"),
        ("stdlib", "stdlib base64"),
        ("base64_w0", "GNU base64 -w0"),
    )
    bars = [
        (label, figures[f"{name}_mb_s"], f"C{index}")
        for index, (name, label) in enumerate(names)
        if figures.get(f"{name}_mb_s")
    ]
    _bars(axis, "(encode) cold encode of one WAV", "MB/s of audio", bars)


PANELS: tuple[Callable[[Axis, dict[str, Any]], None], ...] = (
    throughput, latency, proxy_cpu, long_form, huge_clip, objects, repeats, encode,
)  # fmt: skip


def render_plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, 4, figsize=(22, 10))
    for draw, axis in zip(PANELS, axes.flat, strict=True):
        draw(axis, results)
    figure.suptitle(f"audio-gateway bench: {results['name']} ({results['date']})")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
