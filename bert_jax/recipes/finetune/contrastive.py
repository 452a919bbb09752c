"""Contrastive sentence embeddings: (anchor, positive[, hard negative]) rows, each text pooled
into one L2-normalised vector, trained with in-batch negatives over the global batch.

Rows: CSV/TSV (header row) or JSONL, the anchor under config.data.text_column, the positive
under config.data.text_pair_column and, when config.contrastive.negative_column names one, a
hard negative. Each text is its own row [CLS] pieces [SEP] (token types 0, cut to max_seq_len),
pooled as bert_jax.embeddings.encode.pool does (config.contrastive.pooling: mean or cls,
then L2-normalised): exactly what experiments/embed.py --workdir=RUN --pooling=P --normalize
computes from the run, whose encoder is the usual {"bert": ...} tree (no head, no pooler).

Features hold an example's K texts (2 or 3) side by side on a last axis: input_ids,
token_type_ids, attention_mask [N, L, K]. The token axis is second, so the recipe's length
buckets cut every text of a batch at once (a row's length is that of its longest text), and
rows shard over the data axes like any batch. The model runs the encoder on the [B * K, L]
texts and returns SentenceVectors: vectors [B, K, H] and the loss settings the run started with
(config.contrastive, kept in task.json), which loss() reads.

Loss: bert_jax/recipes/finetune/in_batch_negatives.py (every anchor against the positives, and
hard negatives, of the global batch; config.contrastive.scale, .symmetric). Evaluation: each
held-out anchor ranks all distinct held-out positives by cosine; recall@1/10/100, MRR@10 and
nDCG@10 (bert_jax.embeddings.metrics), one prediction record per anchor.

Refused, with the keys named: accumulation_steps > 1 (the micro-batches would have fewer
negatives: another loss), data.group_by_length (it sorts rows of one text by length) and
data.pack_examples (the kind is not packable). Not counted: the FLOP count of the recipe
assumes one text per example, so the logged MFU is K times too low.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Sequence

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.config.bert import BertConfig
from bert_jax.config.settings import RunSettings
from bert_jax.data import textfiles
from bert_jax.data.textfiles import DataError
from bert_jax.embeddings import encode as sentence_embeddings
from bert_jax.embeddings import metrics as retrieval_metrics
from bert_jax.model import families
from bert_jax.recipes.finetune import in_batch_negatives
from bert_jax.recipes.finetune.kinds import TaskKind, register

TOP_K = 100  # corpus documents ranked per held-out anchor (recall@100 needs 100)
ANCHOR_CHUNK = 1024  # held-out anchors scored at once ([chunk, corpus] scores on the host)


@dataclasses.dataclass(frozen=True)
class ContrastiveExample:
    anchor: str
    positive: str
    negative: Optional[str] = None  # a hard negative, when config.contrastive.negative_column


@flax.struct.dataclass
class SentenceVectors:
    """The model's output: vectors float32 [B, K, H] (unit L2 norm) and the loss settings."""

    vectors: jax.Array
    scale: float = flax.struct.field(pytree_node=False)
    symmetric: bool = flax.struct.field(pytree_node=False)


class ContrastiveEncoder(nn.Module):
    """BertModel ("bert", no pooler) + sentence_embeddings.pool over each of a row's texts.

    Inputs [B, L, K] (K texts per example) or [B, L] (one text: K = 1) -> SentenceVectors with
    vectors [B, K, H]. The texts run through the encoder as [B * K, L] rows, example-major, so
    a batch sharded over its rows stays sharded (no communication). pooling, scale and
    symmetric: the run's config.contrastive (`settings_of`, kept in task.json; the schema,
    bert_jax/config/run.py, holds their defaults)."""

    cfg: BertConfig
    pooling: str
    scale: float
    symmetric: bool

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None,
                 deterministic: bool = True) -> SentenceVectors:
        if input_ids.ndim == 2:
            input_ids, token_type_ids, attention_mask = (
                None if x is None else x[..., None]
                for x in (input_ids, token_type_ids, attention_mask))
        batch, length, texts = input_ids.shape
        if attention_mask is None:
            attention_mask = jnp.ones_like(input_ids)

        def rows(x):  # [B, L, K] -> [B * K, L]
            return None if x is None else jnp.swapaxes(x, 1, 2).reshape(batch * texts, length)

        mask = rows(attention_mask)
        out = families.of(self.cfg).encoder(self.cfg, add_pooler=False, name="bert")(
            rows(input_ids), rows(token_type_ids), mask, deterministic)
        vectors = sentence_embeddings.pool(out.sequence_output, mask, self.pooling, True)
        return SentenceVectors(vectors.reshape(batch, texts, -1), self.scale, self.symmetric)


