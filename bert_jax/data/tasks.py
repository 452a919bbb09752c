"""Fine-tuning data: readers for labelled texts, tagged sentences and SQuAD, and their features.

Readers turn a file (or a TFDS name) into examples:

    TextExample(text, text_pair, label)     classification (label: a class name) or regression
                                            (label: a float); text_pair for pair tasks
    TaggedSentence(words, tags)             token classification (NER with BIO/IOB2 tags)
    QAExample(id, question, context, answers, is_impossible)    span QA (SQuAD 1.1 / 2.0)

Local formats: CSV/TSV with a header (named text, pair and label columns), JSONL (one object per
line, the same names as keys), fastText-style lines (`__label__pos some text`), CoNLL (a token
and its tag per line, the tag in the last column by default, a blank line between sentences,
`-DOCSTART-` lines skipped) and SQuAD JSON. Every reader fails with the file (and line, key or
question id) at fault: an empty file, a missing column, a malformed CoNLL line, an answer whose
`answer_start` does not point at its text.

Features turn examples into fixed-shape numpy rows for the model, [CLS] A [SEP] (B [SEP]) with
token types 0/1, padded to max_seq_len with attention_mask 0:

    classification / regression: input_ids, token_type_ids, attention_mask [N, L] int32,
                                 labels [N] int32 (class index) or float32 (regression)
    token classification:        the same plus labels [N, L] int32 (the tag of a word on its
                                 first sub-word, IGNORE = -100 everywhere else) and
                                 word_index [N, L] int32 (the word a first sub-word starts, -1)

Span-QA windows and answer decoding are in `bert_jax.data.squad`.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
from collections import Counter
from typing import Any, Iterator, Mapping, Optional, Sequence

import grain
import numpy as np

from bert_jax.data.tokenizer import WordPieceTokenizer

IGNORE = -100  # label of sub-words that carry no tag (not the first of their word), and padding


class DataError(ValueError):
    """Fine-tuning input that cannot be read or does not fit the task; names the file at fault."""


@dataclasses.dataclass(frozen=True)
class TextExample:
    text: str
    text_pair: Optional[str] = None
    label: Any = None  # class name (str) for classification, float for regression


@dataclasses.dataclass(frozen=True)
class TaggedSentence:
    words: tuple[str, ...]
    tags: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Answer:
    text: str
    start: int  # character offset of `text` in the context


@dataclasses.dataclass(frozen=True)
class QAExample:
    id: str
    question: str
    context: str
    answers: tuple[Answer, ...]  # empty for an unanswerable (SQuAD 2.0) question
    is_impossible: bool = False


# ----- local files -----------------------------------------------------------------------------

def _check_file(path: str) -> None:
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file")
    if os.path.getsize(path) == 0:
        raise DataError(f"{path}: the file is empty")


def _lines(path: str, encoding: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of a text file; undecodable bytes name the file, line and encoding."""
    number = 0
    try:
        with open(path, encoding=encoding) as f:
            for number, line in enumerate(f, 1):
                yield number, line
    except UnicodeDecodeError as e:
        raise DataError(f"{path}:{number + 1}: not valid {encoding} ({e.reason} at byte "
                        f"{e.start} of a block); set the file's encoding (data.encoding, e.g. "
                        "cp1252 or latin-1)") from None


def _label_value(raw: Any, regression: bool, where: str) -> Any:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        raise DataError(f"{where}: the label is empty")
    if regression:
        try:
            return float(raw)
        except (TypeError, ValueError):
            raise DataError(f"{where}: label {raw!r} is not a number (regression task)") from None
    return str(raw).strip()


def _from_records(records: Iterator[tuple[str, Mapping[str, Any]]], path: str, text_column: str,
                  label_column: str, text_pair_column: Optional[str], regression: bool,
                  ) -> list[TextExample]:
    """(location, record) pairs -> TextExamples; a missing column names the columns that exist."""
    examples = []
    for where, record in records:
        for column in (text_column, text_pair_column, label_column):
            if column is not None and column not in record:
                raise DataError(f"{where}: no column {column!r}; the columns are "
                                f"{sorted(record)}")
        text = record[text_column]
        pair = record[text_pair_column] if text_pair_column else None
        if not isinstance(text, str) or (pair is not None and not isinstance(pair, str)):
            raise DataError(f"{where}: the text columns must hold strings")
        examples.append(TextExample(text, pair, _label_value(record[label_column], regression,
                                                             where)))
    if not examples:
        raise DataError(f"{path}: holds no examples")
    return examples


