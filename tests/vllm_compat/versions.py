"""Which vLLM this venv holds. The suite is written against 0.33 and 0.34 and records where
they differ. `.ci/vllm-compat` sets VLLM_COMPAT_VERSION, under which a missing vLLM or another
version fails the run instead of skipping it."""

from __future__ import annotations

import os
import warnings
from types import ModuleType

import pytest

SUPPORTED = ("0.33.", "0.34.")


def require_vllm() -> ModuleType:
    """vLLM, imported; skips the calling module when absent or unsupported (fails when
    VLLM_COMPAT_VERSION names another version)."""
    wanted = os.environ.get("VLLM_COMPAT_VERSION")
    with warnings.catch_warnings():  # vLLM's imports warn about the torch build
        warnings.simplefilter("ignore")
        try:
            import vllm
        except ImportError as error:
            if wanted:
                pytest.fail(f"VLLM_COMPAT_VERSION={wanted}, but {error}", pytrace=False)
            pytest.skip("needs vllm 0.33 or 0.34 (see .ci/vllm-compat)", allow_module_level=True)
    found: str = vllm.__version__
    if wanted and found != wanted:
        pytest.fail(f"VLLM_COMPAT_VERSION={wanted}, but vllm is {found}", pytrace=False)
    if not found.startswith(SUPPORTED):
        pytest.skip(f"written against vLLM 0.33 and 0.34, found {found}", allow_module_level=True)
    return vllm


def is_034(vllm: ModuleType) -> bool:
    return bool(vllm.__version__.startswith("0.34."))
