"""MTEB (mteb 2.x) on our encoders: an object MTEB evaluates, and local tasks from our files.

    from bert_jax.embeddings import mteb_encoder
    from bert_jax.tools import saved_runs
    encoder = saved_runs.load_encoder(hf_dir="path/to/hf_bert")      # or workdir=RUN, step=N
    model = mteb_encoder.wrap(encoder, name="bert_jax/my-run", revision=None, pooling="mean",
                              normalize=True, similarity="cosine", max_seq_len=256)
    task = mteb_encoder.local_retrieval_task("beir_folder", split="test")  # or an MTEB name:
    # task = mteb.get_tasks(tasks=["STSBenchmark"])[0]
    mteb.evaluate(model, [task], cache=mteb.ResultCache("results"))

`wrap` gives an instance of a subclass of mteb.models.abs_encoder.AbsEncoder (MTEB's
EncoderProtocol): `encode(inputs, *, task_metadata, hf_split, hf_subset, prompt_type=None)`
reads every batch of MTEB's DataLoader (its "text" column), embeds all the texts in one
`encode.embed` call (packed rows, one compiled program per row length, the jitted function kept
per model config, pooling and normalisation: a second task of the same lengths compiles nothing)
and returns float32 [N, H];
`similarity` / `similarity_pairwise` follow `mteb_model_meta.similarity_fn_name` (cosine or
dot). The ModelMeta says: name ("organization/model": MTEB's result folder), revision (None:
MTEB writes "no_revision_available"), embedding dimension, max tokens (max_seq_len), similarity,
framework "JAX", no instructions (prompt_type is ignored: the same text gives the same vector
as a query and as a document, as embed.py gives it).

Local tasks (no network): `local_retrieval_task(folder, split)` is an MTEB retrieval task (main
score nDCG@10) over a BEIR folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv: the layout
MTEB's retrieval tasks are published in; read by beir.read_beir), `local_sts_task(path)` an STS
task (main score the Spearman of the cosines) over a pairs file (sts.read_pairs; gold scores
taken as they are, their range the file's). Each is named after its folder or file stem.

mteb is imported when `wrap` or a task builder is first called, not when this module is: the
library imports without it (mteb 2.x needs Python >= 3.12 and huggingface-hub >= 1).
"""

from __future__ import annotations

import functools
import os
from typing import Any, Optional

import numpy as np

from bert_jax.embeddings import beir, sts
from bert_jax.embeddings import encode as sentence_embeddings

SIMILARITIES = ("cosine", "dot")  # what MTEB's AbsEncoder.similarity scores with


def _mteb():
    try:
        import mteb
    except ImportError as e:
        raise ImportError("MTEB evaluation needs mteb 2.x (Python >= 3.12): pip install "
                          "'mteb>=2.26,<3'") from e
    return mteb


@functools.lru_cache(maxsize=1)
def encoder_class() -> type:
    """The mteb.models.AbsEncoder subclass `wrap` instantiates (made once, on first use)."""
    from mteb.models.abs_encoder import AbsEncoder

    class JaxEncoder(AbsEncoder):
        """A bert_jax encoder under MTEB's encoder protocol (module docstring)."""

        def __init__(self, encoder: sentence_embeddings.Encoder, meta: Any, *, pooling: str,
                     normalize: bool, max_seq_len: int, batch_size: Optional[int]):
            self.model = encoder
            self.mteb_model_meta = meta
            self.pooling, self.normalize = pooling, normalize
            self.max_seq_len, self.batch_size = max_seq_len, batch_size

        def encode(self, inputs, *, task_metadata, hf_split, hf_subset, prompt_type=None,
                   **kwargs) -> np.ndarray:
            del task_metadata, hf_split, hf_subset, prompt_type, kwargs  # no prompts
            texts = [text for batch in inputs for text in batch["text"]]
            return sentence_embeddings.embed(
                self.model, texts, pooling=self.pooling, normalize=self.normalize,
                batch_size=self.batch_size, max_seq_len=self.max_seq_len)

    return JaxEncoder


def model_meta(encoder: sentence_embeddings.Encoder, *, name: str, revision: Optional[str],
               similarity: str, max_seq_len: int):
    """MTEB's ModelMeta of `encoder`: what MTEB records beside every score."""
    _mteb()
    from mteb.models import ModelMeta
    if "/" not in name:
        raise ValueError(f"model name {name!r}: MTEB wants 'organization/model'")
    if similarity not in SIMILARITIES:
        raise ValueError(f"similarity {similarity!r}: MTEB's encoders score with one of "
                         f"{SIMILARITIES}")
    parameters = sum(int(np.prod(np.shape(v))) for v in _leaves(encoder.params))
    return ModelMeta(
        loader=None, name=name, revision=revision, release_date=None, languages=None,
        n_parameters=parameters, memory_usage_mb=None, max_tokens=max_seq_len,
        embed_dim=encoder.cfg.hidden_size, license=None, open_weights=True,
        public_training_code=None, public_training_data=None, framework=["JAX"],
        similarity_fn_name=similarity, use_instructions=False, training_datasets=None)


