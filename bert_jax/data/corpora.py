"""Text corpora as TFDS datasets stored in `array_record` files, read by random access.

Three kinds of corpus, named by one string (`load_source(corpus, split, data_dir)`):

  "demo"                 real English text shipped by the `gensim` wheel (gensim/test/test_data/):
                         106 Wikipedia articles of a shortened 2017 dump (wiki markup stripped with
                         mwparserfromhell, redirects and non-article pages skipped) and the 300
                         news stories of the Lee corpus; about 3 MB of text, prepared in ~10 s.
  "text:GLOB"            local UTF-8 plain-text files matched by GLOB ("text:/data/books/*.txt");
                         documents are separated by blank lines (default), or one per file or one
                         per line (`TextFilesConfig.document_delimiter`). The prepared copy is
                         keyed by the glob, the other options and the matched files' sizes and
                         times: adding or editing a file prepares a new copy, never a stale one.
                         The document delimiter is recorded with the copy and checked: asking for
                         another one is an error naming both (`check_document_delimiter`), not a
                         second copy prepared without a word.
  any other name         a TFDS catalog name ("wikipedia/20230601.en") passed through to TFDS, which
                         downloads and prepares it (network needed; field "text" by default).

Each corpus is prepared once under `data_dir` and then read with `as_data_source()`, which needs no
TensorFlow. Every example is a dict with a "text" field (bytes). The split into "train" and
"validation" is stable: a document goes to validation when a hash of its text falls below
`validation_fraction`, so adding files never moves existing documents between splits.

Preparing shows progress bars (files read, articles parsed, documents written per split; TFDS's
own bars for a catalog dataset's download) under the rules of `bert_jax.progress`: process 0, on a
terminal or with BERT_JAX_PROGRESS=1.

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

import bz2
import contextlib
import dataclasses
import fcntl
import glob as globlib
import hashlib
import importlib.util
import json
import logging
import os
import socket
import time
import xml.etree.ElementTree as ElementTree
from typing import Any, Iterator, Protocol, Sequence

import tensorflow_datasets as tfds
from etils import epath

from bert_jax import paths, progress

DEMO = "demo"
TEXT_PREFIX = "text:"
LOCK_FILE = ".bert_jax.lock"  # in data_dir, held while a corpus or vocabulary is prepared
DOCUMENT_DELIMITERS = ("blank_line", "file", "line")
# A file of at least this many lines that is one document under "blank_line" gets a warning.
_LINES_OF_A_SUSPECT_DOCUMENT = 100


class TextSource(Protocol):
    """Random access to documents: `len(source)`, `source[i] -> {"text": bytes, ...}`."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Any: ...


def document_text(record: Any, text_key: str = "text") -> str:
    """The text of one record of a source: a dict with `text_key`, bytes or str."""
    if isinstance(record, dict):
        if text_key not in record:
            raise KeyError(f"record has no field {text_key!r}; its fields are {sorted(record)}")
        record = record[text_key]
    return record.decode("utf-8") if isinstance(record, bytes) else str(record)


class SourceTexts:
    """The texts of source[0], ..., source[count - 1], in order; each iteration reads the source
    anew, so a consumer that passes over the texts twice (`wordpiece_training.train_wordpiece`)
    needs no copy of them in memory."""

    def __init__(self, source: TextSource, text_key: str = "text", count: int | None = None):
        self.source, self.text_key = source, text_key
        self.count = len(source) if count is None else min(count, len(source))

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[str]:
        return (document_text(self.source[i], self.text_key) for i in range(self.count))


