"""A random-weight Whisper (~0.5M parameters) with a byte-level BPE tokenizer trained by code and Whisper's special
tokens, a feature extractor and a generation config that ``WhisperForConditionalGeneration.generate`` takes
(issue 41). The layout of its tokens is Whisper's own: ``<|endoftext|>``, ``<|startoftranscript|>``, the language
tokens, ``<|translate|>``, ``<|transcribe|>``, ``<|startoflm|>``, ``<|startofprev|>``, ``<|nospeech|>``,
``<|notimestamps|>``, then the 1501 timestamp tokens ``<|0.00|>`` to ``<|30.00|>``. The weights are random: what it
hears is noise, only the shapes, the windows and the timestamps' structure are meaningful.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from worker.demo_models.gpt2 import _training_text

EOS = "<|endoftext|>"
LANGUAGES = ("en", "fr", "de", "es", "it", "nl", "pt", "ja", "zh")
SPECIALS = (
    "<|startoftranscript|>",
    *(f"<|{code}|>" for code in LANGUAGES),
    "<|translate|>",
    "<|transcribe|>",
    "<|startoflm|>",
    "<|startofprev|>",
    "<|nospeech|>",
    "<|notimestamps|>",
)
TIMESTAMPS = tuple(f"<|{i * 0.02:.2f}|>" for i in range(1501))
VOCAB_SIZE = 2048  # the text vocabulary's bound (the small corpus yields fewer merges)
MAX_TARGET_POSITIONS = 128  # a window's prompt and transcript together: half each (Whisper's is 448)


def _tokenizer(path: Path) -> Any:
    from tokenizers import ByteLevelBPETokenizer
    from transformers import AddedToken, WhisperTokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(_training_text(), vocab_size=VOCAB_SIZE, min_frequency=1, show_progress=False)
    bpe.save_model(str(path))
    vocab = json.loads((path / "vocab.json").read_text())
    # <|endoftext|> follows the text vocabulary, as in Whisper's: its tokenizer takes every id from it on as special.
    vocab[EOS] = len(vocab)
    lines = (path / "merges.txt").read_text().splitlines()
    merges = [tuple(line.split(" ")) for line in lines if line and not line.startswith("#")]
    tokenizer = WhisperTokenizer(vocab=vocab, merges=merges, eos_token=EOS, bos_token=EOS, unk_token=EOS, pad_token=EOS)
    tokenizer.add_special_tokens(
        {"additional_special_tokens": [AddedToken(t, special=True, normalized=False) for t in SPECIALS]}
    )
    # Timestamps are added tokens that are not special (Whisper's tokenizer decodes them as offsets).
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in TIMESTAMPS])
    tokenizer.model_max_length = MAX_TARGET_POSITIONS
    return tokenizer


def _generation_config(tokenizer: Any, config: Any) -> Any:
    from transformers import GenerationConfig

    ids = tokenizer.convert_tokens_to_ids
    eos = ids(EOS)
    return GenerationConfig(
        decoder_start_token_id=ids("<|startoftranscript|>"),
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=eos,
        max_length=MAX_TARGET_POSITIONS,
        is_multilingual=True,
        lang_to_id={f"<|{code}|>": ids(f"<|{code}|>") for code in LANGUAGES},
        task_to_id={"transcribe": ids("<|transcribe|>"), "translate": ids("<|translate|>")},
        no_timestamps_token_id=ids("<|notimestamps|>"),
        prev_sot_token_id=ids("<|startofprev|>"),
        max_initial_timestamp_index=50,
        begin_suppress_tokens=[eos],
        suppress_tokens=[],
        return_timestamps=False,
        # Every head of the last decoder layer: word timestamps by cross-attention (real Whisper names its own).
        alignment_heads=[[config.decoder_layers - 1, h] for h in range(config.decoder_attention_heads)],
    )


def build(path: Path) -> None:
    """Write a deterministic random-weight WhisperForConditionalGeneration, its processor and generation config."""
    import torch
    from transformers import WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer(path)
    ids = tokenizer.convert_tokens_to_ids
    torch.manual_seed(0)  # the same weights on every build
    config = WhisperConfig(
        vocab_size=len(tokenizer),
        num_mel_bins=80,
        d_model=64,
        encoder_layers=2,
        encoder_attention_heads=2,
        decoder_layers=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        max_source_positions=1500,  # 30 s of 10 ms frames, halved by the encoder's stride
        max_target_positions=MAX_TARGET_POSITIONS,
        decoder_start_token_id=ids("<|startoftranscript|>"),
        pad_token_id=ids(EOS),
        bos_token_id=ids(EOS),
        eos_token_id=ids(EOS),
        begin_suppress_tokens=None,
        suppress_tokens=None,
    )
    model = WhisperForConditionalGeneration(config).eval()
    model.generation_config = _generation_config(tokenizer, config)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    WhisperFeatureExtractor(feature_size=80, sampling_rate=16000, chunk_length=30).save_pretrained(path)
