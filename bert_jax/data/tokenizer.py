"""BERT's WordPiece tokenizer, built on Hugging Face `tokenizers`.

The pipeline of the BERT paper: normalize (clean control characters, space out CJK characters,
optionally lower-case and strip accents), split on whitespace and punctuation, then greedy
longest-match-first WordPiece with "##" marking a piece that continues a word. Sequences get
[CLS] A [SEP] (or [CLS] A [SEP] B [SEP]) when special tokens are asked for.

`load_tokenizer` reads a `vocab.txt` (one token per line; the line number is the id), a
`tokenizer.json` (Hugging Face format, e.g. the one shipped with MiniLM) or a folder holding
either (a folder's vocab.txt with the casing of its tokenizer_config.json); `train_wordpiece`
learns a vocabulary of a given size from texts and saves both files. Every vocabulary must hold
the five special tokens [PAD] [UNK] [CLS] [SEP] [MASK]; a missing one is an error naming the file.
`save_hf` writes a tokenizer in the layout of a Hugging Face model folder (vocab.txt,
tokenizer.json, tokenizer_config.json, special_tokens_map.json), so that
`transformers.AutoTokenizer.from_pretrained(folder)` tokenizes as it does. Every path may be local
or on object storage (`gs://bucket/vocab.txt`): files are read and written through etils.epath.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterable, Sequence

import numpy as np
import tokenizers
from etils import epath
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

from bert_jax import paths, progress

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
CONTINUATION_PREFIX = "##"


class WordPieceTokenizer:
    """A `tokenizers.Tokenizer` with BERT's special ids and per-token facts the pipeline needs.

    Attributes: vocab_size, pad_id, unk_id, cls_id, sep_id, mask_id, special_ids (sorted tuple),
    is_continuation [vocab] bool ("##" pieces), is_ordinary [vocab] bool (not a bracketed token
    such as [PAD] or [unused3]; random replacements in masking are drawn from these).
    """

    def __init__(self, tokenizer: tokenizers.Tokenizer, source: str = "<memory>"):
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self.tokenizer = tokenizer
        self.source = source
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        missing = [token for token in SPECIAL_TOKENS if token not in vocab]
        if missing:
            raise ValueError(f"vocabulary {source} lacks the special token(s) {missing}; a BERT "
                             f"vocabulary needs all of {list(SPECIAL_TOKENS)}")
        self.vocab_size = max(vocab.values()) + 1
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            vocab[token] for token in SPECIAL_TOKENS)
        self.special_ids = tuple(sorted(vocab[token] for token in SPECIAL_TOKENS))
        self.is_continuation = np.zeros(self.vocab_size, bool)
        self.is_ordinary = np.zeros(self.vocab_size, bool)
        for token, index in vocab.items():
            self.is_continuation[index] = token.startswith(CONTINUATION_PREFIX)
            self.is_ordinary[index] = not (len(token) > 2 and token[0] == "[" and token[-1] == "]")

    def encode(self, text: str) -> list[int]:
        """Ids of `text` without special tokens."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of each text without special tokens (tokenized in parallel threads)."""
        return [e.ids for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]

    def encode_pair(self, text_a: str, text_b: str | None = None) -> tokenizers.Encoding:
        """[CLS] A [SEP] (B [SEP]) with type ids: the fine-tuning input format."""
        return self.tokenizer.encode(text_a, text_b, add_special_tokens=True)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def id_to_token(self, index: int) -> str | None:
        return self.tokenizer.id_to_token(index)

    def token_to_id(self, token: str) -> int | None:
        return self.tokenizer.token_to_id(token)


def bert_wordpiece(vocab: dict[str, int] | None = None, lowercase: bool = True,
                   strip_accents: bool | None = None) -> tokenizers.Tokenizer:
    """An (untrained when vocab is None) BERT WordPiece `tokenizers.Tokenizer`.

    strip_accents: None follows `lowercase`, as in the original BERT.
    """
    model = models.WordPiece(vocab or {}, unk_token=UNK, max_input_chars_per_word=100,
                             continuing_subword_prefix=CONTINUATION_PREFIX)
    tokenizer = tokenizers.Tokenizer(model)
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=strip_accents,
        lowercase=lowercase)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix=CONTINUATION_PREFIX)
    if vocab:
        tokenizer.post_processor = bert_post_processor(vocab)
    return tokenizer