def read_table(path: str, text_column: str, label_column: str,
               text_pair_column: Optional[str] = None, regression: bool = False,
               delimiter: Optional[str] = None, encoding: str = "utf-8") -> list[TextExample]:
    """CSV or TSV with a header row; the delimiter defaults to a tab for .tsv, else a comma."""
    _check_file(path)
    delimiter = delimiter or ("\t" if path.endswith(".tsv") else ",")
    lines = (line for _, line in _lines(path, encoding))
    reader = csv.DictReader(lines, delimiter=delimiter, quoting=csv.QUOTE_MINIMAL)
    if not reader.fieldnames:
        raise DataError(f"{path}: no header row")
    missing = [c for c in (text_column, text_pair_column, label_column)
               if c is not None and c not in reader.fieldnames]
    if missing:
        raise DataError(f"{path}: no column(s) {missing} in the header; the columns are "
                        f"{reader.fieldnames}")

    def records():
        for row in reader:
            if None in row or any(v is None for v in row.values()):
                raise DataError(f"{path}:{reader.line_num}: the row does not have the "
                                f"{len(reader.fieldnames)} columns of the header")
            yield f"{path}:{reader.line_num}", row

    return _from_records(records(), path, text_column, label_column, text_pair_column,
                         regression)


def read_jsonl(path: str, text_column: str, label_column: str,
               text_pair_column: Optional[str] = None, regression: bool = False,
               encoding: str = "utf-8") -> list[TextExample]:
    """One JSON object per line, with the named keys."""
    _check_file(path)

    def records():
        for number, line in _lines(path, encoding):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{number}: not valid JSON ({e.msg})") from None
            if not isinstance(record, dict):
                raise DataError(f"{path}:{number}: expected a JSON object per line")
            yield f"{path}:{number}", record

    return _from_records(records(), path, text_column, label_column, text_pair_column,
                         regression)


FASTTEXT_PREFIX = "__label__"


def read_fasttext(path: str, encoding: str = "utf-8") -> list[TextExample]:
    """Lines `__label__<name> text` (the format of gensim's pang_lee_polarity.cor, in cp1252)."""
    _check_file(path)
    examples = []
    for number, line in _lines(path, encoding):
        line = line.strip()
        if not line:
            continue
        label, _, text = line.partition(" ")
        if not label.startswith(FASTTEXT_PREFIX) or len(label) == len(FASTTEXT_PREFIX):
            raise DataError(f"{path}:{number}: expected '{FASTTEXT_PREFIX}<label> <text>', got "
                            f"{line[:60]!r}")
        if not text.strip():
            raise DataError(f"{path}:{number}: the text after the label is empty")
        examples.append(TextExample(text.strip(), None, label[len(FASTTEXT_PREFIX):]))
    if not examples:
        raise DataError(f"{path}: holds no examples")
    return examples


def read_text_examples(path: str, file_format: str = "auto", text_column: str = "text",
                       label_column: str = "label", text_pair_column: Optional[str] = None,
                       regression: bool = False, encoding: str = "utf-8") -> list[TextExample]:
    """Dispatch on `file_format` (csv | tsv | jsonl | fasttext), or on the extension for auto."""
    if file_format == "auto":
        extension = os.path.splitext(path)[1].lower()
        file_format = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl",
                       ".cor": "fasttext", ".txt": "fasttext"}.get(extension, "")
        if not file_format:
            raise DataError(f"{path}: cannot tell the format from the extension {extension!r}; "
                            "set the format to csv, tsv, jsonl or fasttext")
    if file_format in ("csv", "tsv"):
        return read_table(path, text_column, label_column, text_pair_column, regression,
                          delimiter="\t" if file_format == "tsv" else ",", encoding=encoding)
    if file_format == "jsonl":
        return read_jsonl(path, text_column, label_column, text_pair_column, regression,
                          encoding)
    if file_format == "fasttext":
        if regression:
            raise DataError(f"{path}: fastText label lines name classes, not regression targets")
        return read_fasttext(path, encoding)
    raise DataError(f"unknown text file format {file_format!r}: use csv, tsv, jsonl or fasttext")