# ----- config ----------------------------------------------------------------------------------

def check_config(config: RunSettings) -> None:
    """ValueError naming the key of a setting this kind cannot train with (module docstring)."""
    settings, data = config.contrastive, config.data
    if settings.pooling not in sentence_embeddings.POOLINGS:
        raise ValueError(f"config.contrastive.pooling={settings.pooling!r}: choose one of "
                         f"{sentence_embeddings.POOLINGS}")
    if not settings.scale > 0:
        raise ValueError(f"config.contrastive.scale={settings.scale} must be > 0")
    if not data.text_pair_column:
        raise ValueError("config.task='contrastive' needs config.data.text_pair_column (the "
                         "positive's column; config.data.text_column is the anchor's)")
    if config.accumulation_steps != 1:
        raise ValueError(
            f"config.accumulation_steps={config.accumulation_steps} with config.task="
            "'contrastive': each micro-batch would see only its own in-batch negatives (another "
            "loss); set config.accumulation_steps=1 (for memory: a smaller config.batch_size or "
            "config.remat)")
    if data.group_by_length > 1:
        raise ValueError(f"config.data.group_by_length={data.group_by_length} with config.task="
                         "'contrastive': rows hold several texts; set it to 0")


def settings_of(config: RunSettings) -> dict[str, Any]:
    """What the model and loss keep of config.contrastive (saved in task.json)."""
    settings = config.contrastive
    return {"pooling": settings.pooling, "scale": float(settings.scale),
            "symmetric": bool(settings.symmetric)}


# ----- reading and encoding --------------------------------------------------------------------

def columns_of(config: RunSettings) -> tuple[str, ...]:
    """(anchor, positive[, negative]) column names."""
    data = config.data
    negative = config.contrastive.negative_column
    return (data.text_column, data.text_pair_column) + ((negative,) if negative else ())


def read_examples(path: str, config: RunSettings) -> list[ContrastiveExample]:
    """The rows of a CSV/TSV (header row) or JSONL file, by config.data.format (auto: by the
    extension). DataError naming the file and line of a bad row, a missing column or an
    empty or non-string text."""
    data = config.data
    columns = columns_of(config)
    file_format = textfiles.format_of(path, data.format, "csv, tsv or jsonl")
    textfiles.check_file(path)
    if file_format in ("csv", "tsv"):
        delimiter = "\t" if file_format == "tsv" else ","
        records = textfiles.table_rows(path, delimiter, data.tsv_quoting or delimiter != "\t",
                                       data.encoding, columns)
    elif file_format == "jsonl":
        records = textfiles.jsonl_records(path, data.encoding)
    else:
        raise DataError(f"{path}: format {file_format!r}: contrastive rows are csv, tsv or jsonl")
    examples = []
    for line, record in records:
        if isinstance(record, str):
            raise DataError(f"{path}:{line}: {record}")
        missing = [c for c in columns if c not in record]
        if missing:
            raise DataError(f"{path}:{line}: no column(s) {missing}; the columns are "
                            f"{sorted(record)}")
        texts = [record[c] for c in columns]
        if any(not isinstance(t, str) or not t.strip() for t in texts):
            raise DataError(f"{path}:{line}: the columns {list(columns)} must hold non-empty "
                            "texts")
        examples.append(ContrastiveExample(*texts))
    if not examples:
        raise DataError(f"{path}: holds no examples")
    return examples