def bert_post_processor(vocab: dict[str, int]) -> processors.TemplateProcessing:
    """[CLS] A [SEP] with type 0, then B [SEP] with type 1."""
    return processors.TemplateProcessing(
        single=f"{CLS}:0 $A:0 {SEP}:0", pair=f"{CLS}:0 $A:0 {SEP}:0 $B:1 {SEP}:1",
        special_tokens=[(CLS, vocab[CLS]), (SEP, vocab[SEP])])


def read_vocab_txt(path: str) -> dict[str, int]:
    """token -> id from a BERT vocab.txt (id = line number)."""
    vocab: dict[str, int] = {}
    with epath.Path(path).open("r") as f:  # a local file or gs://
        for index, line in enumerate(f):
            token = line.rstrip("\n").rstrip("\r")
            if token in vocab:
                raise ValueError(f"{path}:{index + 1}: token {token!r} repeats line "
                                 f"{vocab[token] + 1}")
            vocab[token] = index
    if not vocab:
        raise ValueError(f"vocabulary file {path} is empty")
    return vocab


def load_tokenizer(path: str, lowercase: bool = True,
                   strip_accents: bool | None = None) -> WordPieceTokenizer:
    """Loads `vocab.txt`, `tokenizer.json`, or a folder holding either (tokenizer.json preferred).

    For vocab.txt, `lowercase`/`strip_accents` configure the normalizer; a tokenizer.json carries
    its own normalizer and they are ignored. A folder read through its vocab.txt is a Hugging
    Face folder: the do_lower_case / strip_accents of its tokenizer_config.json, where it has
    them, take the place of the arguments, since they describe how that vocabulary was made
    (`_folder_casing`).
    """
    path = os.path.expanduser(os.fspath(path))  # a local path or gs:// (etils.epath)
    if epath.Path(path).is_dir():
        if (epath.Path(path) / "tokenizer.json").is_file():
            return load_tokenizer(os.path.join(path, "tokenizer.json"))
        if (epath.Path(path) / "vocab.txt").is_file():
            casing = _folder_casing(path)
            return load_tokenizer(os.path.join(path, "vocab.txt"),
                                  casing.get("do_lower_case", lowercase),
                                  casing.get("strip_accents", strip_accents))
        raise FileNotFoundError(f"{path} holds neither tokenizer.json nor vocab.txt")
    if not epath.Path(path).is_file():
        raise FileNotFoundError(f"vocabulary file {path} does not exist")
    if path.endswith(".json"):
        try:
            tokenizer = tokenizers.Tokenizer.from_str(epath.Path(path).read_text())
        except Exception as e:
            raise ValueError(f"{path} is not a readable tokenizers JSON file: {e}") from e
        if not isinstance(tokenizer.model, models.WordPiece):
            kind = type(tokenizer.model).__name__
            raise ValueError(f"{path} holds a {kind} model, not WordPiece")
        return WordPieceTokenizer(tokenizer, source=path)
    vocab = read_vocab_txt(path)
    missing = [token for token in SPECIAL_TOKENS if token not in vocab]
    if missing:
        raise ValueError(f"vocabulary {path} lacks the special token(s) {missing}; a BERT "
                         f"vocabulary needs all of {list(SPECIAL_TOKENS)}")
    return WordPieceTokenizer(bert_wordpiece(vocab, lowercase, strip_accents), source=path)


def _folder_casing(directory: str) -> dict[str, Any]:
    """do_lower_case and strip_accents of <directory>/tokenizer_config.json, those it holds
    ({} without the file); ValueError naming the file when it is not a JSON object."""
    path = epath.Path(directory) / "tokenizer_config.json"
    if not path.is_file():
        return {}
    try:
        options = json.loads(path.read_bytes().decode("utf-8"))
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(options, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(options).__name__}")
    return {k: options[k] for k in ("do_lower_case", "strip_accents") if k in options}


def _trainer(vocab_size: int, min_frequency: int, special_tokens: Sequence[str]):
    return trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(special_tokens),
        continuing_subword_prefix=CONTINUATION_PREFIX, show_progress=False)


