"""Fine-tuning: task heads, their losses and predictions, plugged into the one training loop.

Four task kinds (the `task` key of a fine-tuning config):

    classification         pooled output -> dense: logits [B, C], cross-entropy  (SST-2, MRPC, MNLI)
    regression             pooled output -> dense: score [B], squared error       (STS-B)
    token_classification   every token -> dense: logits [B, L, C], cross-entropy on the first
                           sub-word of each word only                              (CoNLL NER)
    span_qa                every token -> (start, end) logits [B, L], the mean of the two
                           cross-entropies                                        (SQuAD 1.1 / 2.0)

The pieces for `bert_jax.train.loop`: `make_model`, `make_loss_fn` (a steps.LossFn of sums and
weights, padding rows weighted 0) and `make_evaluator`, whose evaluate(params) predicts the whole
eval set and scores it with the task's metrics (accuracy/F1/MCC, Pearson/Spearman, entity F1,
EM/F1). The drivers, used by experiments/finetune.py and experiments/evaluate.py:

    train_and_evaluate(config, workdir)      fine-tune (resuming from workdir), then write the
                                             metrics and predictions of the final step into
                                             <workdir>/predictions/step_<N>/
    evaluate_checkpoint(config, workdir)     reload a saved step in a new process and write the
                                             same files into <workdir>/evaluation/step_<N>/

Initialisation (config.init): a Hugging Face BERT folder (`hf_dir`), a pre-training workdir's
checkpoints (`checkpoint`), or neither (random init of config.model.preset). The encoder comes
from there; the task head starts fresh (or, with init.with_heads, from the HF folder's head).
The label map is built from the training labels and saved with every checkpoint and in
<workdir>/task.json, so evaluation maps classes the same way.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable, Mapping, Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging

from bert_jax import sharding
from bert_jax.config import BertConfig
from bert_jax.convert import hf
from bert_jax.data import squad, tasks
from bert_jax.data import tokenizer as tok
from bert_jax.model import (BertForQuestionAnswering, BertForSequenceClassification,
                            BertForTokenClassification)
from bert_jax.train import checkpointing, flops, loop, metrics, optimizer, steps

KINDS = ("classification", "regression", "token_classification", "span_qa")
TASK_FILE = "task.json"
Predictions = dict[str, np.ndarray]


def check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"config.task={kind!r} is unknown; choose one of {KINDS}")


def minilm_dir_if_installed() -> str:
    """The packaged MiniLM weights as the encoder to start from, or "" (random init) without them."""
    try:
        return hf.packaged_minilm_dir()
    except FileNotFoundError:
        return ""


def default_config():
    """Every key a fine-tuning config has, with the usual values (lr 2e-5..5e-5, 2-3 epochs,
    10% warm-up); the files in experiments/configs/finetune_*.py set the task-specific ones."""
    import ml_collections
    from ml_collections import config_dict

    config = ml_collections.ConfigDict()
    config.experiment = "finetune"
    config.task = "classification"  # classification | regression | token_classification | span_qa
    # Where the encoder starts: a Hugging Face BERT folder, or the checkpoints folder of a
    # pre-training run (<workdir>/checkpoints); neither: random init of config.model.preset.
    config.init = ml_collections.ConfigDict(dict(
        hf_dir="", checkpoint="",
        with_heads=False))  # True: also keep a task head of the HF folder whose shape fits
    config.tokenizer = ""  # vocab.txt, tokenizer.json or a folder; default: init.hf_dir
    config.lowercase = True  # for a vocab.txt (a tokenizer.json carries its own normalizer)
    config.model = ml_collections.ConfigDict(dict(
        preset="tiny",  # used only without init
        vocab_size=config_dict.placeholder(int), hidden_size=config_dict.placeholder(int),
        num_hidden_layers=config_dict.placeholder(int),
        num_attention_heads=config_dict.placeholder(int),
        intermediate_size=config_dict.placeholder(int),
        max_position_embeddings=config_dict.placeholder(int),
        hidden_dropout_prob=config_dict.placeholder(float),
        attention_probs_dropout_prob=config_dict.placeholder(float)))
    config.dtype = "float32"
    config.data = ml_collections.ConfigDict(dict(
        train_path="", eval_path="",
        format="auto",  # csv | tsv | jsonl | fasttext (by extension when auto)
        encoding="utf-8",
        text_column="text", text_pair_column="", label_column="label",
        conll_tag_column=-1,
        heldout_fraction=0.0,  # > 0: hold this part of train_path out for evaluation
        split_seed=0,
        tfds_name="",  # glue/sst2 | glue/mrpc | glue/stsb | glue/mnli | conll2003 | squad ...
        tfds_train_split="train", tfds_eval_split="validation", tfds_data_dir="",
        tfds_download=True))
    config.max_seq_len = 128
    config.squad = ml_collections.ConfigDict(dict(
        doc_stride=128, max_query_len=64, n_best=20, max_answer_length=30, version_2=False,
        no_answer_threshold=0.0))
    config.batch_size = 32
    config.eval_batch_size = 64
    config.epochs = 3.0
    config.total_steps = 0  # 0: from epochs
    config.learning_rate = 3e-5
    config.warmup_fraction = 0.1
    config.optimizer = ml_collections.ConfigDict(dict(
        name="adamw", decay="linear", end_learning_rate_ratio=0.0, b1=0.9, b2=0.999, eps=1e-6,
        weight_decay=0.01, clip_norm=1.0))
    config.seed = 0
    config.log_every_steps = 10
    config.eval_every_steps = 0  # 0: only at the end
    config.checkpoint_every_steps = 0  # 0: only at the end (and on SIGTERM)
    config.keep_checkpoints = 1
    config.async_checkpoints = True
    config.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, tensor=1))
    config.peak_flops_per_device = 0.0
    return config


# ----- model, loss, prediction -----------------------------------------------------------------

def make_model(kind: str, cfg: BertConfig, num_labels: int) -> nn.Module:
    check_kind(kind)
    if kind == "classification":
        return BertForSequenceClassification(cfg, num_labels)
    if kind == "regression":
        return BertForSequenceClassification(cfg, 1)
    if kind == "token_classification":
        return BertForTokenClassification(cfg, num_labels)
    return BertForQuestionAnswering(cfg)


def make_init_fn(model: nn.Module, seq_len: int) -> Callable[[jax.Array], Any]:
    def init_fn(rng):
        ids = jnp.zeros((1, seq_len), jnp.int32)
        return model.init(rng, ids, ids, jnp.ones_like(ids), True)["params"]
    return init_fn


def _forward(model: nn.Module, params, batch, rng, deterministic: bool):
    return model.apply({"params": params}, batch["input_ids"], batch["token_type_ids"],
                       batch["attention_mask"], deterministic,
                       rngs=None if deterministic else {"dropout": rng})


def _row_weights(batch) -> jax.Array:
    """[B] float32: 1 for real rows, 0 for the padding rows of a last eval batch."""
    return batch.get("example_weights", jnp.ones(batch["input_ids"].shape[:1], jnp.float32))


def _span_logits(start, end, attention_mask):
    """Padding positions can be neither start nor end: their logits -> a large negative."""
    invalid = attention_mask == 0
    return (jnp.where(invalid, -1e9, start.astype(jnp.float32)),
            jnp.where(invalid, -1e9, end.astype(jnp.float32)))


def make_loss_fn(kind: str, model: nn.Module) -> steps.LossFn:
    """loss_fn(params, batch, rng, deterministic) -> (loss terms, metrics) as (sum, weight) pairs.

    batch: input_ids, token_type_ids, attention_mask [B, L] int32; labels [B] (classification:
    int32, regression: float32) or [B, L] int32 with IGNORE (token classification), or
    start_positions, end_positions [B] int32 (span QA); optional example_weights [B].
    """
    check_kind(kind)

    def loss_fn(params, batch, rng, deterministic):
        outputs = _forward(model, params, batch, rng, deterministic)
        rows = _row_weights(batch)
        count = jnp.sum(rows)
        if kind == "classification":
            logits = outputs.astype(jnp.float32)
            labels = batch["labels"]
            cross_entropy = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
            correct = (jnp.argmax(logits, -1) == labels).astype(jnp.float32)
            return ({"cross_entropy": (jnp.sum(cross_entropy * rows), count)},
                    {"accuracy": (jnp.sum(correct * rows), count)})
        if kind == "regression":
            error = outputs[:, 0].astype(jnp.float32) - batch["labels"]
            return {"squared_error": (jnp.sum(error ** 2 * rows), count)}, {}
        if kind == "token_classification":
            logits = outputs.astype(jnp.float32)  # [B, L, C]
            labels = batch["labels"]
            tagged = (labels != tasks.IGNORE).astype(jnp.float32) * rows[:, None]
            safe_labels = jnp.where(labels == tasks.IGNORE, 0, labels)
            cross_entropy = optax.softmax_cross_entropy_with_integer_labels(logits, safe_labels)
            correct = (jnp.argmax(logits, -1) == safe_labels).astype(jnp.float32)
            num_tagged = jnp.sum(tagged)
            return ({"cross_entropy": (jnp.sum(cross_entropy * tagged), num_tagged)},
                    {"token_accuracy": (jnp.sum(correct * tagged), num_tagged)})
        start, end = _span_logits(*outputs, batch["attention_mask"])
        span_loss = 0.5 * (
            optax.softmax_cross_entropy_with_integer_labels(start, batch["start_positions"])
            + optax.softmax_cross_entropy_with_integer_labels(end, batch["end_positions"]))
        return {"span_loss": (jnp.sum(span_loss * rows), count)}, {}

    return loss_fn


def make_predict_fn(kind: str, model: nn.Module) -> Callable[[Any, Mapping], dict]:
    """predict(params, batch) -> {"logits": ...} or {"start_logits", "end_logits"}, float32."""
    check_kind(kind)

    def predict(params, batch):
        outputs = _forward(model, params, batch, None, True)
        if kind == "span_qa":
            start, end = _span_logits(*outputs, batch["attention_mask"])
            return {"start_logits": start, "end_logits": end}
        return {"logits": outputs.astype(jnp.float32)}

    return predict


MODEL_INPUTS = ("input_ids", "token_type_ids", "attention_mask")


def predict_rows(predict_fn: Callable, params, features: Mapping[str, np.ndarray],
                 global_batch_size: int, mesh) -> Predictions:
    """Model outputs for every row of `features`, in order, as host numpy arrays.

    Batches are padded to one fixed size (one compilation); outputs are replicated so every
    process gets all rows. predict_fn should be jitted with replicated out_shardings.
    """
    inputs = {name: features[name] for name in MODEL_INPUTS}
    num_rows = len(inputs["input_ids"])
    collected: dict[str, list[np.ndarray]] = {}
    batches = tasks.eval_batches(inputs, global_batch_size, jax.process_index(),
                                 jax.process_count())
    for start, batch in zip(range(0, num_rows, global_batch_size), batches):
        outputs = jax.device_get(predict_fn(params, sharding.device_put_batch(batch, mesh)))
        real = min(global_batch_size, num_rows - start)
        for name, value in outputs.items():
            collected.setdefault(name, []).append(np.asarray(value)[:real])
    return {name: np.concatenate(parts) for name, parts in collected.items()}


# ----- the data of a run -----------------------------------------------------------------------

@dataclasses.dataclass
class TaskData:
    """Examples and features of a run: what training reads and what evaluation scores."""

    kind: str
    label_map: Optional[tuple[str, ...]]  # None for regression and span QA
    train_examples: list
    eval_examples: list
    train_features: Optional[dict[str, np.ndarray]]
    eval_features: dict[str, np.ndarray]
    majority_label: Optional[str] = None  # classification: the most frequent training label


def _read(config, kind: str, split: str) -> list:
    """Examples of one split ("train" or "eval") from config.data (files or a TFDS name)."""
    data = config.data
    if data.tfds_name:
        tfds_split = data.tfds_train_split if split == "train" else data.tfds_eval_split
        return tasks.read_tfds(data.tfds_name, tfds_split, data.tfds_data_dir or None,
                               data.tfds_download)
    path = data.train_path if split == "train" else data.eval_path
    if not path:
        raise ValueError(f"config.data.{split}_path is empty (and config.data.tfds_name too)")
    if kind in ("classification", "regression"):
        return tasks.read_text_examples(
            path, data.format, data.text_column, data.label_column,
            data.text_pair_column or None, regression=kind == "regression",
            encoding=data.encoding)
    if kind == "token_classification":
        return tasks.read_conll(path, data.conll_tag_column, data.encoding)
    return tasks.read_squad_json(path)


def read_examples(config) -> tuple[list, list]:
    """(train, eval) examples: eval from its own file/split, or held out from train."""
    kind = config.task
    train = _read(config, kind, "train")
    has_eval = bool(config.data.eval_path or config.data.tfds_name)
    if config.data.heldout_fraction > 0:
        if has_eval and not config.data.tfds_name:
            raise ValueError("set either config.data.eval_path or config.data.heldout_fraction, "
                             "not both")
        return tasks.holdout_split(train, config.data.heldout_fraction, config.data.split_seed,
                                   stratify_by_label=kind == "classification")
    if not has_eval:
        raise ValueError("no evaluation data: set config.data.eval_path, a TFDS name, or "
                         "config.data.heldout_fraction")
    return train, _read(config, kind, "eval")


def window_config(config) -> squad.WindowConfig:
    return squad.WindowConfig(config.max_seq_len, config.squad.doc_stride,
                              config.squad.max_query_len)


def encode(kind: str, tokenizer: tok.WordPieceTokenizer, examples: Sequence, config,
           label_map: Optional[Sequence[str]], source: str) -> dict[str, np.ndarray]:
    if kind in ("classification", "regression"):
        return tasks.encode_text_examples(tokenizer, examples, config.max_seq_len, label_map,
                                          source)
    if kind == "token_classification":
        return tasks.encode_tagged_sentences(tokenizer, examples, config.max_seq_len, label_map,
                                             source)
    return squad.encode_qa_examples(tokenizer, examples, window_config(config))


def build_task_data(config, tokenizer: tok.WordPieceTokenizer,
                    saved_task: Optional[Mapping[str, Any]] = None,
                    with_train_features: bool = True) -> TaskData:
    """Read, label and encode a run's data. `saved_task` (from task.json) fixes the label map."""
    kind = config.task
    check_kind(kind)
    train, evaluation = read_examples(config)
    label_map, majority = None, None
    if kind == "classification":
        label_map = tasks.build_label_map([e.label for e in train])
        majority = tasks.majority_label([e.label for e in train])
    elif kind == "token_classification":
        label_map = tasks.build_label_map([t for s in train for t in s.tags])
    if saved_task is not None:
        label_map = tuple(saved_task["label_map"]) if saved_task["label_map"] else None
        majority = saved_task.get("majority_label")
    eval_source = config.data.eval_path or (
        f"tfds:{config.data.tfds_name}/{config.data.tfds_eval_split}" if config.data.tfds_name
        else f"held-out part of {config.data.train_path}")
    train_features = (encode(kind, tokenizer, train, config, label_map,
                             config.data.train_path or "train") if with_train_features else None)
    eval_features = encode(kind, tokenizer, evaluation, config, label_map, eval_source)
    return TaskData(kind, label_map, train, evaluation, train_features, eval_features, majority)


