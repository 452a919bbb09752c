"""What every implementation shares, made once per comparison before any worker starts.

    prepare_vocabulary   the corpus prepared (bert_jax.data.corpora.catalog) and a WordPiece
                         vocabulary trained on its train split by bert_jax's trainer, cached
                         under data_dir
    write_heldout        the held-out rows (benchmarks/peers/heldout.py): bert_jax's pipeline on
                         the held-out split, masked once with HELDOUT_SEED at 15%
    write_blocks         the peers' 128-token training blocks (benchmarks/peers/mlm_blocks.py)

Nothing here runs on an implementation's clock.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np

from benchmarks.peers import heldout as heldout_lib
from benchmarks.peers import mlm_blocks

SEQ_LEN = 128
MASK_RATE = 0.15
MAX_PREDICTIONS = 20  # ceil((128 - 2) x 0.15) = 19, rounded up as the project's configs do
HELDOUT_SEED = 31337  # the held-out masks; no run's seed


def data_config(corpus: str, data_dir: str, vocab_path: str):
    """The PretrainingDataConfig of the held-out rows: the schema's defaults
    (bert_jax.recipes.inputs.schema_data_config; its text options are those bert_jax's recipe
    also uses, so the splits are the recipe's) with these fields."""
    from bert_jax.recipes.inputs import schema_data_config  # pylint: disable=import-outside-toplevel
    return schema_data_config(
        corpus=corpus, data_dir=data_dir, vocab_path=vocab_path, seq_len=SEQ_LEN,
        max_predictions=MAX_PREDICTIONS, mask_rate=MASK_RATE, seed=HELDOUT_SEED)


def _text_options(corpus: str) -> dict:
    from bert_jax.data.corpora import catalog as corpora  # pylint: disable=import-outside-toplevel
    if not corpus.startswith(corpora.TEXT_PREFIX):
        return {}
    return data_config(corpus, "", "").text_options()


def prepare_vocabulary(corpus: str, data_dir: str, vocab_size: int) -> str:
    """vocab.txt of a vocabulary of at most vocab_size pieces trained on the train split (once:
    a folder keyed by the prepared corpus and the size is reused)."""
    from bert_jax.data.corpora import catalog as corpora
    from bert_jax.data.pretraining import pipeline as pretraining
    from bert_jax.data.tokenizers import load as tokenizer  # pylint: disable=import-outside-toplevel

    if corpus == corpora.DEMO:
        return pretraining.prepare_demo(data_dir, vocab_size)
    builder = corpora.prepare(corpus, data_dir, **_text_options(corpus))
    key = hashlib.sha1(os.fspath(builder.data_dir).encode("utf-8")).hexdigest()[:12]
    vocab_dir = os.path.join(os.path.expanduser(data_dir), "compare_vocab", f"{key}_{vocab_size}")
    vocab_path = os.path.join(vocab_dir, "vocab.txt")
    if not os.path.isfile(vocab_path):
        source = corpora.load_source(corpus, "train", data_dir, **_text_options(corpus))
        tokenizer.train_wordpiece(corpora.SourceTexts(source), vocab_size, vocab_dir)
    return vocab_path


def write_heldout(corpus: str, data_dir: str, vocab_path: str, path: str,
                  max_rows: int) -> dict:
    """Writes the held-out rows (at most max_rows; 0: the whole split) to `path` (.npz) and
    returns {"path", "sha256", "rows", "masked_tokens", "mask_fraction"}."""
    # pylint: disable-next=import-outside-toplevel
    from bert_jax.data import batches, row_layout
    from bert_jax.data.pretraining import pipeline as pretraining

    iterator = pretraining.make_iterator(
        data_config(corpus, data_dir, vocab_path), split="validation",
        global_batch_size=heldout_lib.EVAL_BATCH_ROWS, num_epochs=1)
    kept: list[dict[str, np.ndarray]] = []
    count = 0
    for batch in iterator:
        real = batch.pop("example_weights", np.ones(len(batch["input_ids"]), np.float32)) > 0
        kept.append({k: v[real] for k, v in batch.items()})
        count += int(real.sum())
        if max_rows and count >= max_rows:
            break
    iterator.close()
    rows = {k: np.concatenate([b[k] for b in kept]) for k in kept[0]}
    num_rows = min(count, max_rows) if max_rows else count
    rows = {k: v[:num_rows] for k, v in rows.items()}
    padded = batches.pad_rows(rows, row_layout.round_up(num_rows, heldout_lib.EVAL_BATCH_ROWS))
    heldout_lib.save(path, padded, num_rows)
    loaded = heldout_lib.load(path)
    return {"path": os.path.abspath(path), "sha256": heldout_lib.sha256(path), "rows": num_rows,
            "masked_tokens": loaded.num_masked, "mask_fraction": mask_fraction(loaded, vocab_path),
            "seed": HELDOUT_SEED}


def mask_fraction(rows: heldout_lib.Heldout, vocab_path: str) -> float:
    """Masked tokens / maskable tokens (all but [PAD] [UNK] [CLS] [SEP] [MASK] of the rows as
    they were before masking) of the held-out rows."""
    arrays = rows.arrays
    original = arrays["input_ids"].copy()
    row, slot = np.nonzero(arrays["masked_weights"] > 0)
    original[row, arrays["masked_positions"][row, slot]] = arrays["masked_ids"][row, slot]
    special = mlm_blocks.Vocabulary(vocab_path).special_ids
    maskable = int((~np.isin(original, special)).sum())
    return rows.num_masked / max(maskable, 1)


def write_blocks(corpus: str, data_dir: str, vocab_path: str, path: str) -> dict:
    """Writes the peers' training blocks [N, SEQ_LEN] int32 (.npy); returns {"path", "blocks"}."""
    from bert_jax.data.corpora import catalog as corpora  # pylint: disable=import-outside-toplevel

    source = corpora.load_source(corpus, "train", data_dir, **_text_options(corpus))
    blocks = mlm_blocks.make_blocks(corpora.SourceTexts(source), vocab_path, SEQ_LEN)
    np.save(path, blocks)
    return {"path": os.path.abspath(path), "blocks": len(blocks)}
