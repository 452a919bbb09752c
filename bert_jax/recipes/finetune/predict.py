"""Predictions of a fine-tuned run on new, unlabelled inputs (experiments/predict.py).

    predict_file(workdir, PredictOptions(input_path, output_path, ...)) -> PredictSummary

The run's workdir gives everything but the input: config.json (tokenizer, max_seq_len, columns,
data.format, squad.*), task.json (the kind and its labels) and a checkpoint (default: the
newest), read onto a mesh of the devices at hand. The input is read by the kind
(`TaskKind.read_unlabelled`: the formats of training, labels optional, plus `lines`), encoded
(`encode_unlabelled`), predicted in fixed-size batches over the mesh (`evaluation.predict_rows`
with the kind's `predict`) and turned into one JSON record per input row, in input order
(`prediction_records`), each starting with "index": the row's position in the input, from 0,
bad rows counted.

Contracts:
- Rows in == records out: every good row gets exactly one record (checked).
- Bad rows (named by file and line): by default a DataError before anything is written;
  with skip_bad_rows they are left out, counted and listed (PredictSummary.bad_rows), and the
  records keep their input index, so rows can be matched.
- Inputs longer than the model's rows are never dropped: contexts are cut into sliding windows;
  with the run's data.long_inputs='truncate' (or PredictOptions.long_inputs), text is
  truncated and words past the row are tagged "O"; with 'slide', texts and sentences are read
  in sliding windows too, folded back into one record per row (kinds.TaskKind.encode_eval);
  how many were cut (or windowed) is counted (PredictSummary.cut) and logged.
- The output file appears only complete: records go to a temporary file beside it, renamed at
  the end (process 0 writes; every process computes).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional

import jax
import numpy as np
from absl import logging

from bert_jax.config import settings
from bert_jax.config.settings import RunSettings
from bert_jax.data import batches, row_layout
from bert_jax.data.finetuning import readers, unlabelled
from bert_jax.recipes import common, run_record
from bert_jax.recipes.finetune import kinds, recipe, task_data
from bert_jax.runtime import outputs, paths, progress, sharding
from bert_jax.train import evaluation

LISTED_BAD_ROWS = 20  # bad rows named in the summary (the log names all of them)


@dataclasses.dataclass(frozen=True)
class PredictOptions:
    input_path: str
    output_path: str  # JSONL, one record per good input row
    step: Optional[int] = None  # None: the newest checkpoint
    batch_size: int = 64  # global rows per model call; must divide by the data-parallel devices
    dtype: Optional[str] = None  # float32 | bfloat16; None: the run's compute dtype
    file_format: Optional[str] = None  # None: the run's config.data.format
    skip_bad_rows: bool = False
    chunk_rows: int = 16384  # rows encoded and predicted at a time (bounds host memory)
    progress: bool = True  # a tqdm bar (rows/s) on stderr
    long_inputs: Optional[str] = None  # truncate | slide; None: the run's data.long_inputs


@dataclasses.dataclass
class PredictSummary:
    workdir: str
    step: int
    dtype: str
    input: str
    output: str
    rows: int  # rows in the input, bad ones included
    records: int  # records written (rows - skipped bad rows)
    bad_rows: list[str]  # "<file>:<line>: <fault>" of each skipped row
    cut: dict[str, int]  # {what was cut short: how many rows}, from encode_unlabelled
    warmup_seconds: float  # the first model call (compilation + one batch), before `seconds`
    seconds: float  # reading aside: encoding, the model and writing, after the warm-up

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["bad_rows_skipped"] = len(self.bad_rows)
        out["bad_rows"] = self.bad_rows[:LISTED_BAD_ROWS]
        out["rows_per_second"] = round(self.records / max(self.seconds, 1e-9), 1)
        return out

    def line(self) -> str:
        """One human line: rows, records, speed, what was cut and skipped."""
        parts = [f"{self.rows} rows -> {self.records} records in {self.seconds:.2f} s "
                 f"({self.records / max(self.seconds, 1e-9):.1f} rows/s, {self.dtype}, "
                 f"+{self.warmup_seconds:.1f} s warm-up)"]
        parts += [f"{count} {what}" for what, count in self.cut.items()]
        parts.append(f"{len(self.bad_rows)} bad rows skipped")
        return "; ".join(parts)


def load_run(workdir: str) -> tuple[Any, kinds.TaskKind, dict[str, Any]]:
    """(config, kind, labels) of a fine-tuning run's workdir; ValueError for any other run."""
    config = run_record.load_config(workdir)
    if config.recipe != "finetune":
        raise ValueError(f"{workdir} holds a {config.recipe!r} run; "
                         "predictions need the workdir of a fine-tuning run (finetune.py)")
    saved_task = task_data.read_task_file(workdir)
    if saved_task is None:
        raise FileNotFoundError(f"{os.path.join(workdir, task_data.TASK_FILE)} not found: "
                                f"is {workdir} the workdir of a finished fine-tuning run?")
    kind = kinds.get(saved_task["task"])
    return config, kind, task_data.labels_of(saved_task)


