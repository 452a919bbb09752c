"""The "text:GLOB" corpus: local UTF-8 plain-text files as a TFDS builder (`TextFiles`).

The files matched by GLOB ("**" recurses) are read in sorted order; documents are separated by
blank lines (default), or are one per file or one per line (DOCUMENT_DELIMITERS,
`read_text_documents`). The prepared copy is keyed by the glob, the other options and the matched
files' sizes and times (`text_files_config`): adding or editing a file prepares a new copy, never
a stale one. The document delimiter is recorded with the copy and checked: asking for another one
is an error naming both (`check_document_delimiter`), not a second copy prepared without a word.
The train/validation split is `bert_jax.data.corpora.splits`'.

Bad input (decided at preparation time, before any training starts):
  - a glob matching no file, or files holding no document at all: ValueError naming the glob;
  - an empty file: skipped with a warning naming it;
  - a file of many lines and no blank line under document_delimiter="blank_line" (one document
    for the whole file, likely one paragraph or document a line): a warning naming it and
    document_delimiter="line";
  - a file that is not valid UTF-8: ValueError naming the file and byte offset (default), or,
    with `invalid_utf8="skip"`, the file is skipped with a warning naming it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os

import tensorflow_datasets as tfds

from bert_jax.data.corpora import files
from bert_jax.data.corpora.splits import keyed_examples, split_documents, text_features
from bert_jax.runtime import progress

DOCUMENT_DELIMITERS = ("blank_line", "file", "line")
# A file of at least this many lines that is one document under "blank_line" gets a warning.
_LINES_OF_A_SUSPECT_DOCUMENT = 100


def matched_files(pattern: str) -> list[str]:
    """Sorted files matched by `pattern` ("**" recurses); ValueError naming the glob if none."""
    return files.matched_files(pattern, what="text corpus")


def check_delimiter(document_delimiter: str) -> None:
    """ValueError naming the choices unless `document_delimiter` is one of DOCUMENT_DELIMITERS."""
    if document_delimiter not in DOCUMENT_DELIMITERS:
        raise ValueError(f"document_delimiter={document_delimiter!r}; choose one of "
                         f"{', '.join(DOCUMENT_DELIMITERS)}")


def read_text_documents(pattern: str, document_delimiter: str = "blank_line",
                        invalid_utf8: str = "fail") -> list[str]:
    """All documents of the files matched by `pattern`, in sorted file order.

    document_delimiter: "blank_line" (documents separated by blank lines; a file without one is
      a single document), "file" or "line".
    invalid_utf8: "fail" (ValueError naming the file) or "skip" (warning naming the file).
    """
    check_delimiter(document_delimiter)
    if invalid_utf8 not in ("fail", "skip"):
        raise ValueError(f"invalid_utf8={invalid_utf8!r}; choose 'fail' or 'skip'")
    documents = []
    for path in progress.bar(matched_files(pattern), desc="corpus: reading files", unit="file"):
        with open(path, "rb") as f:
            raw = f.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            message = f"{path} is not valid UTF-8 (byte {e.start}: {e.reason})"
            if invalid_utf8 == "fail":
                raise ValueError(message + "; fix the file or set invalid_utf8='skip'") from e
            logging.warning("skipping %s", message)
            continue
        found = documents_in(text, document_delimiter)
        if not found:
            logging.warning("skipping %s: it holds no text", path)
        elif document_delimiter == "blank_line" and len(found) == 1:
            _warn_if_lines_are_documents(path, found[0])
        documents.extend(found)
    if not documents:
        raise ValueError(f"text corpus: the files matched by {pattern!r} hold no text")
    return documents


def _warn_if_lines_are_documents(path: str, document: str) -> None:
    """A file of many lines without a blank line is one document under "blank_line": say so, in
    case its lines are paragraphs or documents of their own."""
    lines = document.count("\n") + 1
    if lines >= _LINES_OF_A_SUSPECT_DOCUMENT:
        logging.warning("%s holds no blank line: under document_delimiter='blank_line' its %d "
                        "lines are ONE document; if each line is a paragraph or a document of "
                        "its own, set document_delimiter='line'", path, lines)


def documents_in(text: str, document_delimiter: str) -> list[str]:
    text = text.replace("\r\n", "\n").lstrip("\ufeff")
    if document_delimiter == "file":
        chunks = [text]
    elif document_delimiter == "line":
        chunks = text.split("\n")
    else:
        chunks, current = [], []
        for line in text.split("\n"):
            if line.strip():
                current.append(line)
            elif current:
                chunks.append("\n".join(current))
                current = []
        chunks.append("\n".join(current))
    return [chunk.strip() for chunk in chunks if chunk.strip()]


@dataclasses.dataclass
class TextFilesConfig(tfds.core.BuilderConfig):
    """Which files make the corpus; its name hashes them and the options but the document
    delimiter (`text_files_config`), which is recorded with the prepared copy instead."""

    pattern: str = ""
    document_delimiter: str = "blank_line"
    invalid_utf8: str = "fail"
    validation_fraction: float = 0.02


def text_files_config(pattern: str, document_delimiter: str = "blank_line",
                      invalid_utf8: str = "fail",
                      validation_fraction: float = 0.02) -> TextFilesConfig:
    """A config whose name identifies the glob, invalid_utf8, validation_fraction and the matched
    files (paths, sizes, modification times): corpora never collide in data_dir, and a changed
    file set is prepared anew (in a new folder) instead of being served stale. The document
    delimiter is left out of the name: a data_dir holds one preparation of a set of files, with
    the delimiter it was made with recorded (`check_document_delimiter`)."""
    check_delimiter(document_delimiter)
    pattern = os.path.abspath(os.path.expanduser(pattern))
    files = [(path, os.stat(path).st_size, os.stat(path).st_mtime_ns)
             for path in matched_files(pattern)]
    identity = f"{pattern}|{invalid_utf8}|{validation_fraction!r}|{files}"
    name = "g" + hashlib.sha1(identity.encode("utf-8")).hexdigest()[:16]
    return TextFilesConfig(name=name, description=f"text files {pattern}", pattern=pattern,
                           document_delimiter=document_delimiter, invalid_utf8=invalid_utf8,
                           validation_fraction=validation_fraction)


class TextFiles(tfds.core.GeneratorBasedBuilder):
    """Documents of local plain-text files (one builder config per glob and options)."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self) -> tfds.core.DatasetInfo:
        # metadata.json of the prepared copy: what check_document_delimiter reads back.
        metadata = tfds.core.MetadataDict(
            document_delimiter=self.builder_config.document_delimiter)
        return tfds.core.DatasetInfo(builder=self, description=self.builder_config.description,
                                     features=text_features(), metadata=metadata)

    def _split_generators(self, dl_manager):
        cfg = self.builder_config
        documents = read_text_documents(cfg.pattern, cfg.document_delimiter, cfg.invalid_utf8)
        train, validation = split_documents(documents, cfg.validation_fraction,
                                             f"the files matched by {cfg.pattern!r}")
        return {"train": self._generate_examples(train, "train"),
                "validation": self._generate_examples(validation, "validation")}

    def _generate_examples(self, documents, split):
        yield from keyed_examples(documents, split)


def check_document_delimiter(builder: TextFiles, corpus: str) -> None:
    """ValueError, one line naming both values, when the prepared copy of a "text:GLOB" corpus
    was made with another document_delimiter than `builder`'s config asks for: its documents
    are not the ones asked for, and preparing a second copy without a word would hide that."""
    asked = builder.builder_config.document_delimiter
    recorded = (builder.info.metadata or {}).get("document_delimiter")
    if recorded is not None and recorded != asked:
        raise ValueError(
            f"corpus {corpus!r} was prepared in {builder.data_dir} with "
            f"document_delimiter={recorded!r}, but {asked!r} is asked for: set "
            f"data.document_delimiter={recorded!r} to use it (prepare_data.py: "
            f"--document_delimiter={recorded}), or remove that folder (or use another data_dir) "
            "to prepare the corpus anew")
