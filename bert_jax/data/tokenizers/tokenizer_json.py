"""What a `tokenizers.Tokenizer` says about itself, read from its tokenizer.json state.

A tokenizer.json holds no field for the facts the pipelines need, so they are read from its
parts: the special tokens by role (ROLES: pad, unk, cls, sep, mask; `find_special_tokens`: from
the post-processor, the model and the padding, else by the names of SPELLINGS), what separates
the two texts of a pair (`pair_separator`), which pieces continue a word (`continuation_pieces`:
the model's "##" prefix, or the pre-tokenizer's word-start mark "Ġ" / "▁"), and the tokenizer
for text already split into words (`words_tokenizer`). `tokenizer_state` and `components` give
the raw state and its (nested) pre-tokenizers or post-processors, for the other readers of a
tokenizer.json (`bert_jax.data.tokenizers.hf_folder`).

Pure functions of the tokenizer: nothing is read from or written to disk.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

import numpy as np
import tokenizers
from tokenizers import pre_tokenizers

from bert_jax.data.tokenizers.wordpiece import CLS, MASK, PAD, SEP, UNK

# The special tokens the pipelines ask for, by role: padding, an unknown piece, the token that
# starts a sequence (BERT's [CLS], RoBERTa's <s>), the one that ends each segment ([SEP], </s>)
# and the masked-LM mask.
ROLES = ("pad", "unk", "cls", "sep", "mask")
# How a tokenizer.json may name each role where its post-processor and model do not say:
# fairseq's names (RoBERTa, XLM-R) first, then BERT's.
SPELLINGS = {"pad": ("<pad>", PAD), "unk": ("<unk>", UNK), "cls": ("<s>", CLS),
             "sep": ("</s>", SEP), "mask": ("<mask>", MASK)}


def tokenizer_state(tokenizer: tokenizers.Tokenizer) -> dict[str, Any]:
    """The tokenizer.json contents of `tokenizer`, as a dict."""
    return json.loads(tokenizer.to_str())


def components(component: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A pre-tokenizer or post-processor and, for a Sequence, the ones inside it."""
    if not component:
        return []
    inner = component.get("pretokenizers") or component.get("processors") or []
    return [component, *(part for item in inner for part in components(item))]


def _template_specials(template: list[dict[str, Any]]) -> tuple[str | None, str | None]:
    """The special tokens just before and just after $A in a TemplateProcessing template."""
    kinds = ["A" if "Sequence" in item else item.get("SpecialToken", {}).get("id")
             for item in template]
    if "A" not in kinds:
        return None, None
    a = kinds.index("A")
    return (kinds[a - 1] if a > 0 else None), (kinds[a + 1] if a + 1 < len(kinds) else None)


def words_tokenizer(tokenizer: tokenizers.Tokenizer) -> tokenizers.Tokenizer:
    """The tokenizer for input split into words (is_pretokenized=True, e.g. tagged sentences).

    A byte-level BPE that prepends no space (RoBERTa's add_prefix_space=False) would encode each
    word as the start of a text, without the "Ġ" that a word has after a space; here it gets one,
    as transformers' RobertaTokenizerFast(add_prefix_space=True) requires for such input. Any
    other tokenizer is `tokenizer` itself.
    """
    state = tokenizer_state(tokenizer)
    pre_tokenizer = state.get("pre_tokenizer") or {}
    if pre_tokenizer.get("type") != "ByteLevel" or pre_tokenizer.get("add_prefix_space"):
        return tokenizer
    words = tokenizers.Tokenizer.from_str(tokenizer.to_str())
    words.pre_tokenizer = pre_tokenizers.ByteLevel(
        add_prefix_space=True, trim_offsets=pre_tokenizer.get("trim_offsets", True),
        use_regex=pre_tokenizer.get("use_regex", True))
    return words


