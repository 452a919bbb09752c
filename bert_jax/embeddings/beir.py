"""A BEIR-format retrieval data set, read whole and checked.

    FOLDER/corpus.jsonl      {"_id": ..., "title": ..., "text": ...} per line (title optional)
    FOLDER/queries.jsonl     {"_id": ..., "text": ...} per line (the queries of every split)
    FOLDER/qrels/SPLIT.tsv   header `query-id  corpus-id  score`, then one judgment per row

    data = read_beir("scifact", split="test")
    data.documents (corpus ids, file order), data.document_texts (same order, "title text"),
    data.queries (the judged query ids), data.query_texts, data.qrels ({query: {doc: score}})

Ids are strings (a JSON number id is read as its decimal string, as BEIR's loader does). A
document is embedded as `title + " " + text` (just the text when the title is empty, absent or
null), which is what BEIR's sentence-transformers models are evaluated with. Only the queries
named in the split's qrels are kept: queries.jsonl holds those of every split.

Anything that cannot be read is one DataError (a ValueError) naming the file and line: a missing
or empty file, undecodable bytes, a line that is not a JSON object, an id or text missing or not
a string, an id given twice, a qrels row with the wrong number of columns, a score that is not
an integer, a query or corpus id that the other files do not hold, the same judgment twice.
`counts` says how much was read, so a caller can report counts in against counts scored.

Writing one (what read_beir reads back as written):

    write_beir(folder, corpus={"d0": "text", ...}, queries={"q0": "text", ...},
               qrels={"q0": {"d0": 1}}, split="test")
    pairs_to_beir(folder, [(query text, document text), ...])   # query i judges document i
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Iterator, Mapping, Sequence

from bert_jax.data import textfiles
from bert_jax.data.textfiles import DataError
from bert_jax.runtime import paths

QRELS_COLUMNS = ("query-id", "corpus-id", "score")


@dataclasses.dataclass(frozen=True)
class BeirData:
    """A split of a BEIR folder. documents/document_texts: every corpus entry, in file order;
    queries/query_texts: the queries judged in the split, in queries.jsonl order; qrels: query
    id -> {corpus id: score} as the split's file gives it (scores <= 0 kept: not relevant)."""

    folder: str
    split: str
    documents: list[str]
    document_texts: list[str]
    queries: list[str]
    query_texts: list[str]
    qrels: dict[str, dict[str, int]]
    queries_read: int  # every line of queries.jsonl, judged in this split or not

    @property
    def counts(self) -> dict[str, int]:
        """documents, queries_read, queries (judged in the split), judgments (qrels rows),
        relevant_queries (those with a score > 0: the ones ranking metrics score)."""
        return {"documents": len(self.documents), "queries_read": self.queries_read,
                "queries": len(self.queries),
                "judgments": sum(len(judged) for judged in self.qrels.values()),
                "relevant_queries": sum(any(s > 0 for s in judged.values())
                                        for judged in self.qrels.values())}


def _identifier(record: Mapping[str, Any], where: str) -> str:
    value = record.get("_id")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DataError(f"{where}: \"_id\" is missing or not a string or integer ({value!r})")
    return str(value)


def _string(record: Mapping[str, Any], key: str, where: str, default: Any = None) -> str:
    value = record.get(key, default)
    if not isinstance(value, str):
        raise DataError(f"{where}: \"{key}\" is missing or not a string ({value!r})")
    return value


