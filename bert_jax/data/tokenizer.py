"""Subword tokenizers on Hugging Face `tokenizers`: BERT's WordPiece, and the BPE / Unigram of
RoBERTa and XLM-R read from their tokenizer.json.

BERT's pipeline (Devlin et al., 2019): normalize (clean control characters, space out CJK
characters, optionally lower-case and strip accents), split on whitespace and punctuation, then
greedy longest-match-first WordPiece with "##" marking a piece that continues a word. Sequences get
[CLS] A [SEP] (or [CLS] A [SEP] B [SEP]) when special tokens are asked for.

`load_tokenizer` reads a `vocab.txt` (one token per line; the line number is the id), a
`tokenizer.json` (Hugging Face format, e.g. the one shipped with MiniLM) or a folder holding
either (a folder's vocab.txt with the casing of its tokenizer_config.json); `train_wordpiece`
learns a vocabulary of a given size from texts and saves both files. Every WordPiece vocabulary
must hold the five special tokens [PAD] [UNK] [CLS] [SEP] [MASK]; a missing one is an error naming
the file.

A tokenizer.json with a BPE model (RoBERTa: byte-level BPE) or a Unigram model (XLM-R:
SentencePiece) gives a `SubwordTokenizer` whose special tokens are found in the file
(`find_special_tokens`): the sequence's first and separator tokens from its post-processor (<s>
and </s>), the unknown token from its model, padding and mask by their names (<pad>, <mask>).
The pipelines ask every tokenizer the same questions (pad_id, cls_id, sep_id, mask_id,
special_ids, is_continuation, is_ordinary), so a RoBERTa vocabulary answers with <pad>, <s>,
</s>, <mask>.

`save_hf` writes a tokenizer in the layout of a Hugging Face model folder (tokenizer.json,
tokenizer_config.json, special_tokens_map.json, and vocab.txt for WordPiece), so that
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
# The special tokens the pipelines ask for, by role: padding, an unknown piece, the token that
# starts a sequence (BERT's [CLS], RoBERTa's <s>), the one that ends each segment ([SEP], </s>)
# and the masked-LM mask.
ROLES = ("pad", "unk", "cls", "sep", "mask")
BERT_SPECIALS = dict(zip(ROLES, SPECIAL_TOKENS))
# How a tokenizer.json may name each role where its post-processor and model do not say:
# fairseq's names (RoBERTa, XLM-R) first, then BERT's.
SPELLINGS = {"pad": ("<pad>", PAD), "unk": ("<unk>", UNK), "cls": ("<s>", CLS),
             "sep": ("</s>", SEP), "mask": ("<mask>", MASK)}
# The models a SubwordTokenizer takes.
MODEL_KINDS = ("WordPiece", "BPE", "Unigram")


class SubwordTokenizer:
    """A `tokenizers.Tokenizer` with the special ids and per-token facts the pipelines need.

    specials: role (ROLES) -> token; None finds them in the tokenizer (`find_special_tokens`).
    Attributes: kind (MODEL_KINDS), specials, vocab_size, pad_id, unk_id, cls_id, sep_id,
    mask_id, special_ids (sorted tuple of the five), pair_separator_ids (what separates A from B
    in a pair: (sep_id,) for BERT's [SEP], (sep_id, sep_id) for RoBERTa's </s> </s>; from the
    post-processor, `pair_separator`), words_tokenizer (the tokenizers.Tokenizer for text already
    split into words: `words_tokenizer`), is_continuation [vocab] bool (a piece that
    continues a word: `continuation_pieces`), is_ordinary [vocab] bool (random replacements in
    masking are drawn from these: not a special token, and for WordPiece not a bracketed token
    such as [unused3]).
    """

    def __init__(self, tokenizer: tokenizers.Tokenizer, source: str = "<memory>",
                 specials: dict[str, str] | None = None):
        self.kind = type(tokenizer.model).__name__
        if self.kind not in MODEL_KINDS:
            raise ValueError(f"{source} holds a {self.kind} model; a subword tokenizer is one of "
                             f"{list(MODEL_KINDS)}")
        self.specials = dict(specials) if specials is not None else find_special_tokens(
            tokenizer, source)  # before padding is turned off: it may name the pad token
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self.tokenizer = tokenizer
        self.words_tokenizer = words_tokenizer(tokenizer)
        self.source = source
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        missing = [token for token in self.specials.values() if token not in vocab]
        if missing:
            raise ValueError(f"vocabulary {source} lacks the special token(s) {missing}")
        self.vocab_size = max(vocab.values()) + 1
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            vocab[self.specials[role]] for role in ROLES)
        self.special_ids = tuple(sorted(vocab[self.specials[role]] for role in ROLES))
        self.pair_separator_ids = tuple(
            vocab[token] for token in pair_separator(tokenizer, self.specials["sep"]))
        added = {token.content for token in tokenizer.get_added_tokens_decoder().values()
                 if token.special}
        bracketed = self.kind == "WordPiece"  # BERT's vocabularies: [PAD], [unused3], ...
        self.is_continuation = continuation_pieces(tokenizer, vocab, exclude=added)
        self.is_ordinary = np.zeros(self.vocab_size, bool)
        for token, index in vocab.items():
            self.is_ordinary[index] = token not in added and not (
                bracketed and len(token) > 2 and token[0] == "[" and token[-1] == "]")

    def encode(self, text: str) -> list[int]:
        """Ids of `text` without special tokens."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of each text without special tokens (tokenized in parallel threads)."""
        return [e.ids for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]

    def encode_pair(self, text_a: str, text_b: str | None = None) -> tokenizers.Encoding:
        """A (and B) with the tokenizer's own special tokens and type ids: [CLS] A [SEP] (B [SEP])
        for BERT, <s> A </s> (</s> B </s>) for RoBERTa."""
        return self.tokenizer.encode(text_a, text_b, add_special_tokens=True)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def id_to_token(self, index: int) -> str | None:
        return self.tokenizer.id_to_token(index)

    def token_to_id(self, token: str) -> int | None:
        return self.tokenizer.token_to_id(token)


