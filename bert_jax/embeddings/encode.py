"""Sentence embeddings from any BERT encoder: one of our runs or a Hugging Face folder.

    from bert_jax.embeddings import encode as se
    from bert_jax.tools import saved_runs
    encoder = saved_runs.load_encoder(hf_dir="path/to/hf_bert")  # or workdir=RUN, step=N
    rows = se.read_rows("sentences.txt")                       # or .jsonl/.csv/.tsv
    vectors = se.embed(encoder, [r.text for r in rows], pooling="mean", normalize=True)
    se.write_outputs("out/sentences", vectors, rows)   # .npy [N, H] + .index.jsonl

Each text becomes the row [CLS] pieces [SEP] (cut to max_seq_len), goes through the encoder
(BertModel, no dropout), and is pooled: "mean" averages the last layer over the real tokens
([CLS] and [SEP] included, padding excluded, as sentence-transformers does), "cls" takes the
[CLS] vector (not the pooler's tanh layer); `normalize` scales each vector to unit L2 norm.

Short texts are packed (`pack=True`, the default): sorted longest first, they fill rows of
`row_length` tokens first fit, within windows of PACK_WINDOW texts (128 tokens, or the window's
longest text rounded up to a multiple of 16 when that is longer; at most max_seq_len), up to
MAX_TEXTS_PER_ROW texts a row, each text attending only to itself with its positions starting at 0
(the encoder's segment_ids), so its vector is the one it has alone in a row, up to float rounding,
and padding is computed only at the rows' ends (gensim's 200 polarity sentences for MiniLM: 5,547
real tokens, 6,144 computed positions packed against 12,416 one text a row in length buckets and
11,312 for transformers padding each batch of 64 to its longest). A call embeds `batch_size // 4`
packed rows (at least 1); batch_size defaults by platform (DEFAULT_BATCH_SIZE). `pack=False`: one
text a row, rows cut into calls of `batch_size` and padded to the smallest power of two (at least 8,
at most max_seq_len) that holds a call's longest row. Either way a call of fewer rows is rounded up
to a power of two (one text does not compute a full call), or to the full call's rows when a full
call of its row length has run (that shape is compiled already: the last call of a length compiles
nothing), the jitted function is kept per (model config, pooling, normalize) (`embed_fn`), and the
encoder's parameters are put on the device once, when it is loaded: a process compiles a few
programs per row length whatever the number of texts or calls, and a second call on new texts of the
same lengths compiles nothing. The vectors come back in input order.

Inputs (`read_rows`) are read by `bert_jax.data.finetuning.unlabelled.read_unlabelled_text`, one
text column: text files (every line one text, stripped: format `lines`; vector i is line i + 1),
JSONL (an object per line, the text under `text_column`), CSV/TSV with a header row
(`text_column`; TSV without quote processing). In a text file a blank line before the last text
is a bad row (it would leave the vectors one line off the input's lines) and blank lines that
end the file are ignored; in JSONL, CSV and TSV blank lines are not records. Each row keeps its
line number. A bad row (a blank line of text, bad JSON, no such key, a short row, an empty or
non-string text, undecodable bytes) is one DataError naming the file and line, before anything
is embedded.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import os
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from etils import epath

from bert_jax.config.bert import BertConfig
from bert_jax.data import example_packing
from bert_jax.data.finetuning import unlabelled
from bert_jax.data.textfiles import DataError
from bert_jax.data.tokenizers import load as tokenizer_lib
from bert_jax.runtime import outputs, paths, platform, progress

POOLINGS = ("mean", "cls")
FORMATS = ("auto", "text", "jsonl", "csv", "tsv")
MIN_BUCKET = 8  # the shortest padded length of a batch
PACKED_ROW = 128  # the length of packed rows (longer when a text is)
MAX_TEXTS_PER_ROW = 32  # packed rows hold at most this many texts
PACK_WINDOW = 4096  # texts packed together (of the longest-first order)
# Texts per call by platform. On a CPU a call of 32 short texts (8 packed rows of 128) keeps its
# activations in cache: MiniLM embeds gensim's 200 polarity sentences at 199.8 sentences/s in
# calls of 32 against 166.1 in calls of 64 (2-core AMD EPYC, docs/results.md); elsewhere 64.
DEFAULT_BATCH_SIZE = {"cpu": 32, "other": 64}


@dataclasses.dataclass(frozen=True)
class Row:
    """One input text and where it is: `line` is 1-based (a CSV record's first line)."""

    line: int
    text: str


@dataclasses.dataclass(frozen=True)
class Encoder:
    """What embedding needs: the model config, the BertModel tree (pooler dropped; on the
    device when bert_jax.tools.saved_runs.load_encoder made it), the tokenizer its vocabulary ids
    came from, and where they were read (for messages)."""

    cfg: BertConfig
    params: Any
    tokenizer: tokenizer_lib.WordPieceTokenizer
    source: str


# ----- the encoder and its tokenizer ------------------------------------------------------------

def encoder_tree(params: Any) -> dict:
    """The BertModel tree of a checkpoint's params ({"bert": ..., heads} or bare), as numpy,
    without the pooler (embeddings do not use it)."""
    params = params["bert"] if "bert" in params else params
    return {k: v for k, v in jax.device_get(params).items() if k != "pooler"}


# ----- reading the texts -------------------------------------------------------------------------

def reader_format(path: str, file_format: str) -> str:
    """The `unlabelled.read_unlabelled_text` format of one of FORMATS ("text": `lines`); for
    "auto" by the extension: .jsonl, .csv, .tsv, anything else one text per line."""
    if file_format not in FORMATS:
        raise ValueError(f"format {file_format!r} is unknown; choose one of {FORMATS}")
    if file_format == "auto":
        extension = os.path.splitext(path)[1].lower()
        file_format = {".jsonl": "jsonl", ".csv": "csv", ".tsv": "tsv"}.get(extension, "text")
    return "lines" if file_format == "text" else file_format


def read_rows(path: str, file_format: str = "auto", text_column: str = "text",
              encoding: str = "utf-8") -> list[Row]:
    """Every text of `path`, in file order, with its line (format: `reader_format`; a text
    file's row i is line i + 1, its trailing blank lines ignored). A missing, empty or
    undecodable file, a bad row (a blank line of a text file with text after it, ...) or an
    empty text is one DataError naming the file (and the first bad row's line); a file without
    texts too."""
    rows = unlabelled.read_unlabelled_text(path, reader_format(path, file_format), text_column,
                                           encoding=encoding)
    faults = rows.bad + [f"{path}:{line}: the text is empty"
                         for line, example in zip(rows.lines, rows.examples)
                         if not example.text.strip()]
    if faults:
        more = f" (and {len(faults) - 1} more bad rows)" if len(faults) > 1 else ""
        raise DataError(f"{faults[0]}{more}")
    if not rows.examples:
        raise DataError(f"{path}: holds no texts")
    return [Row(line, example.text) for line, example in zip(rows.lines, rows.examples)]


# ----- embedding ---------------------------------------------------------------------------------

def token_rows(tokenizer: tokenizer_lib.WordPieceTokenizer, texts: Sequence[str],
               max_seq_len: int) -> tuple[list[list[int]], int]:
    """([CLS] pieces [SEP] ids of each text, cut to max_seq_len; the number of texts cut)."""
    if max_seq_len < 3:
        raise ValueError(f"max_seq_len={max_seq_len} leaves no room beside [CLS] and [SEP]")
    pieces = tokenizer.encode_batch(texts)
    rows = [[tokenizer.cls_id, *p[:max_seq_len - 2], tokenizer.sep_id] for p in pieces]
    return rows, sum(len(p) > max_seq_len - 2 for p in pieces)


def bucket_length(length: int, max_seq_len: int) -> int:
    """The padded length of a batch whose longest row has `length` tokens: the smallest power
    of two >= length (and >= MIN_BUCKET), at most max_seq_len."""
    return min(max(MIN_BUCKET, 1 << max(length - 1, 0).bit_length()), max_seq_len)


def plan_batches(lengths: Sequence[int], batch_size: int, max_seq_len: int
                 ) -> list[tuple[np.ndarray, int]]:
    """(row indices [<= batch_size], padded length) of each batch: rows longest first."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    return [(order[i:i + batch_size], bucket_length(int(lengths[order[i]]), max_seq_len))
            for i in range(0, len(order), batch_size)]


def packed_row_length(longest: int, max_seq_len: int) -> int:
    """Tokens per packed row: PACKED_ROW, or `longest` rounded up to a multiple of 16 when that
    is longer; at most max_seq_len."""
    return min(max(PACKED_ROW, -(-longest // 16) * 16), max_seq_len)


def plan_calls(lengths: Sequence[int], batch_size: int, max_seq_len: int, pack: bool
               ) -> list[tuple[list[list[int]], int]]:
    """The calls that embed texts of these lengths: (the text indices of each row, row length)
    per call (module docstring). Every text is in exactly one row of one call."""
    if pack:
        # First fit within windows of PACK_WINDOW texts of the longest-first order: each window
        # costs at most PACK_WINDOW * its rows, so planning stays linear in the texts, and each
        # window's rows are as long as its own longest text needs.
        lengths = np.asarray(lengths)
        order = np.argsort(-lengths, kind="stable")
        packer = example_packing.Packer(MAX_TEXTS_PER_ROW, 1, ())
        per_call = rows_per_call(batch_size, pack=True)
        calls = []
        for start in range(0, len(order), PACK_WINDOW):
            window = order[start:start + PACK_WINDOW]
            window_lengths = lengths[window]
            length = packed_row_length(int(window_lengths.max()), max_seq_len)
            rows = [[int(window[i]) for i in row]
                    for row in packer.assign(window_lengths, length)]
            calls += [(rows[i:i + per_call], length) for i in range(0, len(rows), per_call)]
        return calls
    return [([[int(i)] for i in indices], length)
            for indices, length in plan_batches(lengths, batch_size, max_seq_len)]


def rows_per_call(batch_size: int, pack: bool) -> int:
    """Rows of a full call: batch_size // 4 packed rows (at least 1), or batch_size texts."""
    return max(1, batch_size // 4) if pack else batch_size


def call_rows(texts_in_rows: int, rows_per_call: int, full_call_compiled: bool = False) -> int:
    """Rows a call computes: rows_per_call; when fewer rows are filled, the power of two that
    holds them, unless a full call of this row length has run already (full_call_compiled:
    that shape is compiled, a smaller one would compile again)."""
    if full_call_compiled:
        return rows_per_call
    return min(rows_per_call, 1 << max(texts_in_rows - 1, 0).bit_length())


def l2_normalized(vectors: jax.Array) -> jax.Array:
    """[..., H] vectors divided by their L2 norm (at least 1e-12: a zero vector stays zero)."""
    return vectors / jnp.maximum(jnp.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)


def pool(sequence_output: jax.Array, attention_mask: jax.Array, pooling: str,
         normalize: bool) -> jax.Array:
    """[B, L, H] hidden states, [B, L] mask (1 = real token) -> float32 [B, H] vectors.

    mean: sum over real tokens / their count (a row without any gives zeros); cls: position 0.
    normalize: divided by the L2 norm (at least 1e-12)."""
    hidden = sequence_output.astype(jnp.float32)
    if pooling == "cls":
        vectors = hidden[:, 0]
    else:
        mask = attention_mask.astype(jnp.float32)[:, :, None]
        vectors = jnp.sum(hidden * mask, axis=1) / jnp.maximum(jnp.sum(mask, axis=1), 1.0)
    return l2_normalized(vectors) if normalize else vectors


def pool_segments(sequence_output: jax.Array, segment_ids: jax.Array, starts: jax.Array,
                  pooling: str, normalize: bool) -> jax.Array:
    """[R, L, H] hidden states of packed rows, [R, L] segment ids (text k of a row is k + 1,
    padding 0), [R, K] each text's first position -> float32 [R, K, H] vectors (text k of row r
    at [r, k]; a slot without a text gives zeros with mean pooling and the row's first vector
    with cls pooling: callers drop such slots).

    mean: sum over the text's tokens / their count; cls: its first token. normalize: divided by
    the L2 norm (at least 1e-12)."""
    hidden = sequence_output.astype(jnp.float32)
    if pooling == "cls":
        vectors = jnp.take_along_axis(hidden, starts[:, :, None].astype(jnp.int32), axis=1)
    else:
        slots = jnp.arange(1, starts.shape[1] + 1, dtype=segment_ids.dtype)
        members = (segment_ids[:, :, None] == slots).astype(jnp.float32)  # [R, L, K]
        sums = jnp.einsum("rlk,rlh->rkh", members, hidden,
                          precision=jax.lax.Precision.HIGHEST)
        vectors = sums / jnp.maximum(jnp.sum(members, axis=1), 1.0)[:, :, None]
    return l2_normalized(vectors) if normalize else vectors


@functools.lru_cache(maxsize=32)
def embed_fn(cfg: BertConfig, pooling: str, normalize: bool):
    """make_embed_fn's function, made once per (cfg, pooling, normalize) in a process: jax
    keeps a jitted function's compiled programs, so each shape compiles once, not per call."""
    return make_embed_fn(cfg, pooling, normalize)


def make_embed_fn(cfg: BertConfig, pooling: str, normalize: bool):
    """jitted (params, input_ids [R, L], segment_ids [R, L], starts [R, K]) -> float32
    [R, K, H]: the texts of packed rows (pool_segments), one text a row when K = 1."""
    if pooling not in POOLINGS:
        raise ValueError(f"pooling {pooling!r} is unknown; choose one of {POOLINGS}")
    from bert_jax.model import families
    model = families.of(cfg).encoder(cfg, add_pooler=False)  # BertModel, ModernBertModel

    def embed_fn(params, input_ids, segment_ids, starts):
        real = (segment_ids > 0).astype(jnp.int32)
        # One text a row needs no segments: a plain padding mask keeps the attention kernels
        # that take no segment ids (cuDNN) available.
        packed = starts.shape[1] > 1
        out = model.apply({"params": params}, input_ids, jnp.zeros_like(input_ids), real, True,
                          segment_ids=segment_ids if packed else None)
        return pool_segments(out.sequence_output, segment_ids, starts, pooling, normalize)

    return jax.jit(embed_fn)


def _call_arrays(rows: Sequence[list[int]], texts_in_rows: Sequence[list[int]], num_rows: int,
                 length: int, slots: int, pad_id: int) -> tuple[np.ndarray, ...]:
    """input_ids, segment_ids [num_rows, length] and starts [num_rows, slots] int32 of a call:
    row r holds the texts texts_in_rows[r] one after another (segments 1, 2, ...)."""
    ids = np.full((num_rows, length), pad_id, np.int32)
    segments = np.zeros((num_rows, length), np.int32)
    starts = np.zeros((num_rows, slots), np.int32)
    for r, texts in enumerate(texts_in_rows):
        at = 0
        for k, index in enumerate(texts):
            tokens = rows[index]
            ids[r, at:at + len(tokens)] = tokens
            segments[r, at:at + len(tokens)] = k + 1
            starts[r, k] = at
            at += len(tokens)
    return ids, segments, starts


def default_batch_size() -> int:
    """Texts per call when none is given: DEFAULT_BATCH_SIZE of the platform JAX runs on."""
    return DEFAULT_BATCH_SIZE.get(platform.current(), DEFAULT_BATCH_SIZE["other"])


def embed(encoder: Encoder, texts: Sequence[str], pooling: str = "mean", normalize: bool = False,
          batch_size: Optional[int] = None, max_seq_len: Optional[int] = None,
          progress: bool = False, pack: bool = True) -> np.ndarray:
    """float32 [len(texts), hidden_size]: one vector per text, in the order of `texts`.

    batch_size: texts per call (default: `default_batch_size()`). max_seq_len: tokens per row,
    [CLS] and [SEP] included (default and at most the model's max_sequence_length:
    max_position_embeddings, less RoBERTa's position offset); longer texts are cut (logged).
    progress: a tqdm bar in rows/s. pack: several texts a row (module docstring).
    """
    limit = encoder.cfg.max_sequence_length
    max_seq_len = max_seq_len or limit
    batch_size = default_batch_size() if batch_size is None else batch_size
    if not 0 < max_seq_len <= limit or batch_size <= 0:
        raise ValueError(f"max_seq_len={max_seq_len} must be in 1..{limit} (the model's "
                         f"max_sequence_length) and batch_size={batch_size} positive")
    rows, cut = token_rows(encoder.tokenizer, texts, max_seq_len)
    if cut:
        logging.warning("%d of %d texts are longer than max_seq_len=%d tokens and were cut",
                        cut, len(texts), max_seq_len)
    out = np.zeros((len(rows), encoder.cfg.hidden_size), np.float32)
    if not rows:
        return out
    function = embed_fn(encoder.cfg, pooling, normalize)
    params = jax.device_put(encoder.params)  # no copy for load_encoder's (on device already)
    full_call = rows_per_call(batch_size, pack)
    slots = MAX_TEXTS_PER_ROW if pack else 1
    bar = _progress_bar(len(rows)) if progress else None
    full_lengths = set()  # row lengths whose full call has run: (full_call, length) compiled
    for texts_in_rows, length in plan_calls([len(r) for r in rows], batch_size, max_seq_len,
                                            pack):
        num_rows = call_rows(len(texts_in_rows), full_call, length in full_lengths)
        if num_rows == full_call:
            full_lengths.add(length)
        arrays = _call_arrays(rows, texts_in_rows, num_rows, length, slots,
                              encoder.tokenizer.pad_id)
        vectors = np.asarray(function(params, *arrays))
        done = 0
        for r, texts_of_row in enumerate(texts_in_rows):
            out[texts_of_row] = vectors[r, :len(texts_of_row)]
            done += len(texts_of_row)
        if bar is not None:
            bar.update(done)
    if bar is not None:
        bar.close()
    return out


def _progress_bar(total: int):
    return progress.bar(total=total, desc="embedding", unit="rows")


# ----- writing -----------------------------------------------------------------------------------

def output_paths(prefix: str) -> tuple[str, str]:
    """(PREFIX.npy, PREFIX.index.jsonl)."""
    return f"{prefix}.npy", f"{prefix}.index.jsonl"


def write_outputs(prefix: str, vectors: np.ndarray, rows: Sequence[Row]) -> tuple[str, str]:
    """PREFIX.npy (float32 [N, H]) and PREFIX.index.jsonl (line i: {"index": i, "line": the
    input line, "text": ...}); each is written aside, then renamed (the .npy first)."""
    if len(vectors) != len(rows):
        raise ValueError(f"{len(vectors)} vectors for {len(rows)} rows")
    files = output_paths(prefix)
    array = io.BytesIO()
    np.save(array, np.asarray(vectors, np.float32))
    contents = [array.getvalue(), "".join(
        json.dumps({"index": index, "line": row.line, "text": row.text}, ensure_ascii=False)
        + "\n" for index, row in enumerate(rows)).encode("utf-8")]
    if paths.is_remote(prefix):  # gs://: one object write each, whole or not at all
        for path, content in zip(files, contents):
            epath.Path(path).write_bytes(content)
        return files
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    temporary = []
    try:
        for path, content in zip(files, contents):
            outputs.clear_leftovers(path)  # a killed earlier write's partial file: named, removed
            temporary.append(outputs.temporary_beside(path))
            with open(temporary[-1], "wb") as f:
                f.write(content)
    except BaseException:
        for path in temporary:
            if os.path.exists(path):
                os.remove(path)
        raise
    for source, target in zip(temporary, files):
        os.replace(source, target)
    return files