def read_conll(path: str, tag_column: int = -1, encoding: str = "utf-8") -> list[TaggedSentence]:
    """CoNLL: `token [other columns] tag` per line, a blank line between sentences.

    Lines starting with -DOCSTART- are skipped. A line with fewer than two columns, or fewer
    columns than the sentence's first line, is an error naming its line number.
    """
    _check_file(path)
    sentences: list[TaggedSentence] = []
    words: list[str] = []
    tags: list[str] = []
    width = 0

    def close_sentence():
        nonlocal words, tags, width
        if words:
            sentences.append(TaggedSentence(tuple(words), tuple(tags)))
        words, tags, width = [], [], 0

    for number, line in _lines(path, encoding):
        columns = line.split()
        if not columns:
            close_sentence()
            continue
        if columns[0] == "-DOCSTART-":
            close_sentence()
            continue
        if len(columns) < 2 or (width and len(columns) != width):
            expected = f"{width} columns like the sentence's first line" if width else \
                "a token and a tag separated by whitespace"
            raise DataError(f"{path}:{number}: malformed CoNLL line {line.rstrip()!r}: "
                            f"expected {expected}")
        width = width or len(columns)
        try:
            tag = columns[tag_column]
        except IndexError:
            raise DataError(f"{path}:{number}: no tag column {tag_column}") from None
        words.append(columns[0])
        tags.append(tag)
    close_sentence()
    if not sentences:
        raise DataError(f"{path}: holds no sentences")
    return sentences


def _qa_example(qid: str, question: str, context: str, answers: Sequence[tuple[str, int]],
                is_impossible: bool, where: str) -> QAExample:
    checked = []
    for text, start in answers:
        if context[start:start + len(text)] != text:
            raise DataError(
                f"{where}: question {qid!r}: answer {text!r} with answer_start={start} does not "
                f"match the context there ({context[start:start + len(text)]!r})")
        checked.append(Answer(text, int(start)))
    if not checked and not is_impossible:
        raise DataError(f"{where}: question {qid!r} has no answer and is not marked is_impossible")
    return QAExample(qid, question, context, tuple(checked), bool(is_impossible))


def read_squad_json(path: str) -> list[QAExample]:
    """SQuAD 1.1 / 2.0 JSON: data[].paragraphs[].{context, qas[].{id, question, answers,
    is_impossible}}. Every answer's answer_start must point at its text in the context."""
    _check_file(path)
    try:
        with open(path, encoding="utf-8") as f:
            document = json.load(f)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not valid JSON ({e})") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise DataError(f"{path}: expected a SQuAD object with a 'data' list")
    examples = []
    for a, article in enumerate(document["data"]):
        for p, paragraph in enumerate(article.get("paragraphs", [])):
            where = f"{path}: data[{a}].paragraphs[{p}]"
            try:
                context = paragraph["context"]
                for qa in paragraph["qas"]:
                    answers = [(ans["text"], int(ans["answer_start"])) for ans in qa["answers"]]
                    examples.append(_qa_example(str(qa["id"]), qa["question"], context, answers,
                                                qa.get("is_impossible", False), where))
            except KeyError as e:
                raise DataError(f"{where}: missing key {e}") from None
    if not examples:
        raise DataError(f"{path}: holds no questions")
    return examples


# ----- TFDS catalog names (need network access the first time) --------------------------------

# name -> (module that registers the builder, text key, pair key or None, label key)
TFDS_TEXT_TASKS = {
    "glue/sst2": ("tensorflow_datasets.text.glue", "sentence", None, "label"),
    "glue/mrpc": ("tensorflow_datasets.text.glue", "sentence1", "sentence2", "label"),
    "glue/stsb": ("tensorflow_datasets.text.glue", "sentence1", "sentence2", "label"),
    "glue/mnli": ("tensorflow_datasets.text.glue", "premise", "hypothesis", "label"),
}
TFDS_TAGGING_TASKS = {"conll2003": ("tensorflow_datasets.text.conll2003", "tokens", "ner")}
TFDS_QA_TASKS = {"squad": "tensorflow_datasets.datasets.squad",
                 "squad/v1.1": "tensorflow_datasets.datasets.squad",
                 "squad/v2.0": "tensorflow_datasets.datasets.squad"}
