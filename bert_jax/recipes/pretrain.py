"""Masked-LM (+ next-sentence) pre-training: the task, its data, and the recipe's entry points.

    train_and_evaluate(config, workdir)   prepare the data (the demo corpus and its vocabulary on
                                          first use), train with the one loop (resuming from
                                          workdir), evaluate on the held-out split
    evaluate(config, workdir, step=None)  the held-out masked-LM loss and accuracy (plus NSP) of
                                          a saved step, in any process, on any mesh

Config keys beyond the shared ones (bert_jax.recipes.common): `data.corpus` ("demo",
"text:GLOB", a TFDS name, "shards:DIR": prepared token shards, whose folder holds or names the
tokenizer unless tokenizer.path does, the same batches for any number of processes, or
"synthetic": random tokens, no files), `data.data_dir` (default
<workdir>/data), `data.max_predictions`, `data.mask_rate`, `data.eval_mask_rate` (the
held-out rows' rate, default 0.15 whatever the training rate, so runs that train at other rates
stay comparable), `data.whole_word_masking`,
`data.sentence_pairs` (NSP pairs and the NSP head, as in the paper), `data.num_workers`,
`tokenizer.vocab_size` (of the vocabulary trained for the demo when tokenizer.path is empty),
`total_steps`, `eval_batches` (0: the whole held-out split).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterator

import jax
import jax.numpy as jnp
import optax

from bert_jax.config import settings
from bert_jax.config.bert import BertConfig
from bert_jax.model import BertForPreTraining, families
from bert_jax.recipes import common, inputs, run_record
from bert_jax.train import evaluation, flops, loop, program, steps
from bert_jax.train import optimizer as optimizer_lib
from bert_jax.train.checkpoint import workdir as workdir_lib

SYNTHETIC = "synthetic"


def make_loss(model: BertForPreTraining) -> steps.LossFn:
    """Masked-LM (+ NSP when the batch has `nsp_labels`) loss of a BertForPreTraining.

    batch: input_ids, token_type_ids, segment_ids, position_ids [B, L] int32; masked_positions,
    masked_ids [B, P] int32; masked_weights [B, P] float32; optional nsp_labels [B] int32 and
    example_weights [B] float32 (0 for padding rows of a last, partial eval batch).
    """

    def loss_fn(params, batch, rng, deterministic):
        out = model.apply(
            {"params": params}, batch["input_ids"], batch["masked_positions"],
            batch.get("token_type_ids"), None, deterministic,
            segment_ids=batch.get("segment_ids"), position_ids=batch.get("position_ids"),
            rngs=None if deterministic else {"dropout": rng})
        mlm_logits = out.mlm_logits.astype(jnp.float32)  # [B, P, V]
        labels = batch["masked_ids"]
        weights = batch["masked_weights"].astype(jnp.float32)
        cross_entropy = optax.softmax_cross_entropy_with_integer_labels(mlm_logits, labels)
        correct = (jnp.argmax(mlm_logits, axis=-1) == labels).astype(jnp.float32)
        num_predictions = jnp.sum(weights)
        terms = {"mlm_loss": (jnp.sum(cross_entropy * weights), num_predictions)}
        metrics = {"mlm_accuracy": (jnp.sum(correct * weights), num_predictions)}
        if "nsp_labels" in batch:
            if out.nsp_logits is None:
                raise ValueError("the batch has nsp_labels but the model has no NSP head "
                                 "(BertForPreTraining(with_nsp=False))")
            nsp_logits = out.nsp_logits.astype(jnp.float32)  # [B, 2]
            nsp_labels = batch["nsp_labels"]
            rows = batch.get("example_weights", jnp.ones(nsp_labels.shape, jnp.float32))
            nsp_ce = optax.softmax_cross_entropy_with_integer_labels(nsp_logits, nsp_labels)
            nsp_correct = (jnp.argmax(nsp_logits, axis=-1) == nsp_labels).astype(jnp.float32)
            terms["nsp_loss"] = (jnp.sum(nsp_ce * rows), jnp.sum(rows))
            metrics["nsp_accuracy"] = (jnp.sum(nsp_correct * rows), jnp.sum(rows))
        return terms, metrics

    return loss_fn



# ----- data ------------------------------------------------------------------------------------

def pretraining_tokenizer(run: settings.RunSettings, workdir: str):
    """The run's WordPiece tokenizer: tokenizer.path, else the vocabulary of the demo or `text:`
    corpus under the run's data dir (inputs.pretraining_data_config; trained there on the
    corpus's train split on first use, tokenizer.vocab_size tokens); None for the synthetic
    corpus (random token ids, no vocabulary)."""
    if run.data.corpus == SYNTHETIC:
        return None
    from bert_jax.data.pretraining import pipeline as pretraining
    path = pretraining.resolve_vocab_path(inputs.pretraining_data_config(run, workdir))
    return common.read_tokenizer(path, run.tokenizer.lowercase)


def checked_tokenizer(run: settings.RunSettings):
    """The run's tokenizer where it is there to read without writing anything (tokenizer.path,
    or the one a token-shard corpus was prepared with), None where there is none yet (the demo's
    and a text corpus's vocabulary is trained on first use) or none at all (synthetic), after
    the inputs that need no preparation are checked: a `text:` glob that matches no file, a
    tokenizer.path that is not a vocabulary, a corpus that needs a vocabulary and names none
    (ValueError or FileNotFoundError naming the config key)."""
    corpus = run.data.corpus
    if corpus == SYNTHETIC:
        return None
    from bert_jax.data.corpora import catalog as corpora
    from bert_jax.data.pretraining import shard_source
    if corpus.startswith(shard_source.PREFIX):  # the tokenizer the shards were prepared with
        from bert_jax.data.pretraining import shard_iterator
        if run.data.sentence_pairs:
            raise ValueError(f"data.sentence_pairs is not available for token shards ({corpus}): "
                             "they hold documents, not sentences")
        return shard_iterator.load_shard_tokenizer(inputs.pretraining_data_config(run, ""))[0]
    if corpus.startswith(corpora.TEXT_PREFIX):
        corpora.matched_files(corpus[len(corpora.TEXT_PREFIX):])
    if run.tokenizer.path:
        return common.read_tokenizer(run.tokenizer.path, run.tokenizer.lowercase)
    if corpus == corpora.DEMO or corpus.startswith(corpora.TEXT_PREFIX):
        return None  # trained on the corpus on first use
    raise ValueError(f"config.tokenizer.path is empty, and data.corpus={corpus!r} needs a "
                     "vocabulary: train one with experiments/prepare_data.py "
                     f"--corpus='{corpus}' and set --config.tokenizer.path to the vocab.txt it "
                     "prints")


def checked_vocab_size(run: settings.RunSettings) -> int:
    """The size of the run's vocabulary as far as it is known without writing anything: that of
    `checked_tokenizer`, else the configured tokenizer.vocab_size (synthetic tokens, or a
    vocabulary trained on first use)."""
    tokenizer = checked_tokenizer(run)
    return run.tokenizer.vocab_size if tokenizer is None else tokenizer.vocab_size


def vocab_size_of(run: settings.RunSettings, workdir: str) -> int:
    """The tokenizer's vocabulary size; the demo vocabulary is trained here on first use."""
    if run.data.corpus == SYNTHETIC:
        return run.tokenizer.vocab_size
    return pretraining_tokenizer(run, workdir).vocab_size


def check_batch_warmup(run: settings.RunSettings, mesh: Any) -> None:
    """data.batch_warmup_*: a token-shard corpus, and a start that splits over the processes,
    the data-parallel devices and the micro-batches (then so does every warm-up size, all
    multiples of it: bert_jax.data.pretraining.batch_schedule) and is below batch_size."""
    start, tokens = run.data.batch_warmup_start, run.data.batch_warmup_tokens
    if not (start and tokens):
        return
    if not run.data.corpus.startswith("shards:"):
        raise ValueError(f"data.batch_warmup_tokens needs a token-shard corpus (shards:DIR, "
                         f"experiments/prepare_shards.py); corpus {run.data.corpus!r} is not")
    settings.check_batch_size(start, mesh, run.accumulation_steps,
                              key="data.batch_warmup_start")
    if start >= run.batch_size:
        raise ValueError(f"data.batch_warmup_start={start} must be below batch_size="
                         f"{run.batch_size} (the warm-up rises from it to the batch size)")


def make_data(run: settings.RunSettings, workdir: str, vocab_size: int,
              tokenizer: Any = None) -> tuple[Iterator, Callable[[], Iterator]]:
    """(train iterator, make_eval_iterator): host-local batches of this process's rows, made
    with `tokenizer` (the run's, `pretraining_tokenizer`; None: loaded by the pipeline)."""
    process_index, process_count = jax.process_index(), jax.process_count()
    if run.data.corpus == SYNTHETIC:
        from bert_jax.data.pretraining.synthetic import RandomTokenBatches
        shape = dict(seq_len=run.max_seq_len, max_predictions=run.data.max_predictions,
                     vocab_size=vocab_size, process_index=process_index,
                     sentence_pairs=run.data.sentence_pairs)
        train = RandomTokenBatches(run.batch_size // process_count, seed=run.seed,
                                   seconds_per_batch=run.data.seconds_per_batch, **shape)
        return train, lambda: RandomTokenBatches(
            run.eval_batch_size // process_count, seed=run.seed + 1_000_003,
            num_batches=run.eval_batches or 4, **shape)
    from bert_jax.data.pretraining import pipeline as pretraining
    data = inputs.pretraining_data_config(run, workdir)
    train = pretraining.make_iterator(data, split="train", global_batch_size=run.batch_size,
                                      process_index=process_index, process_count=process_count,
                                      num_epochs=None, tokenizer=tokenizer)
    eval_data = dataclasses.replace(data, mask_rate=run.data.eval_mask_rate)
    return train, lambda: pretraining.make_iterator(
        eval_data, split="validation", global_batch_size=run.eval_batch_size,
        process_index=process_index, process_count=process_count, num_epochs=1,
        tokenizer=tokenizer)


# ----- the task --------------------------------------------------------------------------------

def make_model(run: settings.RunSettings, cfg: BertConfig
               ) -> BertForPreTraining:
    """The masked-LM model of cfg's family (BertForPreTraining, ModernBertForMaskedLM), with
    the NSP head when the run trains on sentence pairs (BERT only)."""
    return families.of(cfg).masked_lm(cfg, with_nsp=bool(run.data.sentence_pairs))


def make_init_fn(model: BertForPreTraining, run: settings.RunSettings
                 ) -> Callable[[jax.Array], Any]:
    """rng -> boxed params of the model, traced on one row of the run's shapes."""
    seq_len, max_predictions = run.max_seq_len, run.data.max_predictions

    def init_fn(rng):
        ids = jnp.zeros((1, seq_len), jnp.int32)
        positions = jnp.zeros((1, max_predictions), jnp.int32)
        return model.init(rng, ids, positions, ids, None, True, segment_ids=jnp.ones_like(ids),
                          position_ids=jnp.arange(seq_len, dtype=jnp.int32)[None])["params"]

    return init_fn


def make_task(run: settings.RunSettings, cfg: BertConfig,
              initial_params: Any = None) -> loop.Task:
    """The pre-training Task of model config `cfg` (its rows must fit: settings.check_lengths)."""
    settings.check_lengths(run, cfg)
    model = make_model(run, cfg)
    with_nsp = bool(run.data.sentence_pairs)
    return loop.Task(
        model_config=cfg, init_fn=make_init_fn(model, run), loss_fn=make_loss(model),
        initial_params=initial_params,
        flops_per_step=flops.pretraining_flops_per_step(
            cfg, run.batch_size, run.max_seq_len, run.data.max_predictions, with_nsp),
        tokens_per_step=run.batch_size * run.max_seq_len,
        checkpoint_metadata={"recipe": "pretrain", "with_nsp": with_nsp})


# ----- the pieces, for callers that drive the steps themselves ----------------------------------

@dataclasses.dataclass
class Pieces:
    """What train_and_evaluate hands loop.train, for a caller that runs the steps itself
    (benchmarks/compare_pretraining.py races them against other implementations)."""

    task: loop.Task
    optimizer: optax.GradientTransformation
    learning_rate_fn: optax.Schedule
    loop_config: settings.LoopConfig
    train_iterator: Iterator
    make_eval_iterator: Callable[[], Iterator]
    mesh: Any

    def build(self) -> program.TrainProgram:
        """The fresh TrainState and the jitted train step that loop.train builds from these
        pieces (bert_jax.train.program.build); the step donates the state."""
        return program.build(self.task, self.optimizer, self.loop_config, self.mesh,
                             learning_rate_fn=self.learning_rate_fn,
                             train_iterator=self.train_iterator)


def pieces(config: settings.Config, workdir: str) -> Pieces:
    """The pieces of a run, checked and assembled as train_and_evaluate assembles them, without
    taking the workdir's lock, recording the config or training (nor checking the config
    against the schema: settings.typed)."""
    run = settings.typed(config)
    run = run.for_steps(run.total_steps)
    mesh = run.mesh.make()
    init_cfg, initial_params = common.initial_weights(run)
    tokenizer = pretraining_tokenizer(run, workdir)
    vocab_size = run.tokenizer.vocab_size if tokenizer is None else tokenizer.vocab_size
    cfg = common.model_config(run, vocab_size, init_cfg)
    run.check_fits(mesh, cfg)
    check_batch_warmup(run, mesh)
    train_iterator, make_eval_iterator = make_data(run, workdir, vocab_size, tokenizer)
    return Pieces(make_task(run, cfg, initial_params),
                  optimizer_lib.make_optimizer(run.optimizer),
                  optimizer_lib.learning_rate_schedule(run.optimizer), run.loop,
                  train_iterator, make_eval_iterator, mesh)


# ----- entry points ----------------------------------------------------------------------------

def train_and_evaluate(config: settings.Config, workdir: str) -> loop.TrainResult:
    """Read the config (settings.read) and check the run, then (holding the workdir) prepare
    data, build the task and train, resuming from workdir. Errors name the fault; a config
    refused leaves the workdir as it was (every check that needs no preparation comes before
    the workdir's lock). The tokenizer is read once (a demo or text corpus's is trained on
    first use, under the lock) and handed to the model config and the data pipeline."""
    run = settings.read(config, "pretrain")
    mesh = run.mesh.make()
    tokenizer = checked_tokenizer(run)
    init_cfg, initial_params = common.initial_weights(run, workdir)
    vocab_size = run.tokenizer.vocab_size if tokenizer is None else tokenizer.vocab_size
    cfg = common.model_config(run, vocab_size, init_cfg)
    run.check_fits(mesh, cfg)
    check_batch_warmup(run, mesh)
    with workdir_lib.lock(workdir):
        run_record.record_config(run.record, workdir)
        if tokenizer is None and run.data.corpus != SYNTHETIC:  # trained on first use
            tokenizer = pretraining_tokenizer(run, workdir)
            cfg = common.model_config(run, tokenizer.vocab_size, init_cfg)
        vocab_size = run.tokenizer.vocab_size if tokenizer is None else tokenizer.vocab_size
        task = make_task(run, cfg, initial_params)
        train_iterator, make_eval_iterator = make_data(run, workdir, vocab_size, tokenizer)
        evaluate_fn = evaluation.LossEvaluator(task.loss_fn, make_eval_iterator, mesh,
                                               max_batches=run.eval_batches)
        return common.train(run, workdir, task, train_iterator, mesh, run.total_steps,
                            evaluate=evaluate_fn)


def evaluate(config: settings.Config, workdir: str, step: int | None = None
             ) -> tuple[int, dict[str, float]]:
    """(step, held-out metrics) of a saved step (default: the newest) of a pre-training run;
    `config` the run's (bert_jax.recipes.run_record.load_config), read once here
    (settings.typed)."""
    run = settings.typed(config)
    mesh = run.mesh.make()
    step, cfg, params = common.load_checkpoint(
        workdir, step, lambda c: make_init_fn(make_model(run, c), run), mesh)
    task = make_task(run, cfg)
    tokenizer = pretraining_tokenizer(run, workdir)
    vocab_size = run.tokenizer.vocab_size if tokenizer is None else tokenizer.vocab_size
    _, make_eval_iterator = make_data(run, workdir, vocab_size, tokenizer)
    evaluate_fn = evaluation.LossEvaluator(task.loss_fn, make_eval_iterator, mesh,
                                           max_batches=run.eval_batches)
    return step, evaluate_fn(params)