def _unit_hash(text: str) -> float:
    """A stable hash of the text, uniform in [0, 1): the train/validation split compares it with
    validation_fraction."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64


def _split_documents(documents: Sequence[str], validation_fraction: float, origin: str):
    """(train, validation) lists; validation gets at least the document of lowest hash."""
    if len(documents) < 2:
        raise ValueError(f"{origin} holds {len(documents)} document(s); a train and a validation "
                         "split need at least 2")
    hashes = [_unit_hash(doc) for doc in documents]
    held_out = [h < validation_fraction for h in hashes]
    if not any(held_out):
        held_out[hashes.index(min(hashes))] = True
    train = [doc for doc, out in zip(documents, held_out) if not out]
    validation = [doc for doc, out in zip(documents, held_out) if out]
    if not train:
        raise ValueError(f"{origin}: validation_fraction={validation_fraction} leaves no training "
                         "document")
    return train, validation


def _examples(documents: Sequence[str], split: str) -> Iterator[tuple[str, dict[str, str]]]:
    """(key, example) of each document, with a progress bar of the documents written."""
    written = progress.bar(documents, desc=f"corpus: writing {split}", unit="doc")
    for index, doc in enumerate(written):
        yield f"{index:09d}", {"text": doc}


def _text_features() -> tfds.features.FeaturesDict:
    return tfds.features.FeaturesDict({"text": tfds.features.Text()})


# ------------------------------------------------------------------------------------------------
# Local plain-text files.


def matched_files(pattern: str) -> list[str]:
    """Sorted files matched by `pattern` ("**" recurses); ValueError naming the glob if none."""
    files = sorted(p for p in globlib.glob(os.path.expanduser(pattern), recursive=True)
                   if os.path.isfile(p))
    if not files:
        raise ValueError(f"text corpus: the glob {pattern!r} matches no file")
    return files


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
        found = _documents_in(text, document_delimiter)
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


def _documents_in(text: str, document_delimiter: str) -> list[str]:
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
                                     features=_text_features(), metadata=metadata)

    def _split_generators(self, dl_manager):
        cfg = self.builder_config
        documents = read_text_documents(cfg.pattern, cfg.document_delimiter, cfg.invalid_utf8)
        train, validation = _split_documents(documents, cfg.validation_fraction,
                                             f"the files matched by {cfg.pattern!r}")
        return {"train": self._generate_examples(train, "train"),
                "validation": self._generate_examples(validation, "validation")}

    def _generate_examples(self, documents, split):
        yield from _examples(documents, split)


# ------------------------------------------------------------------------------------------------
# The demo corpus: text shipped inside the gensim wheel.

WIKI_SAMPLE = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
LEE_CORPUS = "lee_background.cor"
_WIKI_DROPPED_TAGS = frozenset({"ref", "references", "table", "gallery", "math", "timeline"})
_WIKI_DROPPED_LINKS = ("file:", "image:", "media:", "category:")


def gensim_test_data() -> str:
    """The folder gensim/test/test_data of the installed gensim wheel (gensim is not imported):
    the demo corpus and the polarity sentences of experiments/configs/finetune_polarity.py."""
    spec = importlib.util.find_spec("gensim")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the demo corpus and the polarity sentences need the gensim wheel "
                                "(pip install gensim), which ships them under "
                                "gensim/test/test_data/")
    folder = os.path.join(next(iter(spec.submodule_search_locations)), "test", "test_data")
    for name in (WIKI_SAMPLE, LEE_CORPUS):
        if not os.path.isfile(os.path.join(folder, name)):
            raise FileNotFoundError(f"demo corpus file {os.path.join(folder, name)} is missing")
    return folder


def wiki_plain_text(wikitext: str) -> str:
    """Readable text of one article: references, tables, files and categories dropped.

    The dropped nodes are cut from their parents' node lists in one walk of the parse tree (a
    dropped node's own children go with it): what removing each one from the whole tree by
    search gives, in a third of the time."""
    import mwparserfromhell  # imported here: only the demo corpus needs it

    def dropped(node) -> bool:
        if isinstance(node, mwparserfromhell.nodes.Tag):
            return str(node.tag).strip().lower() in _WIKI_DROPPED_TAGS
        if isinstance(node, mwparserfromhell.nodes.Wikilink):
            return str(node.title).strip().lower().startswith(_WIKI_DROPPED_LINKS)
        return False

    def prune(code) -> None:
        kept = [node for node in code.nodes if not dropped(node)]
        for node in kept:
            for child in node.__children__():
                prune(child)
        code.nodes[:] = kept

    code = mwparserfromhell.parse(wikitext)
    prune(code)
    lines = (" ".join(line.split()) for line in code.strip_code().split("\n"))
    return "\n".join(line for line in lines if line)


def wiki_articles(path: str) -> Iterator[str]:
    """Plain text of the articles (namespace 0, no redirects) of a MediaWiki XML dump (.bz2)."""
    with bz2.open(path, "rb") as f:
        for _, element in ElementTree.iterparse(f, events=("end",)):
            if element.tag.rsplit("}", 1)[-1] != "page":
                continue
            namespace = element.findtext("{*}ns", default="0")
            if namespace == "0" and element.find("{*}redirect") is None:
                text = wiki_plain_text(element.findtext("{*}revision/{*}text", default=""))
                if text:
                    yield text
            element.clear()


def demo_documents() -> list[str]:
    """The demo corpus: Wikipedia sample articles, then the Lee news stories (one per line)."""
    folder = gensim_test_data()
    articles = wiki_articles(os.path.join(folder, WIKI_SAMPLE))
    documents = list(progress.bar(articles, desc="demo corpus: parsing articles", unit="article"))
    with open(os.path.join(folder, LEE_CORPUS), encoding="utf-8") as f:
        documents.extend(_documents_in(f.read(), "line"))
    return documents


class DemoCorpus(tfds.core.GeneratorBasedBuilder):
    """Real English text from the gensim wheel: ~400 documents, ~3 MB, 5% held out."""

    VERSION = tfds.core.Version("1.0.0")
    VALIDATION_FRACTION = 0.05

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self, features=_text_features(),
            description="Wikipedia sample articles and the Lee corpus shipped by gensim")

    def _split_generators(self, dl_manager):
        train, validation = _split_documents(demo_documents(), self.VALIDATION_FRACTION,
                                             "the demo corpus")
        return {"train": self._generate_examples(train, "train"),
                "validation": self._generate_examples(validation, "validation")}

    def _generate_examples(self, documents, split):
        yield from _examples(documents, split)


# ------------------------------------------------------------------------------------------------
# One entry point.


def builder_for(corpus: str, data_dir: str, **text_options) -> tfds.core.DatasetBuilder:
    """The TFDS builder of `corpus` ("demo", "text:GLOB" or a catalog name), not yet prepared."""
    data_dir = os.path.expanduser(data_dir)
    if corpus == DEMO:
        return DemoCorpus(data_dir=data_dir, file_format="array_record")
    if corpus.startswith(TEXT_PREFIX):
        config = text_files_config(corpus[len(TEXT_PREFIX):], **text_options)
        return TextFiles(config=config, data_dir=data_dir, file_format="array_record")
    try:
        return tfds.builder(corpus, data_dir=data_dir, file_format="array_record")
    except Exception as e:  # unknown name, or the catalog needs something missing
        first_line = str(e).strip().split("\n")[0]
        raise ValueError(f"corpus {corpus!r} is neither 'demo', 'text:GLOB' nor a TFDS catalog "
                         f"name that this installation can build ({first_line})") from e


@contextlib.contextmanager
def exclusive(data_dir: str):
    """Holds an advisory lock on data_dir, so that processes of one job (e.g. several local
    hosts) prepare a corpus or vocabulary once instead of racing on the same files. On object
    storage (gs://), which has no advisory locks: `_object_lock`."""
    if paths.is_remote(data_dir):
        with _object_lock(epath.Path(data_dir) / LOCK_FILE):
            yield
        return
    os.makedirs(data_dir, exist_ok=True)
    with open(os.path.join(data_dir, LOCK_FILE), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextlib.contextmanager
def _object_lock(lock: epath.Path, poll_seconds: float = 2.0):
    """Hold `lock`, an object created only if absent (workdir.create_exclusively), waiting while
    another process holds it. A process killed while holding it leaves it behind: the wait says
    so once, naming the object to remove."""
    holder = json.dumps({"pid": os.getpid(), "host": socket.gethostname()})
    waited = False
    while not paths.create_exclusively(lock, holder):
        if not waited:
            logging.warning("waiting for %s (another process prepares this data); remove it if "
                            "no process does", lock)
            waited = True
        time.sleep(poll_seconds)
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)


def prepare(corpus: str, data_dir: str, **text_options) -> tfds.core.DatasetBuilder:
    """Prepares `corpus` under `data_dir` unless it is there (idempotent); returns its builder.

    A "text:GLOB" corpus already prepared there with another document_delimiter is a ValueError
    naming both (`check_document_delimiter`)."""
    data_dir = os.path.expanduser(data_dir)
    builder = builder_for(corpus, data_dir, **text_options)
    if not builder.is_prepared():
        with exclusive(data_dir):
            builder = builder_for(corpus, data_dir, **text_options)  # another process may have
            if not builder.is_prepared():
                _download_and_prepare(builder, corpus, data_dir)
        builder = builder_for(corpus, data_dir, **text_options)
    if isinstance(builder, TextFiles):
        check_document_delimiter(builder, corpus)
    return builder


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


def _download_and_prepare(builder: tfds.core.DatasetBuilder, corpus: str, data_dir: str) -> None:
    local = corpus == DEMO or corpus.startswith(TEXT_PREFIX)
    tfds.display_progress_bar(not local and progress.enabled())  # TFDS's own bars: downloads
    try:
        builder.download_and_prepare()
    except Exception as e:
        if local:
            raise
        raise RuntimeError(
            f"could not download and prepare the TFDS dataset {corpus!r} into {data_dir!r} "
            f"(network access and the dataset's own dependencies are needed): {e}") from e
    finally:
        tfds.display_progress_bar(True)


def load_source(corpus: str, split: str, data_dir: str, **text_options) -> TextSource:
    """A random-access source of `split` of `corpus`, preparing the corpus first if needed.

    Returns an `array_record` data source: `len(source)`, `source[i] -> {"text": bytes, ...}`.
    `text_options` (document_delimiter, invalid_utf8, validation_fraction) apply to "text:GLOB".
    """
    builder = prepare(corpus, data_dir, **text_options)
    if split not in builder.info.splits and "[" not in split:
        raise ValueError(f"corpus {corpus!r} has no split {split!r}; it has "
                         f"{sorted(builder.info.splits)}")
    return builder.as_data_source(split=split)
