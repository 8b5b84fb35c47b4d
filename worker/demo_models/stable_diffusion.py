"""A small random-weight Stable Diffusion 1.x pipeline with a CLIP tokenizer written by code."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

BOS, EOS = "<|startoftext|>", "<|endoftext|>"
END_OF_WORD = "</w>"
MAX_LENGTH = 77  # CLIP's context length: SD pads every prompt to it
TEXT_HIDDEN = 32  # the UNet's cross_attention_dim must equal it
MERGES_CAP = 2000  # far more than the word list needs: training stops when every word is one token

# Common English words and prompt vocabulary, so that ordinary prompts become whole-word tokens.
WORDS = """
a an the of and to in on at by for with from as is are was be it this that these those there here
photo photograph picture painting drawing sketch portrait landscape illustration render art artwork
style realistic detailed high quality best beautiful ugly blurry dark light bright soft sharp
red orange yellow green blue purple pink brown black white gray grey gold silver colorful
cat dog bird horse fish cow sheep lion tiger bear fox wolf rabbit mouse dragon robot person
man woman boy girl child people king queen knight wizard astronaut city town village house castle
tower bridge road street car boat ship train plane tree forest flower garden grass field mountain
hill river lake sea ocean beach island sky cloud clouds sun moon star stars night day morning
evening sunset sunrise rain snow storm fire water ice stone rock sand desert space planet earth
table chair book cup window door wall room kitchen city lights neon cyberpunk fantasy sci fi
oil watercolor pencil digital cinematic lighting studio close up wide angle view from above
small big large tiny huge old new young ancient modern futuristic happy sad cute scary calm
sitting standing running flying swimming walking playing reading eating sleeping holding wearing
hat coat dress shirt glasses crown sword shield guitar piano camera lamp clock map
one two three four five many some all no not very more most much little few
in front behind under over near far inside outside between top bottom left right center
trending artstation unreal engine octane 4k 8k hd masterpiece by greg rutkowski van gogh monet
""".split()


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2/CLIP's reversible byte -> printable character table (no whitespace or control chars)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return dict(sorted(table.items()))


def train_merges(words: list[str], cap: int = MERGES_CAP) -> list[tuple[str, str]]:
    """Byte-level BPE merges learned from ``words``, most frequent pair first (ties alphabetical)."""
    byte_chars = bytes_to_unicode()
    pieces: Counter[tuple[str, ...]] = Counter()
    for word in words:
        chars = [byte_chars[b] for b in word.encode("utf-8")]
        pieces[(*chars[:-1], chars[-1] + END_OF_WORD)] += 1
    merges: list[tuple[str, str]] = []
    while len(merges) < cap:
        pairs: Counter[tuple[str, str]] = Counter()
        for symbols, count in pieces.items():
            for pair in zip(symbols, symbols[1:], strict=False):
                pairs[pair] += count
        if not pairs:
            break  # every word is a single token
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        merged: Counter[tuple[str, ...]] = Counter()
        for symbols, count in pieces.items():
            out, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                    out.append(symbols[i] + symbols[i + 1])
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            merged[tuple(out)] += count
        pieces = merged
    return merges


def write_clip_tokenizer(folder: Path, words: list[str] = WORDS) -> None:
    """Write CLIP's tokenizer files (vocab.json, merges.txt, tokenizer_config.json) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    merges = train_merges(list(dict.fromkeys(words)))
    # CLIP's id order: the 256 byte characters, the same with </w>, the merges, then the two specials.
    chars = list(bytes_to_unicode().values())
    tokens = chars + [c + END_OF_WORD for c in chars] + ["".join(m) for m in merges] + [BOS, EOS]
    vocab = {tok: i for i, tok in enumerate(dict.fromkeys(tokens))}
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    lines = ["#version: 0.2"] + [f"{a} {b}" for a, b in merges]
    (folder / "merges.txt").write_text("\n".join(lines) + "\n")
    config = {
        "tokenizer_class": "CLIPTokenizer",
        "model_max_length": MAX_LENGTH,
        "bos_token": BOS,
        "eos_token": EOS,
        "unk_token": EOS,
        "pad_token": EOS,  # SD 1.x pads with the end token
        "do_lower_case": True,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))


def build(path: Path) -> None:
    """Write a deterministic random-weight StableDiffusionPipeline (SD 1.x layout) into ``path``."""
    import torch
    from diffusers import AutoencoderKL, PNDMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    write_clip_tokenizer(path / "tokenizer")
    tokenizer = CLIPTokenizer.from_pretrained(path / "tokenizer")

    torch.manual_seed(0)  # the same weights on every build: tests compare pixels across builds
    text_encoder = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=len(tokenizer),
            hidden_size=TEXT_HIDDEN,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            max_position_embeddings=MAX_LENGTH,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    )
    unet = UNet2DConditionModel(
        sample_size=8,  # latents of a 64x64 image
        in_channels=4,
        out_channels=4,
        block_out_channels=(32, 64),
        layers_per_block=1,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=TEXT_HIDDEN,
        attention_head_dim=4,
        norm_num_groups=32,
    )
    # Four blocks, as in SD: the VAE downsamples by 8, so 64x64 images denoise as 8x8 latents.
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        block_out_channels=(16, 16, 32, 32),
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        latent_channels=4,
        layers_per_block=1,
        norm_num_groups=16,
        sample_size=64,
    )
    scheduler = PNDMScheduler(  # SD 1.x's own scheduler settings
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        num_train_timesteps=1000,
        skip_prk_steps=True,
        set_alpha_to_one=False,
        steps_offset=1,
    )
    pipe = StableDiffusionPipeline(
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        unet=unet,
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.save_pretrained(path, safe_serialization=True)  # type: ignore[attr-defined]  # from a mixin mypy misses
    # save_pretrained writes tokenizer.json; put back the files SD ships so both layouts are present.
    write_clip_tokenizer(path / "tokenizer")
