"""The model the stub serves: its `/v1/models` card, and the per-model refusals a client sees.

vLLM's `/v1/models` lists one card per served name (`--served-model-name`, default the model):
`root` is the model it loaded (`--model`: a hub repo id or a directory), `parent` null, with
`max_model_len` and one permission object (`entrypoints/openai/models/serving.py`).

What a model's front end refuses in a chat prompt, as vLLM answers it (all 400s, before any
clip is processed):

- more audio items than the model takes (`clips_per_prompt`, vLLM's
  `get_supported_mm_limits`): `At most N audio(s) may be provided in one prompt.`;
- with `mistral` (`--tokenizer-mode mistral`, Voxtral): mistral-common validates every audio
  part itself, so a uuid-only part is its validation error (not a cache miss), and it decodes
  each clip itself, so a stereo clip is `audio_array.ndim=2`.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .media import ClipReport, StubRejection
from .mm_cache import AudioItem

DEFAULT_SERVED_NAME = "stub-audio-model"
MAX_MODEL_LEN = 32768
# mistral-common's pydantic error for `{"type": "audio_url", "audio_url": null, "uuid": ...}`
AUDIO_URL_CHUNK_ERROR = (
    "2 validation errors for AudioURLChunk\naudio_url.str\n  Input should be a valid string "
    "[type=string_type, input_value=None, input_type=NoneType]\n    For further information "
    "visit https://errors.pydantic.dev/2.14/v/string_type\naudio_url.AudioURL\n  Input should "
    "be a valid dictionary or instance of AudioURL [type=model_type, input_value=None, "
    "input_type=NoneType]\n    For further information visit "
    "https://errors.pydantic.dev/2.14/v/model_type"
)
STEREO_ERROR = "audio_array.ndim=2"


@dataclass(frozen=True, slots=True)
class ServedModel:
    name: str = DEFAULT_SERVED_NAME
    root: str | None = None  # None: the name (vLLM serves a model under its own path)
    clips_per_prompt: int | None = None  # None: no limit of the model's own
    mistral: bool = False

    def card(self) -> dict[str, Any]:
        created = int(time.time())
        permission = {
            "id": f"modelperm-{uuid.uuid4().hex}",
            "object": "model_permission",
            "created": created,
            "allow_create_engine": False,
            "allow_sampling": True,
            "allow_logprobs": True,
            "allow_search_indices": False,
            "allow_view": True,
            "allow_fine_tuning": False,
            "organization": "*",
            "group": None,
            "is_blocking": False,
        }
        return {
            "id": self.name,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": self.root or self.name,
            "parent": None,
            "max_model_len": MAX_MODEL_LEN,
            "permission": [permission],
        }

    def check_prompt(self, items: Sequence[AudioItem]) -> None:
        """The model front end's refusals of a prompt's audio items (StubRejection)."""
        limit = self.clips_per_prompt
        if limit is not None and len(items) > limit:
            raise StubRejection(f"At most {limit} audio(s) may be provided in one prompt.")
        if not self.mistral:
            return
        for item in items:
            if not isinstance(item, ClipReport):
                raise StubRejection(AUDIO_URL_CHUNK_ERROR)
            if item.channels is not None and item.channels > 1:
                raise StubRejection(STEREO_ERROR)


def add_served_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("the served model")
    group.add_argument("--model", default=None, help="vLLM's flag: the root /v1/models shows")
    group.add_argument(
        "--served-model-name", default=DEFAULT_SERVED_NAME, help="the id /v1/models shows"
    )
    group.add_argument(
        "--clips-per-prompt",
        type=int,
        default=None,
        help="the model's own limit of audio items per prompt (none: no limit)",
    )
    group.add_argument(
        "--tokenizer-mode",
        choices=["auto", "mistral"],
        default="auto",
        help="mistral: refuse uuid-only parts and stereo clips as mistral-common does",
    )


def served_from_arguments(args: argparse.Namespace) -> ServedModel:
    return ServedModel(
        args.served_model_name, args.model, args.clips_per_prompt, args.tokenizer_mode == "mistral"
    )
