"""Per-request multimodal kwargs, refused as vLLM refuses them unless the server trusts them.

vLLM 0.32 (`entrypoints/generate/base/protocol.py`, `validate_request_mm_kwargs`, called
first by `preprocess_chat` / `preprocess_cmpl`, so before any content part is parsed) refuses
a request whose `mm_processor_kwargs` or `media_io_kwargs` is non-empty with a 400, unless it
was started with `--trust-request-mm-kwargs` (here: `trust_request_mm_kwargs=True`).
The processor kwargs are checked first.
"""

from __future__ import annotations

from typing import Any

from .media import StubRejection

REFUSALS = {
    "mm_processor_kwargs": "they can change multimodal preprocessing resource usage",
    "media_io_kwargs": "they can change multimodal media loading resource usage",
}


def check_request_mm_kwargs(body: dict[str, Any], trusted: bool) -> None:
    """vLLM's 400 for the first non-empty kwargs field, unless `trusted`."""
    if trusted:
        return
    for name, why in REFUSALS.items():
        if body.get(name):
            raise StubRejection(
                f"Per-request {name} are disabled by default because {why}. Start the server "
                f"with --trust-request-mm-kwargs only when clients are trusted. "
                f"(parameter={name})",
                param=name,
            )
