"""The upstream's `GET /v1/models` answer, for placing served models (gateway.models)."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from .pool import UpstreamPool

MODEL_LIST_TIMEOUT_SECONDS = 5.0
MODEL_LIST_MAX_BYTES = 4 * 1024 * 1024


class ModelListUnavailable(Exception):
    """The upstream answered /v1/models with an error status or a body that is not JSON."""


async def fetch_model_list(pool: UpstreamPool) -> Any:
    """The parsed answer; raises `ModelListUnavailable`, a transport error or TimeoutError."""
    async with asyncio.timeout(MODEL_LIST_TIMEOUT_SECONDS):
        response = await pool.request("GET", f"{pool.path_prefix}/v1/models", [], None)
        try:
            if response.status != 200:
                raise ModelListUnavailable(f"GET /v1/models answered {response.status}")
            pieces, size = [], 0
            async for chunk in response.chunks():  # never more than the limit held
                size += len(chunk)
                if size > MODEL_LIST_MAX_BYTES:
                    raise ModelListUnavailable(
                        f"GET /v1/models answered more than {MODEL_LIST_MAX_BYTES} bytes"
                    )
                pieces.append(chunk)
            body = b"".join(pieces)
        finally:
            response.close()
    try:
        return msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise ModelListUnavailable(f"GET /v1/models is not JSON: {exc}") from None
