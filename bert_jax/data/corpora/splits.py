"""What the locally built corpora share: the stable train/validation split of their documents,
and their documents as TFDS examples.

`split_documents` sends a document to validation when a stable hash of its text (`unit_hash`,
uniform in [0, 1)) falls below `validation_fraction`, so adding documents never moves existing
ones between splits; validation always gets at least one document, and a corpus of fewer than two
documents, or one the fraction leaves no training document, is a ValueError naming it.
`keyed_examples` yields the (key, {"text": document}) examples of a split with a progress bar;
`text_features` is their TFDS feature spec. Used by the builders of
`bert_jax.data.corpora.text_files` and `bert_jax.data.corpora.demo`.
"""

from __future__ import annotations

import hashlib
from typing import Iterator, Sequence

import tensorflow_datasets as tfds

from bert_jax.runtime import progress


def unit_hash(text: str) -> float:
    """A stable hash of the text, uniform in [0, 1): the train/validation split compares it with
    validation_fraction."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64


def split_documents(documents: Sequence[str], validation_fraction: float, origin: str):
    """(train, validation) lists; validation gets at least the document of lowest hash."""
    if len(documents) < 2:
        raise ValueError(f"{origin} holds {len(documents)} document(s); a train and a validation "
                         "split need at least 2")
    hashes = [unit_hash(doc) for doc in documents]
    held_out = [h < validation_fraction for h in hashes]
    if not any(held_out):
        held_out[hashes.index(min(hashes))] = True
    train = [doc for doc, out in zip(documents, held_out) if not out]
    validation = [doc for doc, out in zip(documents, held_out) if out]
    if not train:
        raise ValueError(f"{origin}: validation_fraction={validation_fraction} leaves no training "
                         "document")
    return train, validation


def keyed_examples(documents: Sequence[str], split: str) -> Iterator[tuple[str, dict[str, str]]]:
    """(key, example) of each document, with a progress bar of the documents written."""
    written = progress.bar(documents, desc=f"corpus: writing {split}", unit="doc")
    for index, doc in enumerate(written):
        yield f"{index:09d}", {"text": doc}


def text_features() -> tfds.features.FeaturesDict:
    return tfds.features.FeaturesDict({"text": tfds.features.Text()})
