r"""Time to the first pre-training batch on a corpus of a few long documents.

    python benchmarks/first_batch.py --output_dir=/tmp/first_batch            # 4 files, 9 MB
    python benchmarks/first_batch.py --output_dir=/tmp/first_batch --profile  # + cProfile

The corpus (`write_corpus`, written once into <output_dir>/corpus and reused) has the shape that
made the first step of compare_pretraining.py wait a minute: `--files` plain-text files,
`--megabytes` in all, one short paragraph a line and no blank line, so that under the default
document_delimiter="blank_line" each file is ONE document of millions of characters. Words are
drawn from a fixed made-up vocabulary with Zipf-like frequencies, in sentences and paragraphs of
natural lengths.

Outside the clock: preparing the corpus (bert_jax.data.corpora.catalog) and a `--vocab_size`
WordPiece vocabulary trained on a sample of it. On the clock, in this process:
`pretraining.make_iterator` (the train split, `--batch_size` rows of 128 tokens) and its first
`next()`, as a training run's first step needs them. Printed, as the last stdout line, JSON: seconds
to the first batch, the characters the tokenizer was given before it (all threads: the read-ahead
ones and the packer) and the length of the longest training document. --profile prints the 25
functions of largest cumulative time (cProfile sees the main thread only: the read-ahead threads'
tokenizing shows as waiting).

Measured 2026-12-03 on the 2-core machine with 5 other processes running (single runs, so the
times are indicative), the default 4 files of 2.25 MB: before documents were tokenized by windows
(the tree at 52d7ab0), 19.56 s to the first batch, 20.25M characters tokenized by then (the
read-ahead threads tokenized whole 2.25 MB documents, 32 of them ahead, and starved the main
thread: 8.4 s of the packer's own time, 3.5 s to mask 32 rows); after, 0.38 s and 130k
characters. Through compare_pretraining.py (tiny, 8,192-piece vocabulary asked, 3,865 learned, a
30 s budget, load average 8-9): ours_classic's first step after 135.8 s before, 33.3 s and 42.7 s
after (two runs); hf_flax 35.0 s, hf_torch 11.4 s in the run of the 33.3 s.
"""

from __future__ import annotations

import os

import numpy as np

SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "pe", "da", "gu", "fo", "ri", "zu",
             "an", "el", "or", "ti", "qua", "ber", "sin", "mon", "tra", "ex")


def made_up_words(count: int, seed: int) -> list[str]:
    """`count` distinct made-up words of 1-4 syllables."""
    rng = np.random.default_rng(seed)
    words: dict[str, None] = {}
    while len(words) < count:
        size = int(rng.integers(1, 5))
        words["".join(SYLLABLES[i] for i in rng.integers(0, len(SYLLABLES), size))] = None
    return list(words)


def paragraphs(total_chars: int, rng: np.random.Generator, words: list[str]) -> list[str]:
    """Paragraphs of 2-6 sentences of 6-24 words, Zipf-like word frequencies, about
    `total_chars` characters in all (each without a line break)."""
    frequency = 1.0 / np.arange(1, len(words) + 1)
    frequency /= frequency.sum()
    out, size = [], 0
    while size < total_chars:
        sentences = []
        for _ in range(int(rng.integers(2, 7))):
            chosen = rng.choice(len(words), size=int(rng.integers(6, 25)), p=frequency)
            sentence = " ".join(words[i] for i in chosen)
            sentences.append(sentence[0].upper() + sentence[1:] + ".")
        out.append(" ".join(sentences))
        size += len(out[-1]) + 1
    return out


def write_corpus(folder: str, files: int = 4, megabytes: float = 9.0, seed: int = 0
                 ) -> list[str]:
    """Writes files `corpus_<i>.txt` of about megabytes / files MB each: one paragraph a line, no
    blank line. Returns their paths. The same arguments write the same bytes."""
    os.makedirs(folder, exist_ok=True)
    words = made_up_words(3000, seed)
    rng = np.random.default_rng([seed, 1])
    paths = []
    for index in range(files):
        path = os.path.join(folder, f"corpus_{index}.txt")
        lines = paragraphs(int(megabytes * 1e6 / files), rng, words)
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        paths.append(path)
    return paths


def main(argv):
    del argv
    import cProfile
    import json
    import pstats
    import threading
    import time

    from bert_jax.data.corpora import catalog as corpora
    from bert_jax.data.pretraining import pipeline as pretraining
    from bert_jax.data.tokenizers import load as tok
    from bert_jax.recipes.inputs import schema_data_config

    output_dir = os.path.abspath(FLAGS.output_dir)
    corpus_dir = os.path.join(output_dir, "corpus")
    if not os.path.isdir(corpus_dir):
        write_corpus(corpus_dir, FLAGS.files, FLAGS.megabytes)
    corpus = f"text:{corpus_dir}/*.txt"
    data_dir = os.path.join(output_dir, "data")
    source = corpora.load_source(corpus, "train", data_dir)
    longest = max(len(corpora.document_text(source[i])) for i in range(len(source)))
    vocab_dir = os.path.join(output_dir, f"vocab_{FLAGS.vocab_size}")
    vocab_path = os.path.join(vocab_dir, "vocab.txt")
    if not os.path.isfile(vocab_path):
        sample = corpora.document_text(source[0])[:2_000_000].split("\n")
        tok.train_wordpiece(sample, FLAGS.vocab_size, vocab_dir)

    given = []  # characters handed to the tokenizer, by any thread
    lock = threading.Lock()
    encode = tok.WordPieceTokenizer.encode

    def counting_encode(self, text):
        with lock:
            given.append(len(text))
        return encode(self, text)

    tok.WordPieceTokenizer.encode = counting_encode
    cfg = schema_data_config(corpus=corpus, data_dir=data_dir, vocab_path=vocab_path,
                             seq_len=128)
    profile = cProfile.Profile() if FLAGS.profile else None
    start = time.perf_counter()
    if profile:
        profile.enable()
    iterator = pretraining.make_iterator(cfg, "train", global_batch_size=FLAGS.batch_size)
    batch = next(iterator)
    if profile:
        profile.disable()
    seconds = time.perf_counter() - start
    with lock:
        chars = sum(given)
    iterator.close()
    if profile:
        pstats.Stats(profile).sort_stats("cumulative").print_stats(25)
    print(json.dumps({"seconds_to_first_batch": round(seconds, 3),
                      "chars_tokenized_before_it": chars, "longest_document_chars": longest,
                      "train_documents": len(source), "rows": int(batch["input_ids"].shape[0])}))


if __name__ == "__main__":
    from absl import app, flags

    FLAGS = flags.FLAGS
    flags.DEFINE_string("output_dir", None, "Where the corpus, its preparation and the "
                        "vocabulary go (reused by later runs).", required=True)
    flags.DEFINE_integer("files", 4, "Files of the generated corpus.")
    flags.DEFINE_float("megabytes", 9.0, "Size of the generated corpus, all files together.")
    flags.DEFINE_integer("vocab_size", 8192, "WordPiece vocabulary size.")
    flags.DEFINE_integer("batch_size", 32, "Rows of 128 tokens per batch.")
    flags.DEFINE_bool("profile", False, "Print a cProfile of the timed part.")
    app.run(main)
