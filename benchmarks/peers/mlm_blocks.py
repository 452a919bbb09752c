"""The Hugging Face peers' training data, made the way transformers' run_mlm examples make it.

    texts -> BertTokenizerFast (the shared vocab.txt): [CLS] text [SEP] per document
          -> all documents concatenated, cut into blocks of seq_len tokens, the remainder dropped
    each epoch: the blocks in a new seeded order, batches of batch_size (a last partial one
    dropped)
    each batch: dynamic masking, drawn anew every time a block is used: every token but the
      special ones is chosen with probability 0.15; of the chosen, 80% become [MASK], 10% a
      token drawn uniformly from the vocabulary, 10% stay; labels are the original ids at the
      chosen positions and IGNORED_LABEL elsewhere

Blocks are made once per comparison, before any clock runs (run_mlm_flax.py does it once too, in
`datasets.map`), and shared by both peers. Masking and batching run inside each peer's training
loop, on its clock. numpy only at training time (the tokenizer is imported by `make_blocks`).
"""

from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np

from benchmarks.peers.heldout import IGNORED_LABEL

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def group_texts(token_lists: Iterable[list[int]], seq_len: int) -> np.ndarray:
    """Concatenated ids cut into [num_blocks, seq_len] int32; the last partial block dropped."""
    ids = np.fromiter((i for tokens in token_lists for i in tokens), np.int32)
    usable = len(ids) // seq_len * seq_len
    return ids[:usable].reshape(-1, seq_len)


def make_blocks(texts: Iterable[str], vocab_path: str, seq_len: int, lowercase: bool = True,
                chunk: int = 1000) -> np.ndarray:
    """[num_blocks, seq_len] int32 blocks of `texts` tokenized with special tokens.

    ValueError if the texts do not fill one block."""
    import transformers  # pylint: disable=import-outside-toplevel

    tokenizer = transformers.BertTokenizerFast(vocab_file=vocab_path, do_lower_case=lowercase,
                                               model_max_length=1 << 30)

    def tokenized() -> Iterator[list[int]]:
        batch = []
        for text in texts:
            batch.append(text)
            if len(batch) == chunk:
                yield from tokenizer(batch, add_special_tokens=True)["input_ids"]
                batch = []
        if batch:
            yield from tokenizer(batch, add_special_tokens=True)["input_ids"]

    blocks = group_texts(tokenized(), seq_len)
    if len(blocks) == 0:
        raise ValueError(f"the training texts hold fewer than {seq_len} tokens: no block to "
                         "train on")
    return blocks


class Vocabulary:
    """What masking needs of vocab.txt (one token a line, the line number its id)."""

    def __init__(self, vocab_path: str):
        with open(vocab_path, encoding="utf-8") as f:
            tokens = [line.rstrip("\n") for line in f]
        index = {token: i for i, token in enumerate(tokens)}
        self.size = len(tokens)
        self.mask_id = index["[MASK]"]
        self.special_ids = np.asarray(sorted(index[t] for t in SPECIAL_TOKENS), np.int32)


def mask_tokens(blocks: np.ndarray, vocab: Vocabulary, rng: np.random.Generator,
                rate: float = 0.15) -> tuple[np.ndarray, np.ndarray]:
    """(input_ids, labels), both [B, L]: the dynamic 80/10/10 masking of the module docstring."""
    chosen = (rng.random(blocks.shape) < rate) & ~np.isin(blocks, vocab.special_ids)
    labels = np.where(chosen, blocks, IGNORED_LABEL).astype(np.int32)
    draw = rng.random(blocks.shape)
    inputs = blocks.copy()
    inputs[chosen & (draw < 0.8)] = vocab.mask_id
    randomised = chosen & (draw >= 0.8) & (draw < 0.9)
    inputs[randomised] = rng.integers(0, vocab.size, int(randomised.sum()))
    return inputs, labels


class EpochBatches:
    """Endless masked batches of `batch_size` blocks: a new seeded order each epoch."""

    def __init__(self, blocks: np.ndarray, batch_size: int, vocab: Vocabulary, seed: int):
        if len(blocks) < batch_size:
            raise ValueError(f"{len(blocks)} blocks of training text cannot fill one batch of "
                             f"{batch_size}; lower the batch size or use a larger corpus")
        self.blocks, self.batch_size, self.vocab = blocks, batch_size, vocab
        self.rng = np.random.default_rng(seed)
        self.order: list[np.ndarray] = []

    def __iter__(self) -> EpochBatches:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        """input_ids, attention_mask, token_type_ids, labels: [batch_size, seq_len]."""
        if not self.order:
            permutation = self.rng.permutation(len(self.blocks))
            usable = len(permutation) // self.batch_size * self.batch_size
            self.order = list(permutation[:usable].reshape(-1, self.batch_size))[::-1]
        input_ids, labels = mask_tokens(self.blocks[self.order.pop()], self.vocab,
                                        self.rng)
        return {"input_ids": input_ids, "attention_mask": np.ones_like(input_ids),
                "token_type_ids": np.zeros_like(input_ids), "labels": labels}


class BlocksPeer:
    """What both Hugging Face peers start from: the run's spec and recipe (`train`), the model's
    transformers.BertConfig, the shared vocabulary and the shared blocks (memory-mapped)."""

    def __init__(self, spec: dict):
        import transformers  # pylint: disable=import-outside-toplevel (heavy; peers only)
        self.spec, self.train = spec, spec["train"]
        self.rows_per_step = self.train["batch_size"]
        self.hf_config = transformers.BertConfig(**spec["hf_config"])
        self.vocab = Vocabulary(spec["vocab_path"])
        self.blocks = np.load(spec["blocks_path"], mmap_mode="r")