def read_input(kind: kinds.TaskKind, config: RunSettings, options: PredictOptions
               ) -> unlabelled.Rows:
    """The input's rows; bad rows stop here (a DataError naming the first) unless skipped."""
    file_format = options.file_format or config.data.format
    rows = kind.read_unlabelled(options.input_path, config, file_format)
    if not rows.total:
        raise readers.DataError(f"{options.input_path}: holds no rows")
    if rows.bad and not rows.examples:
        raise readers.DataError(f"every one of the {rows.total} rows is bad; the first: "
                                f"{rows.bad[0]}")
    if rows.bad and not options.skip_bad_rows:
        more = f" (and {len(rows.bad) - 1} more bad rows)" if len(rows.bad) > 1 else ""
        raise readers.DataError(f"{rows.bad[0]}{more}; nothing written (--skip_bad_rows "
                                "predicts the other rows)")
    for fault in rows.bad:
        logging.warning("skipped bad row %s", fault)
    return rows


@dataclasses.dataclass
class Predictor:
    """A run's model on a mesh: predict(params, batch) jitted with replicated outputs."""

    config: RunSettings  # the run's settings
    kind: kinds.TaskKind
    labels: dict[str, Any]
    tokenizer: Any
    mesh: Any
    step: int
    dtype: str
    params: Any
    predict: Callable


def load_predictor(workdir: str, run: RunSettings, kind: kinds.TaskKind,
                   labels: Mapping[str, Any], options: PredictOptions) -> Predictor:
    """The checkpoint of options.step on the devices at hand (the run's mesh if it fits, else
    all data-parallel), computing in options.dtype (default: the run's); `run` the run's
    settings (settings.typed of its config)."""
    mesh = run.mesh.fitted().make()
    settings.check_batch_size(options.batch_size, mesh)
    tokenizer = common.finetuning_tokenizer(run)
    step, cfg, params = common.load_checkpoint(
        workdir, options.step,
        lambda c: recipe.make_init_fn(kind.make_model(c, labels), run.max_seq_len), mesh)
    common.check_token_ids(tokenizer.vocab_size, cfg.vocab_size,
                           f"the vocab_size of the model in {workdir}")
    cfg = cfg.replace(dtype=options.dtype or cfg.dtype)
    predict = jax.jit(recipe.make_predict_fn(kind, kind.make_model(cfg, labels),
                                             run.max_seq_len),
                      out_shardings=sharding.replicated(mesh))
    logging.info("%s step %d (%s, %s): %s on mesh %s", workdir, step, kind.name, cfg.dtype,
                 labels.get("label_map"), dict(mesh.shape))
    return Predictor(run, kind, dict(labels), tokenizer, mesh, step, cfg.dtype, params,
                     predict)


def warm_up(predictor: Predictor, batch_size: int) -> float:
    """Seconds of a first call on an all-padding batch of each length a batch can have (every
    bucket of config.data.bucket_lengths, or max_seq_len): compiles every batch shape, so that
    the rows/s measured after it are those of the model."""
    started = time.perf_counter()
    lengths = task_data.bucket_lengths(predictor.config) or (predictor.config.max_seq_len,)
    for length in lengths:
        zeros = {k: np.zeros((1, length), np.int32) for k in kinds.MODEL_INPUTS}
        batch = next(batches.eval_batches(zeros, batch_size, jax.process_index(),
                                          jax.process_count()))
        jax.block_until_ready(predictor.predict(
            predictor.params, sharding.device_put_batch(batch, predictor.mesh)))
    return time.perf_counter() - started


def _counting(predict: Callable, bar, num_rows: int, batch_size: int,
              example_index: Optional[np.ndarray]) -> Callable:
    """predict, advancing `bar` by the input rows each batch completes: rows, or, for rows
    that are windows of examples (example_index [N] given), the examples they finish."""
    done = {"rows": 0, "examples": 0}

    def call(params, batch):
        out = predict(params, batch)
        done["rows"] = min(done["rows"] + batch_size, num_rows)
        examples = (done["rows"] if example_index is None or done["rows"] == num_rows
                    else int(example_index[done["rows"]]))
        bar.update(examples - done["examples"])
        done["examples"] = examples
        return out
    return call


