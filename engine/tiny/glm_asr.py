"""The tiny GLM-ASR: transformers' own `GlmAsrConfig` and `GlmAsrProcessor` (a 128-mel Whisper
feature extractor and a BPE with `<|pad|>`, `<|begin_of_audio|>`, `<|end_of_audio|>`), a
rotary encoder (2 layers, hidden 64) and a Llama text model (2 layers, hidden 128, head_dim 64),
random weights.

The processor cuts a clip into 30 s windows, up to 655 s (`max_audio_len`); the encoder halves
the mel frames and the projector merges 4 of them (`intermediate_size` = 4 x `hidden_size`):
12.5 `<|pad|>` tokens a second of audio (a 2 s clip is 25, 45 s is 562).
"""

from __future__ import annotations

from pathlib import Path

from engine.tiny.common import (
    chat_tokenizer,
    feature_extractor,
    name_tokenizer_class,
    save_random_model,
    write_generation_config,
)

SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|pad|>",
    "<|begin_of_audio|>",
    "<|end_of_audio|>",
)
BPE_SIZE = 409
AUDIO_TOKEN = "<|pad|>"
ENCODER_HIDDEN = 64
MERGE_FACTOR = 4  # vLLM merges intermediate_size // hidden_size encoder frames into one token

# GLM's turns, with each audio part where it stands as the three tokens vLLM's GLM-ASR expects.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if content.get('type') in ('audio', 'audio_url', 'input_audio') %}"
    "<|begin_of_audio|><|pad|><|end_of_audio|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
    "{% endfor %}{% endif %}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def build_glm_asr(out: Path) -> Path:
    """The tiny GlmAsrForConditionalGeneration directory at `out`."""
    from transformers import (
        GlmAsrConfig,
        GlmAsrForConditionalGeneration,
        GlmAsrProcessor,
    )

    tokenizer, ids = chat_tokenizer(BPE_SIZE, list(SPECIAL_TOKENS), eos_token="<|endoftext|>")
    processor = GlmAsrProcessor(
        feature_extractor=feature_extractor(128, attention_mask=True),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
        audio_token=AUDIO_TOKEN,
    )
    processor.save_pretrained(out)
    processor.feature_extractor.save_pretrained(out)
    name_tokenizer_class(out, "PreTrainedTokenizerFast")
    audio = {
        "hidden_size": ENCODER_HIDDEN,
        "intermediate_size": MERGE_FACTOR * ENCODER_HIDDEN,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "max_position_embeddings": 1500,
        "num_mel_bins": 128,
    }
    ends = [ids["<|endoftext|>"], ids["<|user|>"]]
    text = {
        "model_type": "llama",
        "vocab_size": 512,
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,  # head_dim 64: one the CPU attention backend takes
        "num_key_value_heads": 2,
        "max_position_embeddings": 8192,
        "eos_token_id": ends,
        "pad_token_id": ids["<|endoftext|>"],
    }
    config = GlmAsrConfig(
        audio_config=audio,
        text_config=text,
        audio_token_id=ids[AUDIO_TOKEN],
        tie_word_embeddings=False,
    )
    config.dtype = "float32"
    save_random_model(GlmAsrForConditionalGeneration, config, out)
    write_generation_config(out, eos_token_id=ends, pad_token_id=ids["<|endoftext|>"])
    return out