def pair_separator(tokenizer: tokenizers.Tokenizer, sep: str) -> tuple[str, ...]:
    """The special tokens between A and B in the tokenizer's pair template: (sep, sep) for
    RobertaProcessing, those between $A and $B of a TemplateProcessing, else (sep,) (BERT)."""
    for processor in components(tokenizer_state(tokenizer).get("post_processor")):
        if processor.get("type") == "RobertaProcessing":
            return (processor["sep"][0],) * 2
        if processor.get("type") == "TemplateProcessing":
            kinds = [item["Sequence"]["id"] if "Sequence" in item
                     else item.get("SpecialToken", {}).get("id") for item in processor["pair"]]
            if "A" in kinds and "B" in kinds and kinds.index("A") < kinds.index("B"):
                return tuple(k for k in kinds[kinds.index("A") + 1:kinds.index("B")] if k)
    return (sep,)


def find_special_tokens(tokenizer: tokenizers.Tokenizer, source: str = "<memory>"
                        ) -> dict[str, str]:
    """role -> token for ROLES, as the tokenizer itself says where it does: cls / sep from its
    post-processor (RobertaProcessing, BertProcessing, or the tokens around $A in a
    TemplateProcessing), unk from its model (BPE / WordPiece unk_token, Unigram unk_id), pad
    from its padding; the rest by the names of SPELLINGS, special tokens first.

    ValueError naming `source` and the role when one cannot be found.
    """
    state = tokenizer_state(tokenizer)
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    found: dict[str, str | None] = {}
    for processor in components(state.get("post_processor")):
        if processor.get("type") in ("RobertaProcessing", "BertProcessing"):
            found.setdefault("cls", processor["cls"][0])
            found.setdefault("sep", processor["sep"][0])
        elif processor.get("type") == "TemplateProcessing":
            cls, sep = _template_specials(processor.get("single") or [])
            found.setdefault("cls", cls)
            found.setdefault("sep", sep)
    model = state.get("model") or {}
    if model.get("type") == "Unigram" and model.get("unk_id") is not None:
        found["unk"] = model["vocab"][model["unk_id"]][0]
    elif model.get("unk_token"):
        found["unk"] = model["unk_token"]
    if state.get("padding"):
        found["pad"] = state["padding"].get("pad_token")
    added = [token.content for token in tokenizer.get_added_tokens_decoder().values()
             if token.special]
    specials = {}
    for role in ROLES:
        token = found.get(role)
        if token is None:
            token = next((name for name in SPELLINGS[role] if name in added), None)
        if token is None:
            token = next((name for name in SPELLINGS[role] if name in vocab), None)
        if token is None or token not in vocab:
            said = f"{token!r} is not in its vocabulary" if token else (
                f"none of {list(SPELLINGS[role])} is in its vocabulary")
            raise ValueError(f"tokenizer {source} has no {role} token: {said}")
        specials[role] = token
    return specials


def continuation_pieces(tokenizer: tokenizers.Tokenizer, vocab: dict[str, int] | None = None,
                        exclude: Iterable[str] = ()) -> np.ndarray:
    """[vocab] bool: the pieces that continue a word (whole-word masking keeps a word's pieces
    together; packing splits rows between words).

    WordPiece (and a BPE with a continuing_subword_prefix): the pieces with that prefix ("##").
    Otherwise by the pre-tokenizer's word-start mark: byte-level BPE (RoBERTa) writes a space
    before a word as "Ġ", Metaspace (XLM-R's SentencePiece) as "▁", so a piece without the mark
    continues a word (a punctuation mark after a word, too, and a text's first word where no
    space is prepended). Neither: every piece starts a word. `exclude` (special tokens) never
    continues.
    """
    vocab = vocab if vocab is not None else tokenizer.get_vocab(with_added_tokens=True)
    state = tokenizer_state(tokenizer)
    model = state.get("model") or {}
    prefix = model.get("continuing_subword_prefix") or ""
    mark = None
    for part in components(state.get("pre_tokenizer")):
        if part.get("type") == "ByteLevel":
            mark = "\u0120"  # "Ġ": the byte-level alphabet's space
        elif part.get("type") == "Metaspace":
            mark = part.get("replacement") or "\u2581"
    out = np.zeros(max(vocab.values()) + 1, bool)
    excluded = set(exclude)
    for token, index in vocab.items():
        if token in excluded:
            continue
        if prefix:
            out[index] = token.startswith(prefix)
        elif mark:
            out[index] = not token.startswith(mark)
    return out
