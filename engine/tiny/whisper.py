"""The tiny Whisper: 2 + 2 layers, 80 mel bins, a BPE with Whisper's task and language tokens."""

from __future__ import annotations

from pathlib import Path

from engine.tiny.common import (
    feature_extractor,
    name_tokenizer_class,
    save_random_model,
    train_bpe,
    write_generation_config,
)

WHISPER_BPE_SIZE = 379


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