TFDS_NAMES = tuple(TFDS_TEXT_TASKS) + tuple(TFDS_TAGGING_TASKS) + tuple(TFDS_QA_TASKS)


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def tfds_source(name: str, split: str, data_dir: Optional[str] = None, download: bool = True):
    """(random-access data source, features) of a TFDS dataset, prepared on first use.

    With download=False a dataset not yet prepared in data_dir is an error that says so (no
    network is touched); with download=True TFDS downloads and prepares it (network needed).
    """
    import importlib

    import tensorflow_datasets as tfds

    module = (TFDS_TEXT_TASKS.get(name, (None,))[0] or TFDS_TAGGING_TASKS.get(name, (None,))[0]
              or TFDS_QA_TASKS.get(name))
    if module is None:
        raise DataError(f"TFDS dataset {name!r} is not supported; choose one of {TFDS_NAMES}")
    importlib.import_module(module)  # registers the builder (not imported without TensorFlow)
    builder = tfds.builder(name, data_dir=data_dir or None)
    if not builder.is_prepared():
        if not download:
            raise DataError(
                f"TFDS dataset {name!r} is not prepared in {builder.data_dir}; run once with "
                "network access and download enabled (data.tfds_download=True), or point "
                "data.tfds_data_dir at a folder where it is prepared")
        try:
            builder.download_and_prepare(file_format="array_record")
        except Exception as e:  # offline: requests' ConnectionError after retries, and others
            raise DataError(f"TFDS dataset {name!r} could not be downloaded and prepared into "
                            f"{builder.data_dir} (network access is needed the first time): "
                            f"{type(e).__name__}: {e}") from e
    if split not in builder.info.splits:
        raise DataError(f"TFDS dataset {name!r} has no split {split!r}; it has "
                        f"{sorted(builder.info.splits)}")
    return builder.as_data_source(split=split), builder.info.features


def read_tfds(name: str, split: str, data_dir: Optional[str] = None, download: bool = True):
    """Examples of a supported TFDS dataset: TextExamples, TaggedSentences or QAExamples.

    Class labels come back as their names (from the dataset's ClassLabel), so label maps are
    the same whether data comes from TFDS or from files.
    """
    source, features = tfds_source(name, split, data_dir, download)
    if name in TFDS_TEXT_TASKS:
        _, text_key, pair_key, label_key = TFDS_TEXT_TASKS[name]
        names = getattr(features[label_key], "names", None)  # None: stsb's float score
        examples = []
        for record in source:
            label = record[label_key]
            if names is not None:
                if int(label) < 0:
                    continue  # GLUE test splits hide their labels (-1)
                label = names[int(label)]
            else:
                label = float(label)
            examples.append(TextExample(_text(record[text_key]),
                                        _text(record[pair_key]) if pair_key else None, label))
        return examples
    if name in TFDS_TAGGING_TASKS:
        _, words_key, tags_key = TFDS_TAGGING_TASKS[name]
        names = features[tags_key].feature.names
        return [TaggedSentence(tuple(_text(w) for w in r[words_key]),
                               tuple(names[int(t)] for t in r[tags_key])) for r in source]
    examples = []
    for record in source:
        answers = record["answers"]
        pairs = [(_text(t), int(s)) for t, s in zip(answers["text"], answers["answer_start"])]
        examples.append(_qa_example(_text(record["id"]), _text(record["question"]),
                                    _text(record["context"]), pairs,
                                    bool(record.get("is_impossible", False)), f"tfds:{name}"))
    return examples


# ----- splits and labels ----------------------------------------------------------------------

def holdout_split(examples: Sequence[Any], fraction: float, seed: int,
                  stratify_by_label: bool = True) -> tuple[list[Any], list[Any]]:
    """(train, held-out): a seeded random `fraction` held out, per label when asked."""
    if not 0 < fraction < 1:
        raise DataError(f"held-out fraction {fraction} must be in (0, 1)")
    rng = np.random.default_rng(seed)
    groups: dict[Any, list[int]] = {}
    for index, example in enumerate(examples):
        key = getattr(example, "label", None) if stratify_by_label else None
        groups.setdefault(key if isinstance(key, str) else None, []).append(index)
    held = set()
    for indices in groups.values():
        order = rng.permutation(indices)
        held.update(int(i) for i in order[:max(1, round(fraction * len(indices)))])
    train = [e for i, e in enumerate(examples) if i not in held]
    heldout = [e for i, e in enumerate(examples) if i in held]
    if not train:
        raise DataError(f"held-out fraction {fraction} leaves no training examples")
    return train, heldout


def build_label_map(labels: Sequence[str]) -> tuple[str, ...]:
    """Sorted distinct label names; the position of a name is its class index."""
    return tuple(sorted(set(labels)))


