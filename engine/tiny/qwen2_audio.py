"""The tiny Qwen2-Audio: a Whisper-style encoder and a Qwen2 text model, a BPE with Qwen's audio
tokens and Qwen2-Audio-7B-Instruct's chat template."""

from __future__ import annotations

from pathlib import Path

from engine.tiny.common import (
    chat_tokenizer,
    feature_extractor,
    name_tokenizer_class,
    save_random_model,
    write_generation_config,
)

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


def build_qwen2_audio(out: Path) -> Path:
    """The tiny Qwen2AudioForConditionalGeneration directory at `out`."""
    from transformers import (
        Qwen2AudioConfig,
        Qwen2AudioForConditionalGeneration,
        Qwen2AudioProcessor,
    )

    tokenizer, ids = chat_tokenizer(
        QWEN_BPE_SIZE, list(QWEN_SPECIAL_TOKENS), eos_token="<|im_end|>"
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
