"""`convert --to-key-prefix P`: a request's sidechannel written under another key prefix. Pure.

The sidechannel is read under the config's prefix (`source`), with the server's rules; its key
is renamed in place (the metadata keeps its order) to the same key under P (`target`). Every
other metadata key is left as it is. A request whose metadata holds a key that is ordinary
metadata under the config's prefix but would be the sidechannel under P cannot be renamed
without changing what the gateway reads: that is a 400 `conflicting_audio_keys` naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRequest
from ..naming.sidechannel import Sidechannel, SidechannelKeys


@dataclass(frozen=True, slots=True)
class KeyRenaming:
    """From the config's key names (`source`) to the output's (`target`)."""

    source: SidechannelKeys
    target: SidechannelKeys

    @property
    def active(self) -> bool:
        return self.source.prefix != self.target.prefix

    def check(self, request: dict[str, Any], sidechannel: Sidechannel | None) -> None:
        """Refuse a request that would mean something else under the target names (400)."""
        metadata = request.get("metadata")
        if not self.active or not isinstance(metadata, dict):
            return
        # Source and target names never coincide: no sidechannel key ends with another one.
        clashing = [name for name in self.target.names if name in metadata]
        if not clashing:
            return
        moved = ""
        if sidechannel is not None:
            moved = f" (where metadata.{sidechannel.key} becomes metadata."
            moved += f"{self.target.name(sidechannel.kind)})"
        raise InvalidRequest(
            f"metadata.{clashing[0]} is ordinary metadata under key prefix "
            f"{self.source.prefix!r} but would be the audio sidechannel under "
            f"{self.target.prefix!r}{moved}; rename or drop it first",
            param=f"metadata.{clashing[0]}",
            code="conflicting_audio_keys",
        )

    def renamed(self, request: dict[str, Any], sidechannel: Sidechannel) -> dict[str, Any]:
        """A copy of `request` with its sidechannel key under the target prefix, in place."""
        target = self.target.name(sidechannel.kind)
        metadata = {
            (target if key == sidechannel.key else key): value
            for key, value in request["metadata"].items()
        }
        return {**request, "metadata": metadata}