def label_ids(labels: Sequence[str], label_map: Sequence[str], source: str) -> np.ndarray:
    """Class indices of `labels`; a label absent from the (training) label map is an error."""
    index = {name: i for i, name in enumerate(label_map)}
    unknown = sorted(set(labels) - set(index))
    if unknown:
        raise DataError(f"{source}: label(s) {unknown} never seen in training; the training "
                        f"labels are {list(label_map)}")
    return np.asarray([index[name] for name in labels], np.int32)


def majority_label(labels: Sequence[str]) -> str:
    """The most frequent label (ties: the first in sorted order)."""
    counts = Counter(labels)
    return min(counts, key=lambda name: (-counts[name], name))


# ----- features ---------------------------------------------------------------------------------

def _truncate_pair(a: list[int], b: list[int], budget: int) -> tuple[list[int], list[int]]:
    """Drop tokens from the end of the longer sequence until both fit in `budget` together."""
    a, b = list(a), list(b)
    while len(a) + len(b) > budget:
        (a if len(a) >= len(b) else b).pop()
    return a, b


def pack_pair(tokenizer: WordPieceTokenizer, ids_a: Sequence[int], ids_b: Optional[Sequence[int]],
              max_seq_len: int) -> tuple[list[int], list[int]]:
    """[CLS] A [SEP] (B [SEP]) truncated longest-first to max_seq_len: (ids, token types)."""
    if ids_b is None:
        a = list(ids_a)[:max_seq_len - 2]
        return [tokenizer.cls_id, *a, tokenizer.sep_id], [0] * (len(a) + 2)
    a, b = _truncate_pair(ids_a, ids_b, max_seq_len - 3)
    ids = [tokenizer.cls_id, *a, tokenizer.sep_id, *b, tokenizer.sep_id]
    return ids, [0] * (len(a) + 2) + [1] * (len(b) + 1)


def _pad_rows(rows: Sequence[Sequence[int]], length: int, value: int) -> np.ndarray:
    out = np.full((len(rows), length), value, np.int32)
    for i, row in enumerate(rows):
        out[i, :len(row)] = row
    return out


def encode_text_examples(tokenizer: WordPieceTokenizer, examples: Sequence[TextExample],
                         max_seq_len: int, label_map: Optional[Sequence[str]],
                         source: str = "examples") -> dict[str, np.ndarray]:
    """Rows for sequence (or pair) classification, or regression when label_map is None."""
    if max_seq_len < 4:
        raise DataError(f"max_seq_len={max_seq_len} is too short for [CLS] A [SEP] B [SEP]")
    ids_a = tokenizer.encode_batch([e.text for e in examples])
    has_pairs = [e.text_pair is not None for e in examples]
    if any(has_pairs) and not all(has_pairs):
        raise DataError(f"{source}: some examples have a second text and some do not")
    ids_b = (tokenizer.encode_batch([e.text_pair for e in examples]) if all(has_pairs) and examples
             else [None] * len(examples))
    packed = [pack_pair(tokenizer, a, b, max_seq_len) for a, b in zip(ids_a, ids_b)]
    features = {
        "input_ids": _pad_rows([ids for ids, _ in packed], max_seq_len, tokenizer.pad_id),
        "token_type_ids": _pad_rows([types for _, types in packed], max_seq_len, 0),
        "attention_mask": _pad_rows([[1] * len(ids) for ids, _ in packed], max_seq_len, 0),
    }
    labels = [e.label for e in examples]
    if label_map is None:
        features["labels"] = np.asarray(labels, np.float32)
    else:
        features["labels"] = label_ids(labels, label_map, source)
    return features


