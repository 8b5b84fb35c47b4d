"""A small random-weight BERT masked-LM with a WordPiece vocabulary written by code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

# Common English words, so that ordinary sentences tokenize into whole words rather than pieces.
WORDS = """
the of and to a in is it you that he was for on are with as i his they be at one have this from
or had by hot word but what some we can out other were all there when up use your how said an each
she which do their time if will way about many then them write would like so these her long make
thing see him two has look more day could go come did number sound no most people my over know
water than call first who may down side been now find any new work part take get place made live
where after back little only round man year came show every good me give our under name very
through just form sentence great think say help low line differ turn cause much mean before move
right boy old too same tell does set three want air well also play small end put home read hand
port large spell add even land here must big high such follow act why ask men change went light
kind off need house picture try us again animal point mother world near build self earth father
head stand own page should country found answer school grow study still learn plant cover food sun
four between state keep eye never last let thought city tree cross farm hard start might story saw
far sea draw left late run while press close night real life few north open seem together next
white children begin got walk example ease paper group always music those both mark often letter
until mile river car feet care second book carry took science eat room friend began idea fish
mountain stop once base hear horse cut sure watch color face wood main enough plain girl usual
young ready above ever red list though feel talk bird soon body dog family direct pose leave song
measure door product black short numeral class wind question happen complete ship area half rock
order fire south problem piece told knew pass since top whole king space heard best hour better
true during hundred five remember step early hold west ground interest reach fast verb sing listen
six table travel less morning ten simple several vowel toward war lay against pattern slow center
love person money serve appear road map rain rule govern pull cold notice voice unit power town
fine certain fly fall lead cry dark machine note wait plan figure star box noun field rest correct
able pound done beauty drive stood contain front teach week final gave green oh quick develop
ocean warm free minute strong special mind behind clear tail produce fact street inch multiply
nothing course stay wheel full force blue object decide surface deep moon island foot system busy
test record boat common gold possible plane stead dry wonder laugh thousand ago ran check game
shape equate miss brought heat snow tire bring yes distant fill east paint language among model
text task queue worker batch image token guitar instrument stock market today sharply fell plays
playing someone cat sat mat paris capital france happy sad weather sky hello hi thanks please
""".split()

# Word pieces: any lowercase word or number still tokenizes (into pieces) instead of becoming [UNK].
CHARACTERS = list("abcdefghijklmnopqrstuvwxyz0123456789") + list(".,;:!?'\"()[]{}-_/\\@#$%&*+=<>~`^|")
SUFFIXES = ("s", "es", "ed", "ing", "ly", "er", "est", "ion", "al", "ment", "ness", "ful", "able")


def vocabulary() -> list[str]:
    """The vocabulary in id order: special tokens, characters, word pieces, then whole words."""
    tokens: list[str] = list(SPECIAL_TOKENS)
    tokens += CHARACTERS
    tokens += ["##" + c for c in CHARACTERS if c.isalnum()]
    tokens += ["##" + s for s in SUFFIXES]
    tokens += WORDS
    return list(dict.fromkeys(tokens))  # drop duplicates, keep the first position


def build(path: Path) -> None:
    """Write a deterministic random-weight BertForMaskedLM and its tokenizer into ``path``."""
    from transformers import BertForMaskedLM

    write(path, BertForMaskedLM)


def build_cross_encoder(path: Path) -> None:
    """Write a deterministic random-weight BERT cross-encoder (a sequence classifier with one label, as rerankers
    are) and its tokenizer into ``path`` (issue 42); its scores are random, its loading and batching real."""
    from transformers import BertForSequenceClassification

    write(path, BertForSequenceClassification, num_labels=1, max_position_embeddings=128)


def write(path: Path, model_class: Any, max_position_embeddings: int = 512, **config: Any) -> None:
    """A random-weight BERT of ``model_class`` (seeded: the same weights on every build) and its tokenizer."""
    import torch
    from transformers import BertConfig, BertTokenizer

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokens = vocabulary()
    vocab_file = path / "vocab.txt"
    vocab_file.write_text("\n".join(tokens) + "\n")
    # transformers 5: BertTokenizer is the tokenizers-backed ("fast") class and BertTokenizerFast an alias of it.
    # Pass the file as ``vocab``: a ``vocab_file=`` keyword is silently ignored and leaves 5 tokens.
    tokenizer = BertTokenizer(vocab=str(vocab_file), do_lower_case=True)
    if len(tokenizer) != len(tokens):
        raise RuntimeError(f"tokenizer read {len(tokenizer)} of {len(tokens)} tokens from {vocab_file}")
    tokenizer.model_max_length = max_position_embeddings

    torch.manual_seed(0)  # the same weights on every build: tests may compare outputs across builds
    bert = BertConfig(
        vocab_size=len(tokens),
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=256,
        max_position_embeddings=max_position_embeddings,
        pad_token_id=0,
        **config,
    )
    model = model_class(bert).eval()
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
