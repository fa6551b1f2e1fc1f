"""The tiny Voxtral, in Mistral's own format (vLLM serves it with `--tokenizer-mode mistral
--config-format mistral --load-format dummy`): `tekken.json` and `params.json`, no weights.

`tekken.json` is cut from the tekken vocabulary mistral-common ships (its first
`VOCAB_SIZE` ranks) with the special tokens Voxtral's chat and transcription prompts use, at
the ranks mistral-common gives them, tokenizer version v7 and an `audio` section: 16 kHz,
128 mel bins, hop 160, window 400, 12.5 frames a second, clips padded to 30 s blocks. So a
clip becomes 375 `[AUDIO]` tokens per started 30 s (the Whisper-style encoder's 1500 frames a
window, downsampled 4 times). `params.json` is a 2-layer text model (dim 128, head_dim 64)
over a 2-layer Whisper-style encoder (dim 128), `downsample_factor` 4.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.tiny.common import SAMPLE_RATE_HZ

VOCAB_SIZE = 1000  # regular tekken ranks kept
NUM_SPECIAL_TOKENS = 100  # as mistral-common lays them out: named ones first, then fillers
# The named special tokens, at mistral-common's ranks (its SpecialTokens, v7 order).
SPECIAL_TOKENS = (
    "<unk>",
    "<s>",
    "</s>",
    "[INST]",
    "[/INST]",
    "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]",
    "[TOOL_CALLS]",
    "[IMG]",
    "<pad>",
    "[IMG_BREAK]",
    "[IMG_END]",
    "[PREFIX]",
    "[MIDDLE]",
    "[SUFFIX]",
    "[SYSTEM_PROMPT]",
    "[/SYSTEM_PROMPT]",
    "[TOOL_CONTENT]",
    "[ARGS]",
    "[CALL_ID]",
    "[AUDIO]",
    "[BEGIN_AUDIO]",
    "[TRANSCRIBE]",
)
MEL_BINS = 128
HOP_LENGTH = 160
WINDOW_SIZE = 400
AUDIO = {
    "sampling_rate": SAMPLE_RATE_HZ,
    "frame_rate": 12.5,
    "audio_encoding_config": {
        "num_mel_bins": MEL_BINS,
        "hop_length": HOP_LENGTH,
        "window_size": WINDOW_SIZE,
    },
    "chunk_length_s": 30.0,
}


def shipped_tekken() -> dict[str, Any]:
    """The tekken vocabulary mistral-common ships (no network)."""
    import mistral_common

    path = Path(mistral_common.__file__).parent / "data" / "tekken_240911.json"
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def tekken() -> dict[str, Any]:
    source = shipped_tekken()
    config = {
        **source["config"],
        "num_vocab_tokens": VOCAB_SIZE,
        "default_vocab_size": VOCAB_SIZE + NUM_SPECIAL_TOKENS,
        "default_num_special_tokens": NUM_SPECIAL_TOKENS,
        "version": "v7",
    }
    specials = [
        {"rank": rank, "token_str": token, "is_control": True}
        for rank, token in enumerate(SPECIAL_TOKENS)
    ]
    vocab = source["vocab"][:VOCAB_SIZE]
    return {"config": config, "vocab": vocab, "special_tokens": specials, "audio": AUDIO}


def params() -> dict[str, Any]:
    encoder = {
        "dim": 128,
        "n_layers": 2,
        "head_dim": 64,
        "hidden_dim": 256,
        "n_heads": 2,
        "vocab_size": 51866,
        "max_source_positions": 1500,  # one 30 s window: 3000 mel frames, halved
        "audio_encoding_args": {
            "sampling_rate": SAMPLE_RATE_HZ,
            "num_mel_bins": MEL_BINS,
            "hop_length": HOP_LENGTH,
            "window_size": WINDOW_SIZE,
        },
    }
    return {
        "dim": 128,
        "n_layers": 2,
        "head_dim": 64,  # one the CPU attention backend takes
        "hidden_dim": 256,
        "n_heads": 2,
        "n_kv_heads": 2,
        "rope_theta": 10000.0,
        "norm_eps": 1e-5,
        "vocab_size": VOCAB_SIZE + NUM_SPECIAL_TOKENS,
        "max_position_embeddings": 4096,
        "max_seq_len": 4096,
        "tied_embeddings": False,
        "multimodal": {
            "whisper_model_args": {
                "encoder_args": encoder,
                "downsample_args": {"downsample_factor": 4},
            }
        },
    }


def build_voxtral(out: Path) -> Path:
    """The tiny VoxtralForConditionalGeneration directory at `out`."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "tekken.json").write_text(json.dumps(tekken()) + "\n")
    (out / "params.json").write_text(json.dumps(params(), indent=2) + "\n")
    return out
