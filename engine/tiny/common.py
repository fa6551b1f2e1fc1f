"""What every tiny model builder shares: the seed, a byte-level BPE trained on generated
English words, the 16 kHz Whisper feature extractor, random weights saved by transformers and
the small JSON files the published checkpoints carry."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

SEED = 0
SAMPLE_RATE_HZ = 16_000

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


def chat_tokenizer(
    vocab_size: int, special_tokens: list[str], eos_token: str
) -> tuple[Any, dict[str, int]]:
    """A chat model's fast tokenizer over `train_bpe`'s BPE (`<|endoftext|>` pads), and the
    special tokens' ids."""
    from transformers import PreTrainedTokenizerFast

    bpe = train_bpe(vocab_size, special_tokens)
    ids = {token: bpe.token_to_id(token) for token in special_tokens}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token=eos_token,
        pad_token="<|endoftext|>",
        model_max_length=32768,
        clean_up_tokenization_spaces=False,
    )
    return tokenizer, ids


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
