"""The "demo" corpus: real English text shipped by the `gensim` wheel, as a TFDS builder
(`DemoCorpus`).

106 Wikipedia articles of a shortened 2017 dump (gensim/test/test_data/; wiki markup stripped
with mwparserfromhell, redirects and non-article pages skipped: `wiki_articles`) and the 300 news
stories of the Lee corpus (one per line); about 3 MB of text, prepared in ~10 s, 5% held out
(`bert_jax.data.corpora.splits`). `gensim_test_data` finds that folder without importing gensim
(a FileNotFoundError saying what to install when the wheel or a file is missing); it also holds
the polarity sentences of experiments/configs/finetune_polarity.py.
"""

from __future__ import annotations

import bz2
import importlib.util
import os
import xml.etree.ElementTree as ElementTree
from typing import Collection, Iterator

import tensorflow_datasets as tfds

from bert_jax.data.corpora.splits import keyed_examples, split_documents, text_features
from bert_jax.data.corpora.text_files import documents_in
from bert_jax.runtime import progress

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


def wiki_articles(path: str, namespaces: Collection[str] = ("0",)) -> Iterator[str]:
    """Plain text of the pages of a MediaWiki XML dump (.bz2, any XML encoding) in `namespaces`
    (default: the articles, namespace 0), redirects skipped. Other namespaces are text too:
    "4" the project's own pages (experiments/non_english_demo.py takes them from the Bulgarian
    sample, which holds one article)."""
    namespaces = frozenset(namespaces)
    with bz2.open(path, "rb") as f:
        for _, element in ElementTree.iterparse(f, events=("end",)):
            if element.tag.rsplit("}", 1)[-1] != "page":
                continue
            namespace = element.findtext("{*}ns", default="0")
            if namespace in namespaces and element.find("{*}redirect") is None:
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
        documents.extend(documents_in(f.read(), "line"))
    return documents


class DemoCorpus(tfds.core.GeneratorBasedBuilder):
    """Real English text from the gensim wheel: ~400 documents, ~3 MB, 5% held out."""

    VERSION = tfds.core.Version("1.0.0")
    VALIDATION_FRACTION = 0.05

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self, features=text_features(),
            description="Wikipedia sample articles and the Lee corpus shipped by gensim")

    def _split_generators(self, dl_manager):
        train, validation = split_documents(demo_documents(), self.VALIDATION_FRACTION,
                                             "the demo corpus")
        return {"train": self._generate_examples(train, "train"),
                "validation": self._generate_examples(validation, "validation")}

    def _generate_examples(self, documents, split):
        yield from keyed_examples(documents, split)
