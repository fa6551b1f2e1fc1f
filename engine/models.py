"""Build the tiny model directories the real engine serves: a Qwen2-Audio chat model and a
Whisper speech-to-text model, with random weights (seeded), a locally trained tokenizer and the
processor configs vLLM reads. No network, a few seconds.

Runs in the engine's venv (torch, transformers, tokenizers): `python engine/models.py OUT_DIR`
writes `OUT_DIR/tiny-qwen2-audio` and `OUT_DIR/tiny-whisper`.

The weights are random on purpose: the tests check plumbing, token counts and caching, never
what the model says. What has to be real is what vLLM's front end does with audio: the
16 kHz Whisper feature extractor (30 s windows, hop 160), and for Qwen2-Audio the audio
encoder's `max_source_positions` of 1500 (features are always padded to 3000 frames and the
encoder halves them), so a clip of S seconds becomes 25*S `<|AUDIO|>` placeholders, at most 750.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

SEED = 0
SAMPLE_RATE_HZ = 16_000
QWEN2_AUDIO_DIR = "tiny-qwen2-audio"
WHISPER_DIR = "tiny-whisper"

# Qwen2-Audio's special tokens, in id order after the BPE vocabulary.
QWEN_SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|AUDIO|>",
    "<|audio_bos|>",
    "<|audio_eos|>",
)
QWEN_BPE_SIZE = 412  # so <|AUDIO|> is token 415
WHISPER_BPE_SIZE = 379

# Qwen2-Audio-7B-Instruct's template, with audio parts also recognised by `type` (vLLM renders
# OpenAI-format parts as {"type": "audio"}).
QWEN_CHAT_TEMPLATE = (
    "{% set audio_count = namespace(value=0) %}"
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if 'audio' in content or 'audio_url' in content"
    " or content.get('type') in ('audio', 'audio_url', 'input_audio') %}"
    "{% set audio_count.value = audio_count.value + 1 %}"
    "Audio {{ audio_count.value }}: <|audio_bos|><|AUDIO|><|audio_eos|>\n"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

WORDS = (  # noqa: SIM905
    "the audio of a speaker who reads one short sentence about weather and time while music "
    "plays in another room and someone asks what was said then answers with a number a name "
    "a place or a question transcribe translate describe listen sound voice noise tone clip "
    "second minute hour morning evening city river mountain window table paper green blue"
).split()


def corpus(lines: int = 2000) -> list[str]:
    """Seeded English-like sentences to train the byte-level BPE on."""
    rng = random.Random(SEED)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14))) for _ in range(lines)]


def train_bpe(vocab_size: int, special_tokens: list[str]) -> Any:
    """A byte-level BPE of exactly `vocab_size` entries, then the special tokens after it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    size = tokenizer.get_vocab_size()
    if size != vocab_size:
        raise RuntimeError(f"the BPE has {size} entries, not {vocab_size}: a larger corpus")
    tokenizer.add_special_tokens(special_tokens)
    return tokenizer


def feature_extractor(mel_bins: int, attention_mask: bool) -> Any:
    from transformers import WhisperFeatureExtractor

    return WhisperFeatureExtractor(
        feature_size=mel_bins,
        sampling_rate=SAMPLE_RATE_HZ,
        chunk_length=30,
        hop_length=160,
        n_fft=400,
        padding_value=0.0,
        return_attention_mask=attention_mask,
    )


def save_random_model(model_class: Any, config: Any, out: Path) -> None:
    import torch

    torch.manual_seed(SEED)
    model_class(config).save_pretrained(out)


