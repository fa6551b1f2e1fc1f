"""How the bridge refuses: the 400s naming what it does not translate, and the key check that
keeps anything from being dropped silently at any depth. Pure."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from ..errors import InvalidRequest

UNSUPPORTED = "unsupported_by_audio_bridge"

# Values that say "off": such a key is as good as absent (null always is, as for vLLM).
OFF = (None, False)


def unsupported(param: str, reason: str) -> InvalidRequest:
    """400 `unsupported_by_audio_bridge`: the bridge has no chat translation for `param`."""
    return InvalidRequest(
        f"{param}: {reason}; the audio bridge (responses.audio = 'chat_bridge') does not "
        f"translate this into its /v1/chat/completions request",
        param=param,
        code=UNSUPPORTED,
    )


def invalid(param: str, message: str, code: str) -> InvalidRequest:
    """400 for a malformed value (not a feature the bridge lacks)."""
    return InvalidRequest(f"{param}: {message}", param=param, code=code)


def check_keys(obj: Mapping[str, Any], path: str, known: Collection[str]) -> None:
    """Refuse the first key of `obj` set to something other than null or false that is not in
    `known`, naming it as `path.key`."""
    for key, value in obj.items():
        if key not in known and not any(value is off for off in OFF):
            raise unsupported(f"{path}.{key}", "not a field the bridge translates")


def require_str(obj: Mapping[str, Any], key: str, path: str, code: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise invalid(f"{path}.{key}", "must be a string", code)
    return value


def require_object(value: Any, path: str, code: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise invalid(path, "must be an object", code)
    return value
