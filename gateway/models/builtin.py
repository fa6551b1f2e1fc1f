"""The built-in profiles: every audio-input architecture vLLM 0.32-0.34 serves whose limits are
known, keyed by its HF `architectures` name. Pure data.

Read in vLLM's own code (each model's processor: truncation, windows, `get_supported_mm_limits`,
the data parser's rate, `SupportsTranscription`) and run through its front end; the five the
real-engine suite builds are `run_here`. The Models guide (docs/guides/models.md) shows the same
table; tests/test_models_docs.py holds the two together.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import Translations
from .profile import ModelProfile

RATE_HZ = 16_000  # every chat model's rate but MiMo-V2-Omni's


@dataclass(frozen=True, slots=True)
class Architecture:
    """One built-in entry: the name people know the model by, its profile, and whether the
    project's real-engine suite serves it."""

    architecture: str
    name: str
    profile: ModelProfile
    run_here: bool = False


def _profile(
    *,
    window: float | None = None,
    max_clip: float | None = None,
    clips: int | None = None,
    rate: int = RATE_HZ,
    stereo: bool = True,
    uuid_only: bool = True,
    chat: bool = True,
    transcriptions: bool = False,
    translations: Translations = "none",
) -> ModelProfile:
    return ModelProfile(
        window_seconds=window,
        max_clip_seconds=max_clip,
        clips_per_prompt=clips,
        sample_rate=rate,
        accepts_stereo=stereo,
        accepts_uuid_only_parts=uuid_only,
        chat=chat,
        transcriptions=transcriptions,
        translations=translations,
    )


# Chat models that keep only the first 30 s of a clip: cut at 30 s.
_KEEPS_30_S = _profile(window=30, max_clip=30)
_QWEN_OMNI_3 = _profile(transcriptions=True, translations="translates")
_TRANSCRIBES_ONLY = _profile(chat=False, clips=1, transcriptions=True, translations="transcribes")
_GEMMA_4 = _profile()  # caps a clip at 750 audio tokens; not cut by the gateway
_GRANITE = _profile(clips=1, transcriptions=True, translations="translates")

ARCHITECTURES: tuple[Architecture, ...] = (
    Architecture("Qwen2AudioForConditionalGeneration", "Qwen2-Audio", _KEEPS_30_S, run_here=True),
    Architecture(
        "WhisperForConditionalGeneration",
        "Whisper",
        _profile(window=30, chat=False, clips=1, transcriptions=True, translations="english"),
        run_here=True,
    ),
    Architecture(
        "VoxtralForConditionalGeneration",
        "Voxtral",
        # --tokenizer-mode mistral: mistral-common decodes each part itself (a stereo array is
        # its 400) and validates it (a part without data is its 400, not a cache miss).
        _profile(
            window=30,
            clips=5,
            stereo=False,
            uuid_only=False,
            transcriptions=True,
            translations="transcribes",
        ),
        run_here=True,
    ),
    Architecture(
        "VoxtralRealtimeGeneration",
        "Voxtral Realtime",
        _profile(
            chat=False,
            clips=1,
            stereo=False,
            uuid_only=False,
            transcriptions=True,
            translations="transcribes",
        ),
    ),
    Architecture(
        "AudioFlamingo3ForConditionalGeneration",
        "Audio Flamingo 3",
        _profile(window=30, max_clip=600, clips=1),
        run_here=True,
    ),
    Architecture(
        "GlmAsrForConditionalGeneration",
        "GLM-ASR",
        _profile(window=30, max_clip=655, clips=1, transcriptions=True, translations="translates"),
        run_here=True,
    ),
    Architecture("Qwen2_5OmniForConditionalGeneration", "Qwen2.5-Omni", _KEEPS_30_S),
    Architecture("Qwen2_5OmniModel", "Qwen2.5-Omni", _KEEPS_30_S),
    Architecture("Qwen3OmniMoeForConditionalGeneration", "Qwen3-Omni", _QWEN_OMNI_3),
    Architecture("Qwen3ASRForConditionalGeneration", "Qwen3-ASR", _QWEN_OMNI_3),
    Architecture(
        "Gemma3nForConditionalGeneration",
        "Gemma 3n",
        _profile(window=30, max_clip=30, transcriptions=True, translations="translates"),
    ),
    Architecture("Gemma4ForConditionalGeneration", "Gemma 4", _GEMMA_4),
    Architecture("Gemma4UnifiedForConditionalGeneration", "Gemma 4", _GEMMA_4),
    Architecture("GraniteSpeechForConditionalGeneration", "Granite Speech", _GRANITE),
    Architecture("GraniteSpeechPlusForConditionalGeneration", "Granite Speech Plus", _GRANITE),
    Architecture(
        "MoonshotKimiaForCausalLM",
        "Kimi-Audio",
        _profile(clips=1, transcriptions=True, translations="transcribes"),
    ),
    Architecture("FunAudioChatForConditionalGeneration", "FunAudioChat", _profile(max_clip=300)),
    Architecture("MiMoV2OmniForCausalLM", "MiMo-V2-Omni", _profile(rate=24_000)),
    Architecture("Phi4MMForCausalLM", "Phi-4-multimodal", _profile()),
    Architecture("UltravoxModel", "Ultravox", _profile(window=30)),
    Architecture("MiniCPMO", "MiniCPM-o", _profile()),
    Architecture("MiDashengLMModel", "MiDashengLM", _profile()),
    Architecture("MossAudioModel", "MOSS-Audio", _profile()),
    Architecture("CohereAsrForConditionalGeneration", "CohereASR", _TRANSCRIBES_ONLY),
    Architecture("FireRedASR2ForConditionalGeneration", "FireRedASR2", _TRANSCRIBES_ONLY),
    Architecture("FunASRForConditionalGeneration", "FunASR", _TRANSCRIBES_ONLY),
    Architecture(
        "MossTranscribeDiarizeForConditionalGeneration",
        "MOSS-Transcribe-Diarize",
        _TRANSCRIBES_ONLY,
    ),
    Architecture(
        "CanaryForConditionalGeneration",
        "Canary",
        _profile(window=40, chat=False, clips=1, transcriptions=True, translations="unknown"),
    ),
    Architecture(
        "MingV3ASRForConditionalGeneration",
        "Ming-V3-ASR",
        _profile(chat=False, clips=1, transcriptions=True, translations="unknown"),
    ),
)

BUILTIN: dict[str, Architecture] = {entry.architecture: entry for entry in ARCHITECTURES}
PROFILES: dict[str, ModelProfile] = {entry.architecture: entry.profile for entry in ARCHITECTURES}
