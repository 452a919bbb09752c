"""What every recipe builds the same way from its settings: model config, initial weights,
tokenizer, the train program and loop, and a checkpoint's parameters placed on the mesh. (The
settings, read from the config once and checked: bert_jax.config.settings. A saved run's
tokenizer, whatever its recipe: bert_jax.tools.saved_runs.)

Each function takes the run's RunSettings (`run`), never its ConfigDict: a caller holding a
config reads it once first (settings.read for a new run's, settings.typed for a saved one's).
The keys mean the same in every recipe; bert_jax/config/run.py is their schema (each key once,
with its default and its meaning).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import jax
from absl import logging

from bert_jax.config.bert import BertConfig
from bert_jax.config.settings import RunSettings
from bert_jax.model import families
from bert_jax.runtime import sharding
from bert_jax.train import loop, optimizer, program
from bert_jax.train.checkpoint import params as params_loading
from bert_jax.train.checkpoint import store as checkpointing


def model_config(run: RunSettings, vocab_size: int, base: Optional[BertConfig] = None
                 ) -> BertConfig:
    """The run's model config (BertConfig or ModernBertConfig: bert_jax.model.families).

    Without init weights (`base` None): run.model's preset of its family with the overrides
    (settings.ModelSpec.overrides), vocab_size defaulting to the tokenizer's. With init
    weights: their config (`base`, whose family wins over config.model.family); an override of
    a shape field must agree with it, the others (dropout, initialisation, dtype, remat,
    attention) apply. Either way the model must have an embedding row for every id of the
    tokenizer (`check_token_ids`): an id past the table reads no row and the loss turns NaN.
    """
    spec = run.model
    overrides = spec.overrides
    if base is None:
        overrides.setdefault("vocab_size", vocab_size)
        check_token_ids(vocab_size, overrides["vocab_size"], "config.model.vocab_size")
        return families.get(spec.family).preset(spec.preset, **overrides)
    shape_fields = families.of(base).shape_fields
    differing = [f"model.{k}={overrides[k]} (the init weights have {getattr(base, k)})"
                 for k in shape_fields if k in overrides and overrides[k] != getattr(base, k)]
    if differing:
        raise ValueError("config " + "; ".join(differing) + ": the shape comes from "
                         "config.init; drop the override or the init weights")
    check_token_ids(vocab_size, base.vocab_size, "the init weights' vocab_size")
    try:
        return base.replace(**{k: v for k, v in overrides.items() if k not in shape_fields})
    except TypeError as e:  # a BertConfig field set for a ModernBERT model, or the reverse
        raise ValueError(f"config.model: {e} (the init weights are a {families.name_of(base)} "
                         "model)") from None


def check_token_ids(tokenizer_size: int, model_vocab_size: int, what: str) -> None:
    """ValueError unless every id of a tokenizer of `tokenizer_size` tokens (0 ..
    tokenizer_size - 1) has an embedding row in a model of `model_vocab_size` rows."""
    if tokenizer_size > model_vocab_size:
        raise ValueError(f"token ids reach {tokenizer_size - 1} (the tokenizer has "
                         f"{tokenizer_size} tokens) but {what} is {model_vocab_size}: ids at or "
                         f"above {model_vocab_size} have no embedding row; use a model of at "
                         f"least {tokenizer_size} tokens or the tokenizer it was trained with")


def initial_weights(run: RunSettings, workdir: Optional[str] = None
                    ) -> tuple[Optional[BertConfig], Optional[dict]]:
    """(BertConfig, params) of run.init, or (None, None) to start from random weights.

    init.hf_dir: a Hugging Face BERT folder; init.checkpoint: our checkpoints folder (or one
    step of it). The tree is {"bert": encoder, head: ...}; the heads are kept only with
    init.with_heads (where their paths and shapes fit the new model they are laid over). The
    encoder layers come in the layout of config.model.scan_layers (None: the weights' own).
    A run that resumes from `workdir` needs no initial weights: then (the BertConfig of its own
    newest checkpoint, None), without reading the weights (their shape is the run's).
    """
    init = run.init
    if (init.hf_dir or init.checkpoint) and workdir is not None:
        try:
            cfg = params_loading.load_model_config(checkpointing.checkpoint_dir(workdir))
            logging.info("resuming %s: the initial weights are not read again", workdir)
            return cfg, None
        except (FileNotFoundError, checkpointing.CheckpointUnreadableError):
            pass  # no checkpoint (a new run), or an unreadable newest one: read the weights
    if init.hf_dir:  # a BERT-family or a ModernBERT folder
        from bert_jax.convert import hf
        cfg, params = hf.load(init.hf_dir, with_heads=bool(init.with_heads))
    elif init.checkpoint:
        cfg, params = params_loading.load_params(init.checkpoint)
        params = jax.device_get(params)
    else:
        return None, None
    params = params if "bert" in params else {"bert": params}
    if not init.with_heads:
        params = {"bert": params["bert"]}
    if run.model.scan_layers is not None:  # the run's layer layout, whatever the weights'
        cfg = cfg.replace(scan_layers=run.model.scan_layers)
        params = families.to_layout(params, cfg)
    logging.info("initial weights from %s: %s", init.hf_dir or init.checkpoint, cfg)
    return cfg, params


def finetuning_tokenizer(run: RunSettings):
    """The WordPiece tokenizer of run.tokenizer.path (default: init.hf_dir's vocabulary);
    tokenizer.lowercase applies to a vocab.txt whose casing nothing else states (a folder's
    tokenizer_config.json does: `bert_jax.data.tokenizers.load.load_tokenizer`)."""
    path = run.tokenizer.path or run.init.hf_dir
    if not path:
        raise ValueError("config.tokenizer.path is empty and there is no config.init.hf_dir to "
                         "take the vocabulary from: name a vocab.txt, tokenizer.json or folder")
    return read_tokenizer(path, run.tokenizer.lowercase)


def read_tokenizer(path: str, lowercase: bool):
    """bert_jax.data.tokenizers.load.load_tokenizer, with a file that is not text at all (a binary
    file named as the vocabulary) a ValueError naming it."""
    from bert_jax.data.tokenizers import load as tokenizer
    try:
        return tokenizer.load_tokenizer(path, lowercase=lowercase)
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not a vocabulary: not UTF-8 text (byte {e.start})") from None


def has_checkpoint(workdir: str) -> bool:
    """Whether <workdir>/checkpoints holds a step folder (a run to resume)."""
    from etils import epath
    directory = epath.Path(checkpointing.checkpoint_dir(workdir))
    return directory.is_dir() and any(p.name.isdigit() for p in directory.iterdir())


def for_steps(run: RunSettings, total_steps: int) -> RunSettings:
    """The settings of `run` with the optimizer and loop settings of `total_steps` (those it
    has when its count is that already)."""
    if run.loop is not None and run.total_steps == total_steps:
        return run
    return run.for_steps(total_steps)


def train(run: RunSettings, workdir: str, task: loop.Task, train_iterator, mesh,
          total_steps: int, evaluate=None) -> loop.TrainResult:
    """loop.train with the optimizer and loop settings of `run` over total_steps, once the run's
    inputs are checked against and recorded in <workdir>/inputs.json (bert_jax.recipes.inputs)."""
    from bert_jax.recipes import inputs
    run = for_steps(run, total_steps)
    inputs.check_and_record(run.record, workdir, has_checkpoint(workdir))
    logging.info("model %s: %.1fM parameters; %.3g model FLOPs per step", task.model_config,
                 task.model_config.num_params() / 1e6, task.flops_per_step)
    return loop.train(task, optimizer.make_optimizer(run.optimizer), train_iterator, workdir,
                      run.loop, mesh,
                      learning_rate_fn=optimizer.learning_rate_schedule(run.optimizer),
                      evaluate=evaluate)


def train_program(run: RunSettings, mesh, task: loop.Task, total_steps: int,
                  abstract: bool = False) -> program.TrainProgram:
    """The fresh (or, abstract=True, traced) state and the jitted step that `train` runs for
    `task` on `mesh`: bert_jax.train.program.build with the optimizer, learning-rate schedule
    and loop settings of `run` over total_steps."""
    run = for_steps(run, total_steps)
    return program.build(task, optimizer.make_optimizer(run.optimizer), run.loop, mesh,
                         learning_rate_fn=optimizer.learning_rate_schedule(run.optimizer),
                         abstract=abstract)


def load_checkpoint(workdir: str, step: Optional[int],
                    make_init_fn: Callable[[BertConfig], Callable[[jax.Array], Any]],
                    mesh) -> tuple[int, BertConfig, Any]:
    """(step, BertConfig, params) of a saved step of a run (default: the newest), each parameter
    read straight into its shards on `mesh`; make_init_fn(cfg) builds the model's init_fn."""
    directory = checkpointing.checkpoint_dir(workdir)
    step = params_loading.resolve_step(directory, step)
    cfg = params_loading.load_model_config(directory, step)
    abstract = jax.eval_shape(make_init_fn(cfg), jax.random.PRNGKey(0))
    _, params = params_loading.load_params(directory, step,
                                          shardings=sharding.param_shardings(abstract, mesh))
    return step, cfg, params
