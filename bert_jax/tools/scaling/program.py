"""The train step, compiled ahead of time for a mesh: nothing is allocated or run.

The step is the one `loop.train` runs for `bert_jax.recipes.pretrain` (or for fine-tuning a
sequence classifier, `compile_finetune_step`): the recipe's task (model, masked-LM loss), its
optimizer and learning-rate schedule, built by the loop's own builder (`bert_jax.train.program`:
the TrainState shardings, moments sharded like their parameters; in/out shardings, donated state,
activation constraints, compiler options, config.fsdp_collectives). Its inputs are
`jax.ShapeDtypeStruct`s carrying their shardings: the abstract TrainState of that program, and a
batch in the pre-training batch contract (`data.synthetic.RandomTokenBatches` keys and dtypes)
of `config.batch_size` rows.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import ml_collections
from jax.sharding import Mesh, NamedSharding

from bert_jax.config import settings
from bert_jax.config.bert import BertConfig
from bert_jax.data.pretraining.synthetic import RandomTokenBatches
from bert_jax.recipes import common, pretrain
from bert_jax.runtime import sharding
from bert_jax.train import loop


@dataclasses.dataclass
class CompiledStep:
    """A compiled train step and the facts about its inputs that the report compares against.

    Byte counts are of the parameters in their storage dtype (param_dtype; the gradients have
    the same dtype and shapes).
    """

    compiled: Any  # jax.stages.Compiled
    mesh: Mesh
    model_config: BertConfig
    batch_size: int  # global rows per optimizer step
    seq_len: int
    accumulation_steps: int
    param_bytes: int  # all parameters
    param_bytes_per_device: int  # one device's shards
    fsdp_param_bytes: int  # the whole (unsharded) bytes of the parameters split over `fsdp`
    fsdp_params: tuple[str, ...]  # their argument paths, "state.params['bert'][...]"
    word_embedding_bytes: int  # the tied embedding: its gradient has two contributions
    # fsdp-split parameters whose shard does not fill whole TPU tiles along the split dimension
    # (TPU_TILE): "path [shard shape]". XLA:TPU gathers those with all-reduces of full-size
    # buffers instead of all-gathers (docs/results.md, "fsdp on 64 chips").
    fsdp_untiled: tuple[str, ...]
    model_flops_per_step: float  # bert_jax.train.flops, the whole global batch
    fsdp_collectives: str = "xla"  # config.fsdp_collectives (bert_jax/train/fsdp.py)

    @property
    def num_devices(self) -> int:
        return self.mesh.devices.size


def abstract_batch(run: settings.RunSettings, vocab_size: int, mesh: Mesh
                   ) -> dict[str, jax.ShapeDtypeStruct]:
    """The global pre-training batch of the run as ShapeDtypeStructs, rows split over
    (data, fsdp)."""
    one_row = next(RandomTokenBatches(1, run.max_seq_len, run.data.max_predictions,
                                      vocab_size, seed=0,
                                      sentence_pairs=bool(run.data.sentence_pairs)))
    batch_sharding = sharding.batch_sharding(mesh)
    return {key: jax.ShapeDtypeStruct((run.batch_size,) + value.shape[1:], value.dtype,
                                      sharding=batch_sharding)
            for key, value in one_row.items()}


def compile_pretrain_step(config: ml_collections.ConfigDict, mesh: Mesh) -> CompiledStep:
    """AOT-compile the pre-training step of `config` (a pretrain config) for `mesh`.

    Raises ValueError (from the recipe's checks) for a batch the mesh cannot split, a sequence
    longer than the model's positions, or bad optimizer settings.
    """
    run = _settings(config)
    cfg = common.model_config(run, run.tokenizer.vocab_size)
    return _compile(run, mesh, cfg, pretrain.make_task(run, cfg),
                    abstract_batch(run, cfg.vocab_size, mesh))


# The fine-tuning batch contract of sequence classification (recipes/finetune/classification).
CLASSIFICATION_INPUTS = ("input_ids", "token_type_ids", "attention_mask")


def compile_finetune_step(config: ml_collections.ConfigDict, mesh: Mesh,
                          num_labels: int = 2) -> CompiledStep:
    """AOT-compile the fine-tuning step of sequence classification (`num_labels` classes) for
    `config` (a finetune config: model, dtype, remat, optimizer, batch and length) on `mesh`:
    the recipe's task, loss and optimizer, padded rows of max_seq_len tokens."""
    from bert_jax.recipes.finetune import kinds, recipe, task_data

    run = _settings(config)
    cfg = common.model_config(run, run.tokenizer.vocab_size)
    labels = {"label_map": [str(i) for i in range(num_labels)]}
    data = task_data.TaskData(kinds.get("classification"), labels, [], [], None, {})
    rows = jax.sharding.NamedSharding(mesh, sharding.batch_sharding(mesh).spec)
    batch = {key: jax.ShapeDtypeStruct((run.batch_size, run.max_seq_len), jax.numpy.int32,
                                       sharding=rows) for key in CLASSIFICATION_INPUTS}
    batch["labels"] = jax.ShapeDtypeStruct((run.batch_size,), jax.numpy.int32, sharding=rows)
    return _compile(run, mesh, cfg, recipe.make_task(run, cfg, data), batch)


def _settings(config: ml_collections.ConfigDict) -> settings.RunSettings:
    """The run's settings, read once, with the optimizer and loop settings of its total_steps
    (at least 1: only the schedule's constants depend on it)."""
    run = settings.typed(config)
    return run.for_steps(max(run.total_steps, 1))


def _compile(run: settings.RunSettings, mesh: Mesh, cfg: BertConfig, task: loop.Task,
             batch: dict[str, jax.ShapeDtypeStruct]) -> CompiledStep:
    """The loop's program of `task` (recipes.common.train_program: bert_jax.train.program),
    abstract, lowered for `batch` and compiled for `mesh`."""
    run.check_fits(mesh, cfg)
    train = common.train_program(run, mesh, task, run.total_steps, abstract=True)
    return CompiledStep(
        compiled=train.compile(batch), mesh=mesh, model_config=cfg,
        batch_size=run.batch_size, seq_len=run.max_seq_len,
        accumulation_steps=run.accumulation_steps,
        **_param_facts(train.state.params, train.shardings.params),
        model_flops_per_step=task.flops_per_step,
        fsdp_collectives=run.loop.fsdp_collectives)


# A TPU array is stored in tiles of 8 rows x 128 lanes over its two minor dimensions, and XLA's
# layout assignment may make any dimension but the last the rows' one (e.g. {2,0,1} for a
# [embed, heads, head_dim] kernel): a split dimension needs shards of 8 (128 if it is the last).
TPU_TILE = {"last": 128, "other": 8}


def _fills_tiles(shard_shape: tuple[int, ...], spec: tuple) -> bool:
    """Whether every dimension split over `fsdp` has a shard of whole TPU tiles."""
    for dim, axes in enumerate(spec):
        names = (axes,) if isinstance(axes, str) else tuple(axes or ())
        if "fsdp" in names:
            tile = TPU_TILE["last" if dim == len(shard_shape) - 1 else "other"]
            if shard_shape[dim] % tile:
                return False
    return True


def _param_facts(params: Any, shardings: Any) -> dict[str, Any]:
    """Byte counts of the parameters (CompiledStep's fields) and the paths of those split over
    the fsdp axis, spelled as the program's argument names."""
    def nbytes(shape, dtype) -> int:
        return math.prod(shape) * jax.numpy.dtype(dtype).itemsize

    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    shard_leaves = jax.tree.leaves(shardings, is_leaf=lambda s: isinstance(s, NamedSharding))
    facts = dict(param_bytes=0, param_bytes_per_device=0, fsdp_param_bytes=0, fsdp_params=(),
                 word_embedding_bytes=0, fsdp_untiled=())
    for (path, leaf), leaf_sharding in zip(leaves, shard_leaves):
        size, name = nbytes(leaf.shape, leaf.dtype), jax.tree_util.keystr(path)
        facts["param_bytes"] += size
        facts["param_bytes_per_device"] += nbytes(leaf_sharding.shard_shape(leaf.shape),
                                                  leaf.dtype)
        if "fsdp" in jax.tree.leaves(tuple(leaf_sharding.spec)):
            facts["fsdp_param_bytes"] += size
            facts["fsdp_params"] += (f"state.params{name}",)
            shard = leaf_sharding.shard_shape(leaf.shape)
            if not _fills_tiles(shard, tuple(leaf_sharding.spec)):
                facts["fsdp_untiled"] += (f"{name} {list(shard)}",)
        if "word_embeddings" in name:
            facts["word_embedding_bytes"] += size
    return facts