def build_qwen2_audio(out: Path) -> Path:
    """The tiny Qwen2AudioForConditionalGeneration directory at `out`."""
    from transformers import (
        PreTrainedTokenizerFast,
        Qwen2AudioConfig,
        Qwen2AudioForConditionalGeneration,
        Qwen2AudioProcessor,
    )

    bpe = train_bpe(QWEN_BPE_SIZE, list(QWEN_SPECIAL_TOKENS))
    ids = {token: bpe.token_to_id(token) for token in QWEN_SPECIAL_TOKENS}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=32768,
        clean_up_tokenization_spaces=False,
    )
    processor = Qwen2AudioProcessor(
        feature_extractor=feature_extractor(128, attention_mask=True),
        tokenizer=tokenizer,
        chat_template=QWEN_CHAT_TEMPLATE,
    )
    processor.save_pretrained(out)
    processor.feature_extractor.save_pretrained(out)  # the legacy preprocessor_config.json
    name_tokenizer_class(out, "Qwen2Tokenizer")
    audio = {
        "model_type": "qwen2_audio_encoder",
        "encoder_layers": 2,
        "d_model": 64,
        "encoder_attention_heads": 2,
        "encoder_ffn_dim": 128,
        "num_mel_bins": 128,
        "max_source_positions": 1500,  # features are padded to 3000 frames, halved to 1500
        "activation_function": "gelu",
        "scale_embedding": False,
    }
    text = {
        "model_type": "qwen2",
        "num_hidden_layers": 2,
        "hidden_size": 128,
        "num_attention_heads": 2,  # head_dim 64: one the CPU attention backend takes
        "num_key_value_heads": 2,
        "intermediate_size": 256,
        "vocab_size": 512,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
    }
    config = Qwen2AudioConfig(
        audio_config=audio, text_config=text, audio_token_index=ids["<|AUDIO|>"]
    )
    config.dtype = "float32"
    save_random_model(Qwen2AudioForConditionalGeneration, config, out)
    write_generation_config(
        out,
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
        pad_token_id=ids["<|endoftext|>"],
    )
    return out


def whisper_special_tokens() -> list[str]:
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    languages = [f"<|{code}|>" for code in LANGUAGES]
    tail = ["<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>"]
    ends = ["<|nospeech|>", "<|notimestamps|>"]
    return ["<|endoftext|>", "<|startoftranscript|>", *languages, *tail, *ends]


def build_whisper(out: Path) -> Path:
    """The tiny WhisperForConditionalGeneration directory at `out`."""
    from transformers import (
        PreTrainedTokenizerFast,
        WhisperConfig,
        WhisperForConditionalGeneration,
        WhisperProcessor,
    )

    specials = whisper_special_tokens()
    bpe = train_bpe(WHISPER_BPE_SIZE, specials)
    end, start = bpe.token_to_id("<|endoftext|>"), bpe.token_to_id("<|startoftranscript|>")
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        model_max_length=448,
        clean_up_tokenization_spaces=False,
    )
    processor = WhisperProcessor(
        feature_extractor=feature_extractor(80, attention_mask=False), tokenizer=tokenizer
    )
    processor.save_pretrained(out)
    processor.feature_extractor.save_pretrained(out)
    name_tokenizer_class(out, "WhisperTokenizer")
    vocab_size = -(-bpe.get_vocab_size() // 64) * 64
    config = WhisperConfig(
        vocab_size=vocab_size,
        num_mel_bins=80,
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        max_source_positions=1500,
        max_target_positions=448,
        pad_token_id=end,
        bos_token_id=end,
        eos_token_id=end,
        decoder_start_token_id=start,
        begin_suppress_tokens=None,
        suppress_tokens=None,
    )
    save_random_model(WhisperForConditionalGeneration, config, out)
    write_generation_config(
        out,
        decoder_start_token_id=start,
        bos_token_id=end,
        eos_token_id=end,
        pad_token_id=end,
        max_length=448,
    )
    return out


def name_tokenizer_class(out: Path, name: str) -> None:
    """Name the model's own tokenizer class, as the published checkpoints do (it loads the same
    tokenizer.json; vLLM and transformers pick model-specific behaviour by this name)."""
    path = out / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["tokenizer_class"] = name
    path.write_text(json.dumps(config, indent=2) + "\n")


def write_generation_config(out: Path, **fields: Any) -> None:
    """A plain generation_config.json (save_pretrained's would carry the model defaults)."""
    (out / "generation_config.json").write_text(json.dumps(fields, indent=2) + "\n")


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