class WordPieceTokenizer(SubwordTokenizer):
    """BERT's: a WordPiece `tokenizers.Tokenizer` whose vocabulary holds [PAD] [UNK] [CLS] [SEP]
    [MASK] ("##" marks a continuation)."""

    def __init__(self, tokenizer: tokenizers.Tokenizer, source: str = "<memory>"):
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        missing = [token for token in SPECIAL_TOKENS if token not in vocab]
        if missing:
            raise ValueError(f"vocabulary {source} lacks the special token(s) {missing}; a BERT "
                             f"vocabulary needs all of {list(SPECIAL_TOKENS)}")
        super().__init__(tokenizer, source, BERT_SPECIALS)


def _state(tokenizer: tokenizers.Tokenizer) -> dict[str, Any]:
    """The tokenizer.json contents of `tokenizer`, as a dict."""
    return json.loads(tokenizer.to_str())


def _components(component: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A pre-tokenizer or post-processor and, for a Sequence, the ones inside it."""
    if not component:
        return []
    inner = component.get("pretokenizers") or component.get("processors") or []
    return [component, *(part for item in inner for part in _components(item))]


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
    state = _state(tokenizer)
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
    for processor in _components(_state(tokenizer).get("post_processor")):
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
    state = _state(tokenizer)
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    found: dict[str, str | None] = {}
    for processor in _components(state.get("post_processor")):
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
    state = _state(tokenizer)
    model = state.get("model") or {}
    prefix = model.get("continuing_subword_prefix") or ""
    mark = None
    for part in _components(state.get("pre_tokenizer")):
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
                   strip_accents: bool | None = None) -> SubwordTokenizer:
    """Loads `vocab.txt`, `tokenizer.json`, or a folder holding either (tokenizer.json preferred).

    A WordPiece vocabulary gives a WordPieceTokenizer; a tokenizer.json of a BPE or Unigram model
    (RoBERTa, XLM-R) a SubwordTokenizer with the special tokens the file names.
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
        if isinstance(tokenizer.model, models.WordPiece):
            return WordPieceTokenizer(tokenizer, source=path)
        return SubwordTokenizer(tokenizer, source=path)
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


def hf_tokenizer_class(tokenizer: SubwordTokenizer) -> str:
    """The transformers class that reads `tokenizer`'s tokenizer.json as it is: RobertaTokenizer
    for a byte-level BPE, XLMRobertaTokenizer for a Unigram with Metaspace (both with <s> </s>
    <pad> <unk> <mask>), else PreTrainedTokenizerFast (which takes any tokenizer.json)."""
    parts = {part.get("type") for part in _components(_state(tokenizer.tokenizer)
                                                       .get("pre_tokenizer"))}
    fairseq = tokenizer.specials == {role: names[0] for role, names in SPELLINGS.items()}
    if fairseq and tokenizer.kind == "BPE" and "ByteLevel" in parts:
        return "RobertaTokenizer"
    if fairseq and tokenizer.kind == "Unigram" and "Metaspace" in parts:
        return "XLMRobertaTokenizer"
    return "PreTrainedTokenizerFast"


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
    config = {"tokenizer_class": hf_tokenizer_class(tokenizer),
              "model_max_length": int(model_max_length), "clean_up_tokenization_spaces": False,
              **specials}
    # transformers resets a byte-level pre-tokenizer's add_prefix_space (and RobertaTokenizer a
    # RobertaProcessing's trim_offsets) to its own defaults unless the config says otherwise.
    state = _state(backend)
    for part in _components(state.get("pre_tokenizer")) + _components(
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
