"""The token-shard preparation as an Apache Beam pipeline (DirectRunner, Dataflow, Flink, Spark).

`prepare_shards_beam(corpus, tokenizer, output_dir, pipeline_args)` writes the folder that
`bert_jax.data.corpora.preparation.prepare_shards` writes, byte for byte (shards, per-document
token counts, tokenizer.json, manifest.json; layout: `bert_jax.data.corpora.token_shards`):

  launcher      plans the work units (`sources.work_units`: the same plan, plan.json) and checks
                or writes plan.json in output_dir
  Create        the (index, unit) pairs, then Reshuffle: the runner spreads them over its workers
  TokenizeUnit  tokenizes one unit with the local preparation's `tokenize_unit` into a scratch
                folder on the worker, then copies its two shards, its counts and its record into
                output_dir through Beam's FileSystems (local, gs://, hdfs://, s3://), each under
                a temporary name renamed when complete; a unit whose record and shards (sizes)
                are already in output_dir is not done again, so a rerun continues a failed run
  ToList + Finish  one worker joins the records in unit order: document_tokens.<split>.npy,
                tokenizer.json, then manifest.json

The runner's own retries redo a failed unit (the same bytes: a unit's output depends on it
alone). Needs `pip install 'bert_jax[beam]'` (apache-beam) on the launcher and the workers: on
Dataflow ship the package with --setup_file (below). Training reads the folder from a local disk:
copy it down from object storage (`gcloud storage cp -r gs://b/shards /data/`).

  # this machine, 8 worker processes:
  python experiments/prepare_shards.py --corpus='jsonl:/data/web/*.jsonl.zst' \\
      --tokenizer=/data/tok --output_dir=/data/shards --runner=DirectRunner \\
      --beam_options='--direct_num_workers=8 --direct_running_mode=multi_processing'
  # Google Cloud Dataflow (corpus and output on GCS):
  python experiments/prepare_shards.py --corpus='parquet:gs://b/fineweb2/*.parquet' \\
      --tokenizer=/data/tok --output_dir=gs://b/shards --runner=DataflowRunner \\
      --beam_options='--project=P --region=us-central1 --temp_location=gs://b/tmp
                      --setup_file=./setup.py --max_num_workers=64'
  # Apache Flink / Spark (a cluster's job server; files on a filesystem every worker sees):
  python experiments/prepare_shards.py ... --runner=FlinkRunner \\
      --beam_options='--flink_master=HOST:8081 --environment_type=LOOPBACK'
  python experiments/prepare_shards.py ... --runner=SparkRunner \\
      --beam_options='--spark_master_url=spark://HOST:7077 --environment_type=LOOPBACK'
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import tempfile
from typing import Sequence

import numpy as np

from bert_jax.data.corpora import preparation
from bert_jax.data.corpora.records import MAX_DOCUMENT_BYTES, check_policy
from bert_jax.data.corpora.sources import DEFAULT_UNIT_BYTES, Source, parse_corpus, work_units
from bert_jax.data.corpora.token_shards import (
    MANIFEST,
    SPLITS,
    TOKENIZER_FILE,
    document_tokens_name,
)
from bert_jax.data.tokenizers.subword import SubwordTokenizer

RUNNERS = ("DirectRunner", "DataflowRunner", "FlinkRunner", "SparkRunner",
           "PortableRunner", "PrismRunner")


def _join(directory: str, *names: str) -> str:
    from apache_beam.io.filesystems import FileSystems
    return FileSystems.join(directory, *names)


def _write(path: str, pieces) -> None:
    """Writes the byte pieces to `path` under a temporary name, then renames it."""
    from apache_beam.io.filesystems import FileSystems
    temporary = f"{path}.tmp-{os.getpid()}"
    with FileSystems.create(temporary) as f:
        for piece in pieces:
            f.write(piece)
    if FileSystems.exists(path):
        FileSystems.delete([path])
    FileSystems.rename([temporary], [path])


def _read(path: str) -> bytes:
    from apache_beam.io.filesystems import FileSystems
    with FileSystems.open(path) as f:
        return f.read()


def _copy_file(local: str, path: str) -> None:
    def blocks():
        with open(local, "rb") as f:
            while block := f.read(8 << 20):
                yield block
    _write(path, blocks())


def _size(path: str) -> int | None:
    from apache_beam.io.filesystems import FileSystems
    matched = FileSystems.match([path])[0].metadata_list
    return matched[0].size_in_bytes if matched else None


def _stored_record(output_dir: str, index: int) -> dict | None:
    """The unit's record when it and its shards (sizes) and counts are in output_dir."""
    from apache_beam.io.filesystems import FileSystems
    record_path = _join(output_dir, preparation.UNITS_FOLDER, f"unit-{index:05d}.json")
    if not FileSystems.exists(record_path):
        return None
    try:
        record = json.loads(_read(record_path))
    except ValueError:
        return None
    for split, shard in record["shards"].items():
        counts = _join(output_dir, preparation.UNITS_FOLDER,
                       preparation.unit_counts_name(index, split))
        if _size(_join(output_dir, shard["file"])) != shard["bytes"] or not \
                FileSystems.exists(counts):
            return None
    return record


