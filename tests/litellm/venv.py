"""Where the suite finds LiteLLM: its own venv, built by `.ci/litellm/install` from the hashed
lock (LITELLM_VENV names another). Without it the suite skips with one line on a developer's
machine and fails under CI=true: CI never skips it."""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

import pytest

from tests.litellm.recipe import REPO_ROOT

PINNED_VERSION = "1.108.7"  # .ci/litellm/requirements.in
VERSION_SECONDS = 60.0


@functools.cache
def require_litellm() -> Path:
    """The venv's `litellm` executable; skips (fails under CI=true) when it is missing, fails
    when the venv holds another LiteLLM than the pinned one."""
    venv = Path(os.environ.get("LITELLM_VENV") or REPO_ROOT / ".ci-litellm-venv")
    executable = venv / "bin" / "litellm"
    if not executable.exists():
        reason = f"needs LiteLLM {PINNED_VERSION} in {venv} (run .ci/litellm/install)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI=true, so this is a failure", pytrace=False)
        pytest.skip(reason, allow_module_level=True)
    version = _installed_version(venv / "bin" / "python")
    if version != PINNED_VERSION:
        pytest.fail(f"{venv} holds litellm {version}, not {PINNED_VERSION}", pytrace=False)
    return executable


def _installed_version(python: Path) -> str:
    code = "import importlib.metadata as m; print(m.version('litellm'))"
    result = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, timeout=VERSION_SECONDS
    )
    return result.stdout.strip() or result.stderr.strip()
