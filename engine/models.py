"""Build the tiny model directories the real engine serves: the audio chat models Qwen2-Audio,
Voxtral, Audio Flamingo 3 and GLM-ASR and the speech-to-text model Whisper, with random weights
(seeded; Voxtral has none, vLLM's `--load-format dummy` makes them), a tokenizer made here and
the processor configs vLLM reads. No network, a few seconds.

Runs in the engine's venv (torch, transformers, tokenizers, mistral-common):
`python engine/models.py OUT_DIR` writes `OUT_DIR/tiny-qwen2-audio`, `tiny-whisper`,
`tiny-voxtral`, `tiny-audio-flamingo3` and `tiny-glm-asr`. The builders are in `engine/tiny/`,
one module per model.

The weights are random on purpose: the tests check plumbing, token counts and caching, never
what the model says. What has to be real is what vLLM's front end does with audio: the
16 kHz Whisper feature extractor (30 s windows, hop 160), and for Qwen2-Audio the audio
encoder's `max_source_positions` of 1500 (features are always padded to 3000 frames and the
encoder halves them), so a clip of S seconds becomes 25*S `<|AUDIO|>` placeholders, at most 750.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, this file's folder is on sys.path, not the repository the builders live in.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.tiny.audio_flamingo3 import build_audio_flamingo3
from engine.tiny.glm_asr import build_glm_asr
from engine.tiny.qwen2_audio import build_qwen2_audio
from engine.tiny.voxtral import build_voxtral
from engine.tiny.whisper import build_whisper

QWEN2_AUDIO_DIR = "tiny-qwen2-audio"
WHISPER_DIR = "tiny-whisper"
VOXTRAL_DIR = "tiny-voxtral"
AUDIO_FLAMINGO3_DIR = "tiny-audio-flamingo3"
GLM_ASR_DIR = "tiny-glm-asr"


def build_all(out: Path) -> dict[str, Path]:
    return {
        QWEN2_AUDIO_DIR: build_qwen2_audio(out / QWEN2_AUDIO_DIR),
        WHISPER_DIR: build_whisper(out / WHISPER_DIR),
        VOXTRAL_DIR: build_voxtral(out / VOXTRAL_DIR),
        AUDIO_FLAMINGO3_DIR: build_audio_flamingo3(out / AUDIO_FLAMINGO3_DIR),
        GLM_ASR_DIR: build_glm_asr(out / GLM_ASR_DIR),
    }


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        sys.exit("usage: python engine/models.py OUT_DIR")
    for name, path in build_all(Path(argv[0])).items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