# ----- scoring ----------------------------------------------------------------------------------

def score(data: TaskData, outputs: Predictions, config) -> tuple[dict[str, float], Any]:
    """(metrics, prediction records) of the eval set from the model outputs of its rows."""
    kind, examples = data.kind, data.eval_examples
    if kind == "classification":
        predicted = np.argmax(outputs["logits"], -1)
        labels = data.eval_features["labels"]
        num_classes = len(data.label_map)
        result = {"accuracy": metrics.accuracy(predicted, labels),
                  "f1": metrics.f1_score(predicted, labels, num_classes),
                  "mcc": metrics.matthews_corrcoef(predicted, labels, num_classes),
                  "majority_baseline_accuracy": float(np.mean(
                      [e.label == data.majority_label for e in examples]))}
        logits = outputs["logits"] - outputs["logits"].max(-1, keepdims=True)
        probabilities = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
        records = [{"index": i, "text": e.text, "text_pair": e.text_pair, "label": e.label,
                    "prediction": data.label_map[p],
                    "probabilities": [round(float(x), 6) for x in probabilities[i]]}
                   for i, (e, p) in enumerate(zip(examples, predicted))]
        return result, records
    if kind == "regression":
        predicted = outputs["logits"][:, 0]
        labels = data.eval_features["labels"]
        result = {"pearson": metrics.pearson(predicted, labels),
                  "spearman": metrics.spearman(predicted, labels),
                  "mse": float(np.mean((predicted - labels) ** 2))}
        records = [{"index": i, "text": e.text, "text_pair": e.text_pair, "label": e.label,
                    "prediction": float(p)} for i, (e, p) in enumerate(zip(examples, predicted))]
        return result, records
    if kind == "token_classification":
        predicted = np.argmax(outputs["logits"], -1)
        tags = tasks.tags_from_token_predictions(
            predicted, data.eval_features["word_index"], [len(s.words) for s in examples],
            data.label_map)
        result = metrics.entity_scores(tags, [list(s.tags) for s in examples])
        return result, list(zip(examples, tags))
    q = config.squad
    answers = squad.decode_answers(
        examples, data.eval_features, outputs["start_logits"], outputs["end_logits"],
        n_best=q.n_best, max_answer_length=q.max_answer_length, allow_no_answer=q.version_2,
        no_answer_threshold=q.no_answer_threshold)
    result = metrics.squad_scores({qid: a.text for qid, a in answers.items()},
                                  {e.id: [a.text for a in e.answers] for e in examples})
    return result, answers