def _leaves(tree: Any) -> list:
    import jax
    return jax.tree.leaves(tree)


def wrap(encoder: sentence_embeddings.Encoder, *, name: str, revision: Optional[str] = None,
         pooling: str = "mean", normalize: bool = False, similarity: str = "cosine",
         max_seq_len: Optional[int] = None, batch_size: Optional[int] = None):
    """`encoder` as an MTEB model (module docstring): embed's pooling, normalisation and
    max_seq_len (default the model's max_sequence_length); batch_size: texts per call (default
    embed's, by platform)."""
    if pooling not in sentence_embeddings.POOLINGS:
        raise ValueError(f"pooling {pooling!r} is unknown; choose one of "
                         f"{sentence_embeddings.POOLINGS}")
    max_seq_len = max_seq_len or encoder.cfg.max_sequence_length
    meta = model_meta(encoder, name=name, revision=revision, similarity=similarity,
                      max_seq_len=max_seq_len)
    return encoder_class()(encoder, meta, pooling=pooling, normalize=normalize,
                           max_seq_len=max_seq_len, batch_size=batch_size)


# ----- local tasks -------------------------------------------------------------------------------

def _task_name(path: str) -> str:
    base = os.path.basename(os.path.normpath(path))
    return os.path.splitext(base)[0] if os.path.isfile(path) else base


def _metadata(name: str, kind: str, main_score: str, split: str, path: str):
    from mteb.abstasks.task_metadata import TaskMetadata
    return TaskMetadata(
        name=name, type=kind, main_score=main_score, eval_splits=[split],
        eval_langs=["eng-Latn"], description=f"local data: {os.path.abspath(path)}",
        dataset={"path": os.path.abspath(path), "revision": "local"}, category="t2t",
        modalities=["text"], reference=None, date=None, domains=None, task_subtypes=None,
        license=None, annotations_creators=None, dialect=None, sample_creation=None,
        bibtex_citation="")


def local_retrieval_task(folder: str, split: str = "test", name: Optional[str] = None):
    """An MTEB retrieval task (an instance) over the BEIR folder's split (module docstring):
    beir.read_beir's corpus and judged queries, the qrels as they are."""
    _mteb()
    from datasets import Dataset
    from mteb.abstasks.retrieval import AbsTaskRetrieval
    from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData

    def load_data(self, num_proc: Optional[int] = None, **kwargs) -> None:
        if self.data_loaded:
            return
        data = beir.read_beir(folder, split)
        self.dataset = {"default": {split: RetrievalSplitData(
            corpus=Dataset.from_dict({"id": data.documents, "text": data.document_texts}),
            queries=Dataset.from_dict({"id": data.queries, "text": data.query_texts}),
            relevant_docs=data.qrels, top_ranked=None)}}
        self.data_loaded = True

    metadata = _metadata(name or _task_name(folder), "Retrieval", "ndcg_at_10", split, folder)
    task_class = type("LocalRetrieval", (AbsTaskRetrieval,),
                      {"metadata": metadata, "load_data": load_data})
    return task_class()


def local_sts_task(path: str, file_format: str = "auto",
                   columns=sts.DEFAULT_COLUMNS, name: Optional[str] = None):
    """An MTEB STS task (an instance) over the pairs file (module docstring); its split is
    "test"."""
    _mteb()
    from datasets import Dataset, DatasetDict
    from mteb.abstasks.sts import AbsTaskSTS
    pairs = sts.read_pairs(path, file_format, columns)

    def load_data(self, num_proc: Optional[int] = None, **kwargs) -> None:
        self.dataset = DatasetDict({"test": Dataset.from_dict({
            "sentence1": pairs.sentences1, "sentence2": pairs.sentences2,
            "score": [float(s) for s in pairs.scores]})})
        self.data_loaded = True

    metadata = _metadata(name or _task_name(path), "STS", "cosine_spearman", "test", path)
    task_class = type("LocalSTS", (AbsTaskSTS,), {
        "metadata": metadata, "load_data": load_data,
        "min_score": float(np.min(pairs.scores)), "max_score": float(np.max(pairs.scores))})
    return task_class()