def _tokenize_unit_fn():
    import apache_beam as beam

    class TokenizeUnit(beam.DoFn):
        """(index, unit) -> its record, its shards and counts written to output_dir."""

        def __init__(self, tokenizer_json: str, output_dir: str, settings: dict):
            self.tokenizer_json, self.output_dir, self.settings = (tokenizer_json, output_dir,
                                                                   settings)

        def setup(self):
            self.tokenizer = preparation.worker_encoder(self.tokenizer_json)

        def process(self, task):
            index, unit = task
            stored = _stored_record(self.output_dir, index)
            if stored is not None:
                yield stored
                return
            scratch = tempfile.mkdtemp(prefix="bert_jax_unit_")
            try:
                os.makedirs(os.path.join(scratch, preparation.UNITS_FOLDER))
                record = preparation.tokenize_unit(unit, index, self.tokenizer, scratch,
                                                   **self.settings)
                for split in SPLITS:
                    name = record["shards"][split]["file"]
                    _copy_file(os.path.join(scratch, name), _join(self.output_dir, name))
                    counts = preparation.unit_counts_name(index, split)
                    _copy_file(os.path.join(scratch, preparation.UNITS_FOLDER, counts),
                               _join(self.output_dir, preparation.UNITS_FOLDER, counts))
                _write(_join(self.output_dir, preparation.UNITS_FOLDER, f"unit-{index:05d}.json"),
                       [json.dumps(record).encode("utf-8")])
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            yield record

    return TokenizeUnit


def _finish(records: list[dict], output_dir: str, plan: dict, tokenizer_json: str) -> dict:
    """The last step: the joined counts, tokenizer.json and manifest.json (written last)."""
    records = sorted(records, key=lambda r: r["unit"])
    if [r["unit"] for r in records] != list(range(len(plan["units"]))):
        raise RuntimeError(f"{len(records)} unit records for {len(plan['units'])} units")
    for split in SPLITS:
        parts = (np.load(io.BytesIO(_read(_join(
            output_dir, preparation.UNITS_FOLDER, preparation.unit_counts_name(r["unit"], split)))))
            for r in records)
        total = sum(r["shards"][split]["documents"] for r in records)
        _write(_join(output_dir, document_tokens_name(split)),
               preparation.document_tokens_pieces(parts, total))
    _write(_join(output_dir, TOKENIZER_FILE), [tokenizer_json.encode("utf-8")])
    manifest = preparation.manifest_of(plan, records)
    _write(_join(output_dir, MANIFEST), [json.dumps(manifest, indent=1).encode("utf-8")])
    return manifest


def _check_plan(output_dir: str, plan: dict) -> None:
    from apache_beam.io.filesystems import FileSystems
    path = _join(output_dir, preparation.PLAN)
    if FileSystems.exists(path):
        preparation.check_same_plan(output_dir, json.loads(_read(path)), plan)
        return
    _write(path, [json.dumps(plan, indent=1).encode("utf-8")])


def prepare_shards_beam(corpus: str | Sequence[Source], tokenizer: SubwordTokenizer | str,
                        output_dir: str, pipeline_args: Sequence[str] = (),
                        validation_fraction: float = 0.02,
                        unit_bytes: int = DEFAULT_UNIT_BYTES,
                        max_document_bytes: int = MAX_DOCUMENT_BYTES, bad_records: str = "skip",
                        text_key: str = "text", document_delimiter: str = "blank_line") -> dict:
    """Runs the preparation as a Beam pipeline with `pipeline_args` (e.g. ["--runner=
    DirectRunner", "--direct_num_workers=2"]); returns the manifest it wrote."""
    try:
        import apache_beam as beam
        from apache_beam.io.filesystems import FileSystems
        from apache_beam.options.pipeline_options import PipelineOptions
    except ImportError as e:
        raise ImportError("the Beam preparation needs apache-beam: pip install "
                          "'bert_jax[beam]' (or apache-beam)") from e
    check_policy(bad_records)
    if not 0 <= validation_fraction < 1:
        raise ValueError(f"validation_fraction={validation_fraction}; give a number in [0, 1)")
    if "://" not in output_dir:
        output_dir = os.path.abspath(os.path.expanduser(output_dir))
    sources = (parse_corpus(corpus, text_key, document_delimiter) if isinstance(corpus, str)
               else list(corpus))
    if isinstance(tokenizer, str):
        from bert_jax.data.tokenizers.load import load_tokenizer
        tokenizer = load_tokenizer(tokenizer)
    units = work_units(sources, unit_bytes)
    plan = preparation.preparation_plan(sources, units, tokenizer, validation_fraction,
                                        unit_bytes, max_document_bytes, bad_records)
    for folder in (output_dir, _join(output_dir, preparation.UNITS_FOLDER)):
        if not FileSystems.exists(folder):
            FileSystems.mkdirs(folder)
    _check_plan(output_dir, plan)
    tokenizer_json = tokenizer.tokenizer.to_str()
    settings = preparation.unit_settings(plan)
    tokenize = _tokenize_unit_fn()
    logging.info("prepare_shards (Beam): %d work units into %s", len(units), output_dir)
    with beam.Pipeline(options=PipelineOptions(list(pipeline_args))) as pipeline:
        _ = (pipeline
             | "Units" >> beam.Create(list(enumerate(units)))
             | "Spread" >> beam.Reshuffle()
             | "Tokenize" >> beam.ParDo(tokenize(tokenizer_json, output_dir, settings))
             | "Records" >> beam.combiners.ToList()
             | "Finish" >> beam.Map(_finish, output_dir, plan, tokenizer_json))
    manifest = json.loads(_read(_join(output_dir, MANIFEST)))
    preparation.log_summary(manifest, output_dir)
    return manifest