def write_predictions(kind: str, records: Any, directory: str) -> list[str]:
    """Prediction files in `directory`: jsonl (classification, regression), CoNLL (NER: word,
    gold tag, predicted tag), SQuAD's predictions.json (+ null_odds.json for the no-answer
    threshold search) and nbest.json. Returns the paths written."""
    os.makedirs(directory, exist_ok=True)
    if kind in ("classification", "regression"):
        path = os.path.join(directory, "predictions.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for record in records:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
        return [path]
    if kind == "token_classification":
        path = os.path.join(directory, "predictions.conll")
        with open(path, "w", encoding="utf-8") as f:
            for sentence, tags in records:
                for word, gold, predicted in zip(sentence.words, sentence.tags, tags):
                    f.write(f"{word} {gold} {predicted}\n")
                f.write("\n")
        return [path]
    paths = [os.path.join(directory, name)
             for name in ("predictions.json", "null_odds.json", "nbest.json")]
    contents = (
        {qid: a.text for qid, a in records.items()},
        {qid: float(a.null_score - a.best_span_score) if np.isfinite(a.best_span_score)
         else 1e9 for qid, a in records.items()},
        {qid: [{"text": text, "score": float(s)} for text, s in a.nbest]
         for qid, a in records.items()})
    for path, content in zip(paths, contents):
        with open(path, "w", encoding="utf-8") as f:
            json.dump(content, f, indent=1, ensure_ascii=False)
    return paths


class Evaluator:
    """evaluate(params) -> metrics of the whole eval set; keeps the last prediction records.

    Plugs into loop.train(evaluate=...); also used alone by evaluate_checkpoint, so both score
    with the same compiled prediction function and the same decoding.
    """

    def __init__(self, data: TaskData, model: nn.Module, config, mesh):
        self.data, self.config, self.mesh = data, config, mesh
        self.predict = jax.jit(make_predict_fn(data.kind, model),
                               out_shardings=sharding.replicated(mesh))
        self.last_records: Any = None

    def __call__(self, params) -> dict[str, float]:
        outputs = predict_rows(self.predict, params, self.data.eval_features,
                               self.config.eval_batch_size, self.mesh)
        result, self.last_records = score(self.data, outputs, self.config)
        return result


def write_results(directory: str, step: int, result: Mapping[str, float], kind: str,
                  records: Any) -> None:
    """<directory>/metrics.json and the prediction files (process 0 only)."""
    if jax.process_index() != 0:
        return
    paths = write_predictions(kind, records, directory)
    with open(os.path.join(directory, "metrics.json"), "w", encoding="utf-8") as f:
        json.dump({"step": step, "metrics": result}, f, indent=2)
    logging.info("step %d metrics %s; predictions in %s", step, result, paths)


# ----- runs --------------------------------------------------------------------------------------

def load_tokenizer(config) -> tok.WordPieceTokenizer:
    path = config.tokenizer or config.init.hf_dir
    if not path:
        raise ValueError("config.tokenizer is empty and there is no config.init.hf_dir to take "
                         "the vocabulary from: name a vocab.txt, tokenizer.json or folder")
    return tok.load_tokenizer(path, lowercase=config.lowercase)


def _model_overrides(config) -> dict[str, Any]:
    overrides = {"dtype": config.dtype}
    for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
        value = config.model.get(name)
        if value is not None:
            overrides[name] = value
    return overrides


def initial_encoder(config, vocab_size: int) -> tuple[BertConfig, Optional[dict]]:
    """(BertConfig, initial params: {"bert": encoder} (+ HF heads with init.with_heads) or None)
    from config.init (module docstring)."""
    overrides = _model_overrides(config)
    if config.init.hf_dir and config.init.checkpoint:
        raise ValueError("set config.init.hf_dir or config.init.checkpoint, not both")
    if config.init.hf_dir:
        with_heads = bool(config.init.get("with_heads", False))
        cfg, params = hf.load(config.init.hf_dir, with_heads=with_heads, **overrides)
        initial = params if "bert" in params else {"bert": params}
    elif config.init.checkpoint:
        cfg, params = checkpointing.load_params(config.init.checkpoint)
        cfg = cfg.replace(**overrides)
        initial = {"bert": jax.device_get(params).get("bert", params)}
    else:
        model = config.model.to_dict()
        preset = model.pop("preset")
        fields = {k: v for k, v in model.items() if v is not None}
        fields.setdefault("vocab_size", vocab_size)
        return BertConfig.preset(preset, **{**fields, **overrides}), None
    if cfg.vocab_size < vocab_size:
        raise ValueError(f"the tokenizer has {vocab_size} tokens but the initial model's "
                         f"vocab_size is {cfg.vocab_size}: they do not belong together")
    return cfg, initial


def _check_lengths(config, cfg: BertConfig) -> None:
    if config.max_seq_len > cfg.max_position_embeddings:
        raise ValueError(f"config.max_seq_len={config.max_seq_len} exceeds the model's "
                         f"max_position_embeddings={cfg.max_position_embeddings}")


def make_task(config, cfg: BertConfig, data: TaskData, initial_params=None) -> loop.Task:
    num_labels = len(data.label_map) if data.label_map else 1
    model = make_model(data.kind, cfg, num_labels)
    outputs = {"classification": num_labels, "regression": 1,
               "token_classification": num_labels * config.max_seq_len,
               "span_qa": 2 * config.max_seq_len}[data.kind]
    return loop.Task(
        model_config=cfg, init_fn=make_init_fn(model, config.max_seq_len),
        loss_fn=make_loss_fn(data.kind, model), initial_params=initial_params,
        flops_per_step=flops.encoder_flops_per_step(cfg, config.batch_size, config.max_seq_len,
                                                    outputs),
        tokens_per_step=config.batch_size * config.max_seq_len,
        checkpoint_metadata={"experiment": "finetune", "task": data.kind,
                             "label_map": list(data.label_map or []),
                             "majority_label": data.majority_label})


def schedule_steps(config, num_train_rows: int) -> tuple[int, int]:
    """(total optimizer steps, warm-up steps) from epochs and the warm-up fraction."""
    total = config.total_steps or loop.steps_for_epochs(num_train_rows, config.batch_size,
                                                        config.epochs)
    return total, int(round(config.warmup_fraction * total))


def _save_task_file(workdir: str, data: TaskData) -> None:
    if jax.process_index() == 0:
        os.makedirs(workdir, exist_ok=True)
        with open(os.path.join(workdir, TASK_FILE), "w", encoding="utf-8") as f:
            json.dump({"task": data.kind, "label_map": list(data.label_map or []),
                       "majority_label": data.majority_label,
                       "num_train_examples": len(data.train_examples),
                       "num_eval_examples": len(data.eval_examples)}, f, indent=2)


def _read_task_file(workdir: str) -> Optional[dict]:
    path = os.path.join(workdir, TASK_FILE)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def train_and_evaluate(config, workdir: str) -> tuple[loop.TrainResult, dict[str, float]]:
    """Fine-tune as config says (resuming from workdir), then evaluate the final step."""
    mesh = sharding.make_mesh(config.mesh.data, config.mesh.fsdp, config.mesh.tensor)
    loop.check_batch_size(config.batch_size, mesh)
    loop.check_batch_size(config.eval_batch_size, mesh)
    tokenizer = load_tokenizer(config)
    cfg, initial_params = initial_encoder(config, tokenizer.vocab_size)
    _check_lengths(config, cfg)
    data = build_task_data(config, tokenizer, saved_task=_read_task_file(workdir))
    _save_task_file(workdir, data)
    num_rows = len(data.train_features["input_ids"])
    total_steps, warmup_steps = schedule_steps(config, num_rows)
    opt_config = optimizer.OptimizerConfig(
        learning_rate=config.learning_rate, total_steps=total_steps, warmup_steps=warmup_steps,
        **config.optimizer.to_dict())
    task = make_task(config, cfg, data, initial_params)
    evaluator = Evaluator(data, make_model(data.kind, cfg, len(data.label_map or [None])),
                          config, mesh)
    train_features = {k: v for k, v in data.train_features.items()
                      if k in MODEL_INPUTS + ("labels", "start_positions", "end_positions")}
    iterator = tasks.train_batches(train_features, config.batch_size, config.seed,
                                   jax.process_index(), jax.process_count())
    logging.info("%s: %d train rows (%d examples), %d eval examples; %d steps (%d warm-up); "
                 "labels %s", data.kind, num_rows, len(data.train_examples),
                 len(data.eval_examples), total_steps, warmup_steps, data.label_map)
    loop_config = loop.LoopConfig(
        total_steps=total_steps, global_batch_size=config.batch_size,
        log_every_steps=config.log_every_steps, eval_every_steps=config.eval_every_steps,
        checkpoint_every_steps=config.checkpoint_every_steps,
        keep_checkpoints=config.keep_checkpoints, async_checkpoints=config.async_checkpoints,
        seed=config.seed, peak_flops_per_device=config.peak_flops_per_device)
    result = loop.train(task, optimizer.make_optimizer(opt_config), iterator, workdir,
                        loop_config, mesh, learning_rate_fn=optimizer.learning_rate_schedule(
                            opt_config), evaluate=evaluator)
    final = result.last_eval_metrics or {}
    if not result.preempted and evaluator.last_records is not None:
        write_results(os.path.join(workdir, "predictions", f"step_{result.step}"), result.step,
                      final, data.kind, evaluator.last_records)
    return result, final


def evaluate_checkpoint(config, workdir: str, step: Optional[int] = None,
                        output_dir: Optional[str] = None) -> tuple[int, dict[str, float]]:
    """(step, metrics) of a saved step (default: the newest), with its predictions written to
    output_dir (default <workdir>/evaluation/step_<N>/). Runs in any process: the model config,
    params and label map come from the workdir, the data and tokenizer from `config`."""
    checkpoint_dir = os.path.join(workdir, "checkpoints")
    step = checkpointing.resolve_step(checkpoint_dir, step)
    cfg, params = checkpointing.load_params(checkpoint_dir, step)
    saved_task = _read_task_file(workdir)
    if saved_task is None:
        raise FileNotFoundError(f"{os.path.join(workdir, TASK_FILE)} not found: is {workdir} the "
                                "workdir of a fine-tuning run?")
    mesh = sharding.make_mesh(config.mesh.data, config.mesh.fsdp, config.mesh.tensor)
    tokenizer = load_tokenizer(config)
    data = build_task_data(config, tokenizer, saved_task=saved_task, with_train_features=False)
    model = make_model(data.kind, cfg, len(data.label_map or [None]))
    abstract = jax.eval_shape(make_init_fn(model, config.max_seq_len), jax.random.PRNGKey(0))
    param_shardings = sharding.shardings_for(nn.meta.unbox(abstract),
                                             sharding.logical_specs(abstract), mesh)
    params = jax.tree.map(jax.device_put, params, param_shardings)
    evaluator = Evaluator(data, model, config, mesh)
    result = evaluator(params)
    write_results(output_dir or os.path.join(workdir, "evaluation", f"step_{step}"), step,
                  result, data.kind, evaluator.last_records)
    return step, result