def _records(path: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(where: "path:line", object) of each non-blank line of a JSONL file; the first bad line
    is a DataError."""
    textfiles.check_file(path)
    for line, record in textfiles.jsonl_records(path, "utf-8"):
        where = f"{path}:{line}"
        if isinstance(record, str):
            raise DataError(f"{where}: {record}")
        yield where, record


def _read_texts(path: str, with_title: bool) -> dict[str, str]:
    """id -> text of a corpus (title + " " + text) or queries file, in file order."""
    texts: dict[str, str] = {}
    first_seen: dict[str, str] = {}
    for where, record in _records(path):
        identifier = _identifier(record, where)
        if identifier in texts:
            raise DataError(f"{where}: the _id {identifier!r} was already given on line "
                            f"{first_seen[identifier]}")
        text = _string(record, "text", where)
        title = ""
        if with_title and record.get("title") is not None:  # absent or null: no title
            title = _string(record, "title", where)
        texts[identifier] = f"{title} {text}" if title.strip() else text
        first_seen[identifier] = where.rsplit(":", 1)[1]
    return texts


def _read_qrels(path: str, queries: Mapping[str, str], documents: Mapping[str, str]
                ) -> dict[str, dict[str, int]]:
    textfiles.check_file(path)
    qrels: dict[str, dict[str, int]] = {}
    for line, record in textfiles.table_rows(path, "\t", False, "utf-8", QRELS_COLUMNS):
        where = f"{path}:{line}"
        if isinstance(record, str):
            raise DataError(f"{where}: {record}")
        query, document, score = (record[c].strip() for c in QRELS_COLUMNS)
        try:
            value = int(score)
        except ValueError:
            raise DataError(f"{where}: the score {score!r} is not an integer") from None
        if query not in queries:
            raise DataError(f"{where}: query-id {query!r} is not in queries.jsonl")
        if document not in documents:
            raise DataError(f"{where}: corpus-id {document!r} is not in corpus.jsonl")
        judged = qrels.setdefault(query, {})
        if document in judged:
            raise DataError(f"{where}: ({query!r}, {document!r}) is judged twice")
        judged[document] = value
    if not qrels:
        raise DataError(f"{path}: holds no judgments")
    return qrels


def read_beir(folder: str, split: str = "test") -> BeirData:
    """The `split` of the BEIR folder (module docstring); DataError naming the file and line
    of the first fault."""
    qrels_path = os.path.join(folder, "qrels", f"{split}.tsv")
    if not os.path.isdir(folder):
        raise DataError(f"{folder}: no such folder (a BEIR folder holds corpus.jsonl, "
                        "queries.jsonl and qrels/<split>.tsv)")
    if not os.path.isfile(qrels_path) and os.path.isdir(os.path.dirname(qrels_path)):
        splits = sorted(name[:-4] for name in os.listdir(os.path.dirname(qrels_path))
                        if name.endswith(".tsv"))
        raise DataError(f"{qrels_path}: no such file (the splits of {folder}: {splits})")
    documents = _read_texts(os.path.join(folder, "corpus.jsonl"), with_title=True)
    queries = _read_texts(os.path.join(folder, "queries.jsonl"), with_title=False)
    qrels = _read_qrels(qrels_path, queries, documents)
    judged = [query for query in queries if query in qrels]
    return BeirData(folder=folder, split=split, documents=list(documents),
                    document_texts=list(documents.values()), queries=judged,
                    query_texts=[queries[q] for q in judged], qrels=qrels,
                    queries_read=len(queries))


def write_beir(folder: str, corpus: Mapping[str, str], queries: Mapping[str, str],
               qrels: Mapping[str, Mapping[str, int]], split: str = "test") -> None:
    """Write a BEIR folder: corpus.jsonl ({"_id", "title": "", "text"} in `corpus` order),
    queries.jsonl, qrels/<split>.tsv (header, then one row per judgment); each file written
    whole (a reader never sees a part). ValueError, before anything is written, for a judgment
    naming a query or document that is not given, or for no judgment at all."""
    for query, judged in qrels.items():
        missing = [q for q in (query,) if q not in queries] + [d for d in judged
                                                               if d not in corpus]
        if missing:
            raise ValueError(f"qrels name ids that are not given: {missing}")
    if not any(qrels.values()):
        raise ValueError("qrels hold no judgments")
    os.makedirs(os.path.join(folder, "qrels"), exist_ok=True)
    paths.write_text_atomically(os.path.join(folder, "corpus.jsonl"), "".join(
        json.dumps({"_id": i, "title": "", "text": t}, ensure_ascii=False) + "\n"
        for i, t in corpus.items()))
    paths.write_text_atomically(os.path.join(folder, "queries.jsonl"), "".join(
        json.dumps({"_id": i, "text": t}, ensure_ascii=False) + "\n" for i, t in queries.items()))
    paths.write_text_atomically(
        os.path.join(folder, "qrels", f"{split}.tsv"),
        "\t".join(QRELS_COLUMNS) + "\n" + "".join(
            f"{query}\t{document}\t{int(score)}\n" for query, judged in qrels.items()
            for document, score in judged.items()))


def pairs_to_beir(folder: str, pairs: Sequence[tuple[str, str]], split: str = "test") -> dict:
    """A retrieval task of text pairs: pair i's first text is query "q{i}", its second the
    document "d{i}", the one document judged relevant (1) to it; the other pairs' documents are
    the distractors. Returns the counts {"queries", "documents"}."""
    write_beir(folder, corpus={f"d{i}": doc for i, (_, doc) in enumerate(pairs)},
               queries={f"q{i}": query for i, (query, _) in enumerate(pairs)},
               qrels={f"q{i}": {f"d{i}": 1} for i in range(len(pairs))}, split=split)
    return {"queries": len(pairs), "documents": len(pairs)}