def encode_tagged_sentences(tokenizer: WordPieceTokenizer, sentences: Sequence[TaggedSentence],
                            max_seq_len: int, label_map: Sequence[str],
                            source: str = "sentences") -> dict[str, np.ndarray]:
    """Rows for token classification: each word's tag on its first sub-word, IGNORE elsewhere.

    A word the tokenizer turns into nothing (e.g. a lone control character) becomes [UNK], so
    every word has a position; words past max_seq_len - 2 sub-words are cut (and will be
    predicted as "O" when decoding; see `tags_from_token_predictions`).
    """
    for number, sentence in enumerate(sentences):
        if len(sentence.words) != len(sentence.tags):
            raise DataError(f"{source}: sentence {number} has {len(sentence.words)} words but "
                            f"{len(sentence.tags)} tags")
    all_tags = [tag for s in sentences for tag in s.tags]
    label_ids(all_tags, label_map, source)  # fails on a tag never seen in training
    tag_index = {name: i for i, name in enumerate(label_map)}
    encodings = tokenizer.tokenizer.encode_batch(
        [list(s.words) for s in sentences], is_pretokenized=True, add_special_tokens=False)
    n = len(sentences)
    input_ids = np.full((n, max_seq_len), tokenizer.pad_id, np.int32)
    labels = np.full((n, max_seq_len), IGNORE, np.int32)
    word_index = np.full((n, max_seq_len), -1, np.int32)
    attention_mask = np.zeros((n, max_seq_len), np.int32)
    for row, (sentence, encoding) in enumerate(zip(sentences, encodings)):
        pieces: list[list[int]] = [[] for _ in sentence.words]
        for token_id, word in zip(encoding.ids, encoding.word_ids):
            if word is not None:
                pieces[word].append(token_id)
        ids, tags, words = [tokenizer.cls_id], [IGNORE], [-1]
        for word, word_pieces in enumerate(pieces):
            word_pieces = word_pieces or [tokenizer.unk_id]
            if len(ids) + len(word_pieces) > max_seq_len - 1:
                break
            ids += word_pieces
            tags += [tag_index[sentence.tags[word]]] + [IGNORE] * (len(word_pieces) - 1)
            words += [word] + [-1] * (len(word_pieces) - 1)
        ids.append(tokenizer.sep_id)
        tags.append(IGNORE)
        words.append(-1)
        input_ids[row, :len(ids)] = ids
        labels[row, :len(ids)] = tags
        word_index[row, :len(ids)] = words
        attention_mask[row, :len(ids)] = 1
    return {"input_ids": input_ids, "token_type_ids": np.zeros_like(input_ids),
            "attention_mask": attention_mask, "labels": labels, "word_index": word_index}


def tags_from_token_predictions(predicted: np.ndarray, word_index: np.ndarray,
                                num_words: Sequence[int], label_map: Sequence[str],
                                outside: str = "O") -> list[list[str]]:
    """Per-word tags from per-token class indices, read at each word's first sub-word.

    predicted, word_index: [N, L]. Words cut by truncation get `outside`.
    """
    out = []
    for row, count in enumerate(num_words):
        tags = [outside] * count
        for position in np.nonzero(word_index[row] >= 0)[0]:
            tags[word_index[row, position]] = label_map[predicted[row, position]]
        out.append(tags)
    return out


# ----- batches ---------------------------------------------------------------------------------

def train_batches(features: Mapping[str, np.ndarray], global_batch_size: int, seed: int,
                  process_index: int = 0, process_count: int = 1) -> grain.DatasetIterator:
    """Endless host-local batches of rows, reshuffled every epoch; get_state/set_state resume.

    Each process takes every process_count-th row of the shuffled stream, so the processes'
    batches together form one global batch of distinct rows.
    """
    num_rows = len(next(iter(features.values())))
    if num_rows == 0:
        raise DataError("no training rows")
    if global_batch_size % process_count:
        raise DataError(f"batch_size={global_batch_size} is not divisible by the "
                        f"{process_count} processes")
    rows = (grain.MapDataset.range(num_rows).shuffle(seed=seed).repeat(None)
            [process_index::process_count])
    batches = rows.batch(global_batch_size // process_count, drop_remainder=True)
    batches = batches.map(lambda indices: {k: v[indices] for k, v in features.items()})
    return iter(batches)


def eval_batches(features: Mapping[str, np.ndarray], global_batch_size: int,
                 process_index: int = 0, process_count: int = 1
                 ) -> Iterator[dict[str, np.ndarray]]:
    """In-order host-local batches; the last is padded to the full size with example_weights 0.

    Every batch has the same shape (one compilation); row r of global batch b is example
    b * global_batch_size + r, this process holding a contiguous block of rows.
    """
    num_rows = len(next(iter(features.values())))
    per_process = global_batch_size // process_count
    for start in range(0, num_rows, global_batch_size):
        stop = min(start + global_batch_size, num_rows)
        batch = {}
        for name, values in features.items():
            block = values[start:stop]
            pad = np.zeros((global_batch_size - len(block),) + values.shape[1:], values.dtype)
            batch[name] = np.concatenate([block, pad])
        batch["example_weights"] = (np.arange(global_batch_size) < stop - start).astype(np.float32)
        lo = process_index * per_process
        yield {name: values[lo:lo + per_process] for name, values in batch.items()}
