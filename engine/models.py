"""Build the tiny model directories the real engine serves: a Qwen2-Audio chat model and a
Whisper speech-to-text model, with random weights (seeded), a locally trained tokenizer and the
processor configs vLLM reads. No network, a few seconds.

Runs in the engine's venv (torch, transformers, tokenizers): `python engine/models.py OUT_DIR`
writes `OUT_DIR/tiny-qwen2-audio` and `OUT_DIR/tiny-whisper`. The builders are in
`engine/tiny/`, one module per model.

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

from engine.tiny.qwen2_audio import build_qwen2_audio
from engine.tiny.whisper import build_whisper

QWEN2_AUDIO_DIR = "tiny-qwen2-audio"
WHISPER_DIR = "tiny-whisper"


def build_all(out: Path) -> dict[str, Path]:
    return {
        QWEN2_AUDIO_DIR: build_qwen2_audio(out / QWEN2_AUDIO_DIR),
        WHISPER_DIR: build_whisper(out / WHISPER_DIR),
    }


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        sys.exit("usage: python engine/models.py OUT_DIR")
    for name, path in build_all(Path(argv[0])).items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
