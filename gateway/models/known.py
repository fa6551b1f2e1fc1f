"""Where a model's architecture can be read without the operator saying it. Pure.

- vLLM's `GET /v1/models`: each card's `id` is a served model name and `root` the model it
  loaded (a hub repo id or a directory); a LoRA adapter's card names its base in `parent`.
- A model directory: HF format's `config.json` `architectures`, or Mistral format's
  `params.json` (vLLM maps an audio encoder there to Voxtral, a causal one to Voxtral Realtime).
- A hub repo id (or a directory named after one): the families' names, `KNOWN_NAMES`.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

# (pattern on the last path component, lowercased) -> architecture; the first match wins.
KNOWN_NAMES: tuple[tuple[str, str], ...] = (
    (r"qwen2-audio", "Qwen2AudioForConditionalGeneration"),
    (r"qwen2\.5-omni", "Qwen2_5OmniForConditionalGeneration"),
    (r"qwen3-omni", "Qwen3OmniMoeForConditionalGeneration"),
    (r"qwen3-asr", "Qwen3ASRForConditionalGeneration"),
    (r"whisper", "WhisperForConditionalGeneration"),
    (r"voxtral.*realtime", "VoxtralRealtimeGeneration"),
    (r"voxtral", "VoxtralForConditionalGeneration"),
    (r"gemma-3n", "Gemma3nForConditionalGeneration"),
    (r"gemma-4", "Gemma4ForConditionalGeneration"),
    (r"audio-flamingo-3|audio_flamingo_3", "AudioFlamingo3ForConditionalGeneration"),
    (r"glm-asr", "GlmAsrForConditionalGeneration"),
    (r"granite-speech", "GraniteSpeechForConditionalGeneration"),
    (r"kimi-audio", "MoonshotKimiaForCausalLM"),
    (r"fun-audio-chat|funaudiochat", "FunAudioChatForConditionalGeneration"),
    (r"mimo-v2-omni", "MiMoV2OmniForCausalLM"),
    (r"phi-4-multimodal", "Phi4MMForCausalLM"),
    (r"ultravox", "UltravoxModel"),
    (r"minicpm-o", "MiniCPMO"),
    (r"midashenglm", "MiDashengLMModel"),
    (r"fireredasr2", "FireRedASR2ForConditionalGeneration"),
    (r"canary", "CanaryForConditionalGeneration"),
)
_KNOWN = tuple((re.compile(pattern), architecture) for pattern, architecture in KNOWN_NAMES)


def architecture_of_name(name: str) -> str | None:
    """The architecture a hub repo id or a directory's name says (`org/Voxtral-Mini-3B-2507`,
    `/models/qwen2-audio-7b-instruct`); None when no known family's name is in its last part."""
    last = name.rstrip("/").rsplit("/", 1)[-1].lower()
    return next((arch for pattern, arch in _KNOWN if pattern.search(last)), None)


def architecture_in_config(data: Any, known: Collection[str]) -> str | None:
    """A `config.json`'s architecture: the first of `architectures` with a profile (`known`),
    else its first; None when it names none."""
    names = data.get("architectures") if isinstance(data, dict) else None
    if not isinstance(names, list):
        return None
    names = [name for name in names if isinstance(name, str) and name]
    return next((name for name in names if name in known), names[0] if names else None)


def architecture_in_params(data: Any) -> str | None:
    """A Mistral-format `params.json`'s audio architecture, as vLLM maps it
    (`_remap_mistral_audio_args`); None for a model without an audio encoder."""
    multimodal = data.get("multimodal") if isinstance(data, dict) else None
    whisper = multimodal.get("whisper_model_args") if isinstance(multimodal, dict) else None
    if not isinstance(whisper, dict):
        return None
    encoder = whisper.get("encoder_args")
    causal = isinstance(encoder, dict) and bool(encoder.get("causal"))
    return "VoxtralRealtimeGeneration" if causal else "VoxtralForConditionalGeneration"


def root_of(cards: Any, name: str) -> str | None:
    """The `root` of served model `name` in a `/v1/models` answer (a LoRA adapter's: its
    base model's); None when the answer has no such card or it has no root."""
    data = cards.get("data") if isinstance(cards, dict) else None
    listed = data if isinstance(data, list) else []
    by_id = {
        card["id"]: card
        for card in listed
        if isinstance(card, dict) and isinstance(card.get("id"), str)
    }
    card = by_id.get(name)
    if card is None:
        return None
    parent = card.get("parent")
    if isinstance(parent, str) and parent in by_id and parent != name:
        card = by_id[parent]
    root = card.get("root")
    return root if isinstance(root, str) and root else None