def encode_texts(tokenizer, columns: Sequence[Sequence[str]], max_seq_len: int
                 ) -> dict[str, np.ndarray]:
    """input_ids, token_type_ids (0), attention_mask int32 [N, max_seq_len, K] of K columns of
    N texts each, every text [CLS] pieces [SEP] as sentence_embeddings.token_rows makes it."""
    count = len(columns[0])
    ids = np.full((count, max_seq_len, len(columns)), tokenizer.pad_id, np.int32)
    mask = np.zeros_like(ids)
    for k, texts in enumerate(columns):
        rows, _ = sentence_embeddings.token_rows(tokenizer, texts, max_seq_len)
        for i, row in enumerate(rows):
            ids[i, :len(row), k] = row
            mask[i, :len(row), k] = 1
    return {"input_ids": ids, "token_type_ids": np.zeros_like(ids), "attention_mask": mask}


# ----- evaluation ------------------------------------------------------------------------------

def retrieval_scores(anchors: np.ndarray, positives: np.ndarray, positive_texts: Sequence[str]
                     ) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """Each anchor ranks the distinct positives by cosine (unit vectors: the dot product).

    anchors, positives [N, H]: example i's anchor and positive. The corpus is the distinct
    positive texts (the first example of each text stands for it), so a positive shared by
    several anchors is one document, relevant to each of them. Returns (ranking metrics,
    gold_rank [N]: 1 + the documents scored strictly above the gold one, top [N]: the example
    index of each anchor's first-ranked document)."""
    first: dict[str, int] = {}
    for i, text in enumerate(positive_texts):
        first.setdefault(text, i)
    corpus = np.asarray(sorted(first.values()))
    gold = np.asarray([first[text] for text in positive_texts])
    gold_column = np.searchsorted(corpus, gold)
    keep = min(TOP_K, len(corpus))
    ranked, qrels = {}, {}
    gold_rank, top = np.zeros(len(anchors), np.int64), np.zeros(len(anchors), np.int64)
    for start in range(0, len(anchors), ANCHOR_CHUNK):
        scores = anchors[start:start + ANCHOR_CHUNK] @ positives[corpus].T  # [chunk, corpus]
        order = np.argsort(-scores, axis=1, kind="stable")[:, :keep]
        rows = np.arange(len(scores))
        gold_scores = scores[rows, gold_column[start:start + len(scores)]]
        gold_rank[start:start + len(scores)] = 1 + np.sum(scores > gold_scores[:, None], axis=1)
        top[start:start + len(scores)] = corpus[order[:, 0]]
        for row, ranking in enumerate(order):
            query = str(start + row)
            ranked[query] = [str(d) for d in corpus[ranking]]
            qrels[query] = {str(gold[start + row]): 1}
    return retrieval_metrics.ranking_metrics(ranked, qrels), gold_rank, top


# ----- the kind --------------------------------------------------------------------------------

@register
class Contrastive(TaskKind):
    name = "contrastive"
    target_keys = ()  # the targets are the batch itself: each anchor's own positive

    def read(self, path, config):
        check_config(config)
        return read_examples(path, config)

    def describe_labels(self, train_examples, config):
        return settings_of(config)

    def encode(self, tokenizer, examples, config, labels, source):
        check_config(config)
        columns = [[e.anchor for e in examples], [e.positive for e in examples]]
        if config.contrastive.negative_column:
            columns.append([e.negative for e in examples])
        return encode_texts(tokenizer, columns, config.max_seq_len)

    def make_model(self, cfg, labels):
        return ContrastiveEncoder(cfg, labels["pooling"], labels["scale"], labels["symmetric"])

    def loss(self, outputs, batch, example_weights):
        return in_batch_negatives.in_batch_loss(outputs.vectors, example_weights, outputs.scale,
                                                outputs.symmetric)

    def predict(self, outputs, batch):
        return {"embeddings": outputs.vectors.astype(jnp.float32)}

    def score(self, data, outputs, config):
        vectors = outputs["embeddings"]
        examples = data.eval_examples
        result, gold_rank, top = retrieval_scores(vectors[:, 0], vectors[:, 1],
                                                  [e.positive for e in examples])
        records = [{"index": i, "anchor": e.anchor, "positive": e.positive,
                    "gold_rank": int(r), "top": examples[t].positive}
                   for i, (e, r, t) in enumerate(zip(examples, gold_rank, top))]
        return result, records

    def num_outputs(self, labels: Mapping[str, Any]) -> int:
        return 0  # no head: the vectors are the encoder's pooled states
