"""The tiny Audio Flamingo 3: transformers' own `AudioFlamingo3Config` and
`AudioFlamingo3Processor` (a 128-mel Whisper feature extractor and a BPE with `<sound>`), a
Whisper-style encoder (2 layers, d_model 64) and a Qwen2 text model (2 layers, hidden 128,
head_dim 64), random weights.

The processor cuts a clip into 30 s windows, up to 600 s (`max_audio_len`), and each window's
mel frames are halved by the encoder's convolution and again by its pooling: 25 `<sound>`
tokens a second of audio (a 2 s clip is 50, 45 s is 1125).
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

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<sound>")
BPE_SIZE = 412
AUDIO_TOKEN = "<sound>"

# ChatML with each audio part as `<sound>` where it stands (vLLM renders OpenAI-format parts as
# {"type": "audio"}); the processor expands each `<sound>` to the clip's tokens.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if content.get('type') in ('audio', 'audio_url', 'input_audio') %}<sound>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_audio_flamingo3(out: Path) -> Path:
    """The tiny AudioFlamingo3ForConditionalGeneration directory at `out`."""
    from transformers import (
        AudioFlamingo3Config,
        AudioFlamingo3ForConditionalGeneration,
        AudioFlamingo3Processor,
    )

    tokenizer, ids = chat_tokenizer(BPE_SIZE, list(SPECIAL_TOKENS), eos_token="<|im_end|>")
    processor = AudioFlamingo3Processor(
        feature_extractor=feature_extractor(128, attention_mask=True),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
        audio_token=AUDIO_TOKEN,
    )
    processor.save_pretrained(out)
    processor.feature_extractor.save_pretrained(out)
    name_tokenizer_class(out, "Qwen2Tokenizer")
    audio = {
        "num_mel_bins": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 128,
        "hidden_size": 64,
        "max_source_positions": 1500,  # one 30 s window: 3000 mel frames, halved
    }
    text = {
        "model_type": "qwen2",
        "num_hidden_layers": 2,
        "hidden_size": 128,
        "num_attention_heads": 2,  # head_dim 64: one the CPU attention backend takes
        "num_key_value_heads": 2,
        "intermediate_size": 256,
        "vocab_size": 512,
        "max_position_embeddings": 8192,
        "tie_word_embeddings": False,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
    }
    config = AudioFlamingo3Config(
        audio_config=audio, text_config=text, audio_token_id=ids[AUDIO_TOKEN]
    )
    config.dtype = "float32"
    save_random_model(AudioFlamingo3ForConditionalGeneration, config, out)
    write_generation_config(
        out,
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
        pad_token_id=ids["<|endoftext|>"],
    )
    return out