def _continuation_pieces(texts: Iterable[str], lowercase: bool,
                         strip_accents: bool | None) -> list[str]:
    """The "##c" piece of every character c that continues a word of `texts`, sorted.

    tokenizers' WordPiece trainer creates these pieces while it walks a hash map of the words,
    whose order changes from process to process, so their ids change too; it then breaks ties
    between equally frequent merges by ids, so two runs on the same texts learn different
    vocabularies (huggingface/tokenizers#1794). Given to the trainer beforehand as special tokens,
    in sorted order, the pieces have fixed ids and training is deterministic. A training run
    without merges (vocab_size=1) lists them, normalizing and splitting words as training does.
    """
    tokenizer = bert_wordpiece(None, lowercase, strip_accents)
    tokenizer.train_from_iterator(texts, _trainer(1, 1, SPECIAL_TOKENS))
    return sorted(token for token in tokenizer.get_vocab()
                  if token.startswith(CONTINUATION_PREFIX))


def train_wordpiece(texts: Iterable[str], vocab_size: int, out_dir: str, lowercase: bool = True,
                    strip_accents: bool | None = None, min_frequency: int = 2) -> str:
    """Learns a WordPiece vocabulary of at most `vocab_size` tokens; returns the vocab.txt path.

    Ids 0..4 are [PAD] [UNK] [CLS] [SEP] [MASK]. Also writes tokenizer.json next to vocab.txt.
    The same texts give the same files, byte for byte, whatever the number of threads
    (`_continuation_pieces`). `texts` is read twice: a one-shot iterator (a generator) is first
    read into memory, a collection or any other re-iterable is not. Each pass shows a progress
    bar of the texts read (`bert_jax.progress`); the bars change nothing in the result.
    """
    if vocab_size <= len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size={vocab_size} leaves no room beside the special tokens")
    if iter(texts) is texts:
        texts = list(texts)
    pieces = _continuation_pieces(
        progress.bar(texts, desc="vocabulary 1/2: characters", unit="doc"), lowercase,
        strip_accents)
    trained = bert_wordpiece(None, lowercase, strip_accents)
    trained.train_from_iterator(progress.bar(texts, desc="vocabulary 2/2: words", unit="doc"),
                                _trainer(vocab_size, min_frequency, [*SPECIAL_TOKENS, *pieces]))
    vocab = trained.get_vocab()
    tokenizer = bert_wordpiece(vocab, lowercase, strip_accents)  # the pieces are plain tokens
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    epath.Path(out_dir).mkdir(parents=True, exist_ok=True)  # a local folder or gs://
    vocab_path = os.path.join(out_dir, "vocab.txt")
    (epath.Path(out_dir) / "tokenizer.json").write_text(tokenizer.to_str(pretty=True))
    # vocab.txt last, written whole: its presence means the folder is complete.
    paths.write_text_atomically(vocab_path, "".join(
        token + "\n" for token, _ in sorted(vocab.items(), key=lambda item: item[1])))
    return vocab_path


# ----- the Hugging Face layout -------------------------------------------------------------------

HF_TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json",
                      "special_tokens_map.json")
SPECIAL_TOKENS_MAP = {"unk_token": UNK, "sep_token": SEP, "pad_token": PAD, "cls_token": CLS,
                      "mask_token": MASK}
# transformers.BertTokenizer (the slow one) fixes this; a WordPiece model must agree.
_HF_MAX_INPUT_CHARS_PER_WORD = 100


def hf_bert_settings(tokenizer: WordPieceTokenizer) -> dict[str, Any]:
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


def _vocab_lines(tokenizer: WordPieceTokenizer) -> list[str]:
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


def _hf_backend(tokenizer: WordPieceTokenizer) -> tokenizers.Tokenizer:
    """A copy for tokenizer.json: BERT's [CLS] A [SEP] (B [SEP]) template (what the encoders of
    bert_jax.data build), the special tokens registered as transformers registers them on load,
    no truncation or padding."""
    backend = tokenizers.Tokenizer.from_str(tokenizer.tokenizer.to_str())
    backend.post_processor = bert_post_processor(backend.get_vocab(with_added_tokens=True))
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    backend.no_truncation()
    backend.no_padding()
    return backend


def save_hf(tokenizer: WordPieceTokenizer, directory: str, model_max_length: int) -> list[str]:
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