def predict_records(predictor: Predictor, rows: unlabelled.Rows, options: PredictOptions, bar,
                    cut: dict[str, int]) -> Iterator[dict[str, Any]]:
    """One record per good row, in order ({"index": its input position, **the kind's});
    encoded and predicted chunk_rows at a time; adds the kind's cut counts to `cut`."""
    p, size = predictor, row_layout.round_up(max(options.chunk_rows, 1), options.batch_size)
    for start in range(0, len(rows.examples), size):
        examples = rows.examples[start:start + size]
        features, chunk_cut = p.kind.encode_unlabelled(p.tokenizer, examples, p.config,
                                                       p.labels, options.input_path)
        for what, count in chunk_cut.items():
            cut[what] = cut.get(what, 0) + count
        inputs = {k: features[k] for k in kinds.MODEL_INPUTS}
        predict = _counting(p.predict, bar, len(inputs["input_ids"]), options.batch_size,
                            features.get("example_index"))
        outputs = evaluation.predict_rows(predict, p.params, inputs, options.batch_size,
                                          p.mesh, task_data.eval_buckets(p.config))
        records = p.kind.prediction_records(examples, features, outputs, p.labels, p.config)
        if len(records) != len(examples):
            raise RuntimeError(f"{p.kind.name}: {len(records)} records for {len(examples)} "
                               "rows")  # a bug in the kind, never a user's mistake
        for index, record in zip(rows.indices[start:start + size], records):
            yield {"index": index, **record}


def protected_inputs(workdir: str, input_path: str, run: Optional[RunSettings] = None
                     ) -> list[tuple[str, str]]:
    """What --output must not equal, hold or lie inside (bert_jax.runtime.outputs): the input,
    the files of the run that predicting reads or that the run wrote (config, task,
    checkpoints, its own predictions and evaluations) and, with the run's settings, its
    tokenizer and the model folder it started from."""
    protected = [("the input (--input)", input_path)]
    protected += outputs.run_files(workdir)
    if run is not None:
        protected += [("the run's tokenizer", run.tokenizer.path),
                      ("the model folder the run started from", run.init.hf_dir)]
    return protected


def write_jsonl_atomically(records: Iterable[Mapping[str, Any]], path: str,
                           expected: Optional[int] = None) -> int:
    """Write records as JSON lines to a temporary file beside `path`, then rename it to `path`;
    nothing at `path` changes if writing fails or the count is not `expected` (a RuntimeError).
    Returns the number of records. On object storage (gs://): one object write of all of them."""
    if paths.is_remote(path):
        lines = [json.dumps(record, ensure_ascii=False) + "\n" for record in records]
        if expected is not None and len(lines) != expected:
            raise RuntimeError(f"{expected} good rows but {len(lines)} records")  # a bug
        paths.write_text_atomically(path, "".join(lines))
        return len(lines)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    outputs.clear_leftovers(path)  # a killed earlier write's partial file: named, removed
    temporary = outputs.temporary_beside(path)
    count = 0
    try:
        with outputs.naming(path), open(temporary, "w", encoding="utf-8") as f:
            for count, record in enumerate(records, 1):  # noqa: B007 - read after the loop
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
        if expected is not None and count != expected:
            raise RuntimeError(f"{expected} good rows but {count} records")  # a bug
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    return count


def predict_file(workdir: str, options: PredictOptions) -> PredictSummary:
    """Predict every row of options.input_path with the run in `workdir` (module docstring)."""
    config, kind, labels = load_run(workdir)
    if options.long_inputs is not None:
        config.data.long_inputs = options.long_inputs
    run = settings.typed(config)  # read once, the options applied
    fault = outputs.fault(options.output_path, "--output",
                          protected_inputs(workdir, options.input_path, run))
    if fault:
        raise ValueError(fault)
    task_data.check_long_inputs(run, kind)
    rows = read_input(kind, run, options)
    predictor = load_predictor(workdir, run, kind, labels, options)
    warmup_seconds = warm_up(predictor, options.batch_size)
    cut: dict[str, int] = {}
    started = time.perf_counter()
    writer = jax.process_index() == 0
    with progress.bar(total=len(rows.examples), desc="predicting", unit="rows",
                      wanted=options.progress) as bar:
        records = predict_records(predictor, rows, options, bar, cut)
        written = (write_jsonl_atomically(records, options.output_path, len(rows.examples))
                   if writer else sum(1 for _ in records))
    summary = PredictSummary(workdir, predictor.step, predictor.dtype, options.input_path,
                             options.output_path, rows.total, written, rows.bad, cut,
                             warmup_seconds, time.perf_counter() - started)
    for what, count in cut.items():
        if count:
            logging.warning("%d %s", count, what)
    logging.info("%s", summary.line())
    return summary
