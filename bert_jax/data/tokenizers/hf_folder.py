"""A tokenizer written in the layout of a Hugging Face model folder: `save_hf`.

WordPiece: vocab.txt, tokenizer.json (with BERT's [CLS] A [SEP] (B [SEP]) template),
tokenizer_config.json (a BertTokenizer, with the casing options its normalizer has) and
special_tokens_map.json; only a pipeline that BertTokenizer can express is written
(`hf_bert_settings`, else a ValueError naming the tokenizer, before any file is written).
BPE / Unigram (RoBERTa, XLM-R, ModernBERT): tokenizer.json as it is, tokenizer_config.json naming
`PreTrainedTokenizerFast` (`FAST_TOKENIZER_CLASS`) and the special tokens, and
special_tokens_map.json. `transformers.AutoTokenizer.from_pretrained(folder)` then tokenizes as
the tokenizer does, in transformers 4 and 5 alike. The folder may be local or on object storage
(etils.epath).

Why these classes: transformers 5 builds a model's own tokenizer class (RobertaTokenizer,
XLMRobertaTokenizer, BertTokenizer) from the vocabulary and the class's defaults, keeping only
the post-processor of a tokenizer.json: a byte-level BPE with a normaliser, or XLM-R's Unigram
behind NFKC, would lose its normaliser. `PreTrainedTokenizerFast` (5: TokenizersBackend) takes
tokenizer.json as it is in both versions. A BertTokenizer is rebuilt from vocab.txt and its
options, which `hf_bert_settings` has checked express the whole pipeline, so it stays: the name
that every BERT folder carries, and the slow tokenizer of transformers 4.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import tokenizers
from etils import epath

from bert_jax.data.tokenizers.tokenizer_json import components, tokenizer_state
from bert_jax.data.tokenizers.wordpiece import (
    CLS,
    CONTINUATION_PREFIX,
    MASK,
    PAD,
    SEP,
    SPECIAL_TOKENS,
    UNK,
    bert_post_processor,
)

if TYPE_CHECKING:
    from bert_jax.data.tokenizers.subword import SubwordTokenizer

HF_TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json",
                      "special_tokens_map.json")
SPECIAL_TOKENS_MAP = {"unk_token": UNK, "sep_token": SEP, "pad_token": PAD, "cls_token": CLS,
                      "mask_token": MASK}
# The transformers class of every exported tokenizer but WordPiece (module docstring).
FAST_TOKENIZER_CLASS = "PreTrainedTokenizerFast"
# transformers.BertTokenizer (the slow one) fixes this; a WordPiece model must agree.
_HF_MAX_INPUT_CHARS_PER_WORD = 100


def hf_bert_settings(tokenizer: SubwordTokenizer) -> dict[str, Any]:
    """do_lower_case, strip_accents, tokenize_chinese_chars: the BertTokenizer options that
    describe `tokenizer`'s normalizer.

    Raises ValueError (naming tokenizer.source) unless the pipeline is BERT's: BertNormalizer
    (clean_text on), BertPreTokenizer, WordPiece with "##", [UNK] and 100 characters per word at
    most, which is all that transformers' BertTokenizer can express.
    """
    state = json.loads(tokenizer.tokenizer.to_str())
    normalizer, pre_tokenizer, model = (state.get(key) or {} for key in
                                        ("normalizer", "pre_tokenizer", "model"))
    faults = []
    if normalizer.get("type") != "BertNormalizer" or not normalizer.get("clean_text", False):
        faults.append(f"normalizer {normalizer or None} (needs BertNormalizer with clean_text)")
    if pre_tokenizer.get("type") != "BertPreTokenizer":
        faults.append(f"pre-tokenizer {pre_tokenizer or None} (needs BertPreTokenizer)")
    expected_model = {"type": "WordPiece", "unk_token": UNK,
                      "continuing_subword_prefix": CONTINUATION_PREFIX,
                      "max_input_chars_per_word": _HF_MAX_INPUT_CHARS_PER_WORD}
    differing = {k: model.get(k) for k, v in expected_model.items() if model.get(k) != v}
    if differing:
        faults.append(f"WordPiece model with {differing} (needs {expected_model})")
    if faults:
        raise ValueError(f"tokenizer {tokenizer.source} cannot be saved as a Hugging Face "
                         f"BertTokenizer: {'; '.join(faults)}")
    return {"do_lower_case": normalizer["lowercase"], "strip_accents": normalizer["strip_accents"],
            "tokenize_chinese_chars": normalizer["handle_chinese_chars"]}


def _vocab_lines(tokenizer: SubwordTokenizer) -> list[str]:
    """Tokens by id, for vocab.txt; ValueError when the ids are not 0..n-1 or a token is not one
    line."""
    vocab = tokenizer.tokenizer.get_vocab(with_added_tokens=True)
    tokens = sorted(vocab, key=vocab.get)
    if [vocab[t] for t in tokens] != list(range(len(tokens))):
        raise ValueError(f"tokenizer {tokenizer.source}: its ids are not 0..{len(tokens) - 1} "
                         "without gaps, which vocab.txt needs (the line number is the id)")
    bad = [t for t in tokens if not t or "\n" in t or "\r" in t]
    if bad:
        raise ValueError(f"tokenizer {tokenizer.source}: token(s) {bad[:3]} cannot be a line of "
                         "vocab.txt")
    return tokens


def _hf_backend(tokenizer: SubwordTokenizer) -> tokenizers.Tokenizer:
    """A copy for tokenizer.json: BERT's [CLS] A [SEP] (B [SEP]) template (what the encoders of
    bert_jax.data build), the special tokens registered as transformers registers them on load,
    no truncation or padding."""
    backend = tokenizers.Tokenizer.from_str(tokenizer.tokenizer.to_str())
    backend.post_processor = bert_post_processor(backend.get_vocab(with_added_tokens=True))
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    backend.no_truncation()
    backend.no_padding()
    return backend


def save_hf(tokenizer: SubwordTokenizer, directory: str, model_max_length: int) -> list[str]:
    """Write `tokenizer` into `directory` as a Hugging Face tokenizer; returns the paths.

    WordPiece: a BertTokenizer (`_save_hf_bert`). BPE / Unigram: tokenizer.json as it is (with
    its own post-processor: <s> A </s> for RoBERTa), tokenizer_config.json and
    special_tokens_map.json naming the special tokens (`_save_hf_fast`).
    """
    if tokenizer.kind == "WordPiece":
        return _save_hf_bert(tokenizer, directory, model_max_length)
    return _save_hf_fast(tokenizer, directory, model_max_length)


def _save_hf_fast(tokenizer: SubwordTokenizer, directory: str, model_max_length: int
                  ) -> list[str]:
    """tokenizer.json, tokenizer_config.json and special_tokens_map.json of a BPE or Unigram
    tokenizer (`save_hf`)."""
    backend = tokenizers.Tokenizer.from_str(tokenizer.tokenizer.to_str())
    backend.add_special_tokens(list(tokenizer.specials.values()))
    backend.no_truncation()
    backend.no_padding()
    specials = {f"{role}_token": token for role, token in tokenizer.specials.items()}
    specials.update(bos_token=tokenizer.specials["cls"], eos_token=tokenizer.specials["sep"])
    config = {"tokenizer_class": FAST_TOKENIZER_CLASS,
              "model_max_length": int(model_max_length), "clean_up_tokenization_spaces": False,
              **specials}
    # transformers 4 resets a byte-level pre-tokenizer's add_prefix_space (and RobertaTokenizer a
    # RobertaProcessing's trim_offsets) to its own defaults unless the config says otherwise.
    state = tokenizer_state(backend)
    for part in components(state.get("pre_tokenizer")) + components(
            state.get("post_processor")):
        for key in ("add_prefix_space", "trim_offsets"):
            if key in part:
                config.setdefault(key, part[key])
    epath.Path(directory).mkdir(parents=True, exist_ok=True)  # a local folder or gs://
    names = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
    files = [os.path.join(directory, name) for name in names]
    texts = [backend.to_str(pretty=True),
             *(json.dumps(content, indent=2, ensure_ascii=False) + "\n"
               for content in (config, specials))]
    for path, text in zip(files, texts):
        epath.Path(path).write_bytes(text.encode("utf-8"))
    return files


def _save_hf_bert(tokenizer: SubwordTokenizer, directory: str, model_max_length: int
                  ) -> list[str]:
    """Write `tokenizer` into `directory` as a Hugging Face BertTokenizer; returns the paths.

    vocab.txt (one token per line, line number = id), tokenizer.json (the tokenizers pipeline,
    with BERT's [CLS]/[SEP] template), tokenizer_config.json (tokenizer_class "BertTokenizer",
    do_lower_case / strip_accents / tokenize_chinese_chars of the normalizer, model_max_length)
    and special_tokens_map.json. AutoTokenizer (fast, from tokenizer.json) and BertTokenizer
    (slow, from vocab.txt and the options) then give the ids that `tokenizer` gives, with
    [CLS] ... [SEP] around them; except that transformers matches the special tokens' text
    ("[MASK]") in its input, which a tokenizer loaded from a vocab.txt does not. Everything is
    checked before the first file is written (ValueError naming the tokenizer).
    """
    settings = hf_bert_settings(tokenizer)
    tokens = _vocab_lines(tokenizer)
    backend = _hf_backend(tokenizer)
    config = {"tokenizer_class": "BertTokenizer", **settings, "do_basic_tokenize": True,
              "never_split": None, "model_max_length": int(model_max_length),
              "clean_up_tokenization_spaces": True, **SPECIAL_TOKENS_MAP}
    epath.Path(directory).mkdir(parents=True, exist_ok=True)  # a local folder or gs://
    files = [os.path.join(directory, name) for name in HF_TOKENIZER_FILES]
    texts = ["".join(token + "\n" for token in tokens), backend.to_str(pretty=True),
             *(json.dumps(content, indent=2, ensure_ascii=False) + "\n"
               for content in (config, SPECIAL_TOKENS_MAP))]
    for path, text in zip(files, texts):
        epath.Path(path).write_bytes(text.encode("utf-8"))  # "\n" line ends on any system
    return files
