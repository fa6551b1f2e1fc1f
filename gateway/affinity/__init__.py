"""The clip key: one short hex string naming a request's clips, for the routers in front of
many vLLM replicas (`[routing] affinity_headers`). Pure: no I/O, no state.

    key.py      a clip's digest (its bytes' sha256, or what the gateway knows of a clip whose
                bytes it did not hash) and the key of an ordered list of digests
    parts.py    the digests of the audio parts a client put in a chat or Responses body
    headers.py  the header names (checked at start-up) and the headers with the key set

May import: `naming` (what an audio part holds) and `hop_headers` (the names the relay owns).
Nothing else of the gateway.
"""

from .headers import check_header_names, with_clip_key
from .key import (
    KEY_HEX_CHARS,
    SHA256_PREFIX,
    base64_digest,
    bytes_digest,
    clip_key,
    identity_digest,
    sha256_digest,
)
from .parts import part_digests, placed_digests

__all__ = [
    "KEY_HEX_CHARS",
    "SHA256_PREFIX",
    "base64_digest",
    "bytes_digest",
    "check_header_names",
    "clip_key",
    "identity_digest",
    "part_digests",
    "placed_digests",
    "sha256_digest",
    "with_clip_key",
]
