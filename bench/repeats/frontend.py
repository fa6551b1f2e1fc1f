"""vLLM 0.33's front-end audio CPU on the bodies a repeats run recorded: bench/vllm_frontend_cpu/
run as a subprocess with the vllm venv's python (`$VLLM_VENV_PYTHON` or /work/venv-vllm), when
that venv exists; never imported (vLLM is not in the bench's venv)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from bench.shared import servers

VLLM_PYTHON_CANDIDATES = (os.environ.get("VLLM_VENV_PYTHON", ""), "/work/venv-vllm/bin/python")
FRONTEND_TOOL = servers.REPO_ROOT / "bench" / "vllm_frontend_cpu" / "run.py"
FRONTEND_TIMEOUT_SECONDS = 1800


def vllm_python() -> str | None:
    for candidate in VLLM_PYTHON_CANDIDATES:
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def frontend_cpu(bodies: Path) -> dict[str, Any] | None:
    """vLLM 0.33's frontend CPU on the recorded bodies: `audio_cpu_seconds`, each body's cost
    minus its text-only twin's (JSON parsing and request validation of the rest of a body are
    not audio work, and a uuid-only body still pays them), and `body_cpu_seconds`, the whole
    bodies'. None without the vllm venv or the tool."""
    python = vllm_python()
    if python is None or not FRONTEND_TOOL.is_file():
        return None
    report = _run_frontend_tool(python, bodies)
    if "error" in report:
        return {"error": report["error"], "audio_cpu_seconds": None}
    return {**report, "body_cpu_seconds": report.get("frontend_cpu_seconds")}


def _run_frontend_tool(python: str, bodies: Path) -> dict[str, Any]:
    command = [python, "-m", "bench.vllm_frontend_cpu", str(bodies)]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=FRONTEND_TIMEOUT_SECONDS,
        check=False,
        cwd=servers.REPO_ROOT,
    )
    if done.returncode != 0:
        return {"error": done.stderr[-2000:], "audio_cpu_seconds": float("nan")}
    result: dict[str, Any] = json.loads(done.stdout)
    return result
