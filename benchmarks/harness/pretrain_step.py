"""The pre-training step that the benchmarks time: the recipe's own, built as training builds it.

    config = pretrain_step.config("base", batch_size=8, seq_len=128, dtype="bfloat16")
    task, train = pretrain_step.build(config, mesh)   # train.state, train.train_step
    batch = next(pretrain_step.batches(config))       # host-local rows of the synthetic corpus

The config is bert_jax/config/run.py's pre-training config on the synthetic corpus (random
token ids: no files, no tokenizer) at the preset's vocabulary size, with its optimizer block
(BERT's AdamW, clipping at 1.0, linear warm-up and decay) and loop settings. The task is
`bert_jax.recipes.pretrain.make_task` (BertForPreTraining's masked-LM loss, no NSP head) and the
program `bert_jax.train.program`'s through `recipes.common.train_program`: the state sharded on
the mesh and donated, the activation constraints, the compiler options of the mesh's platform.
A figure measured on it is one of the program `experiments/pretrain.py` runs at these settings
(benchmark_mlm.py, compile_time.py, data_throughput.py).
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

import numpy as np


def config(preset: str, batch_size: int, seq_len: int, max_predictions: Optional[int] = None,
           dtype: str = "float32", remat: str = "none", scan_layers: Optional[bool] = None,
           total_steps: int = 1000):
    """The pre-training config of these settings (module docstring). max_predictions: masked
    positions per row (None: 15% of seq_len); scan_layers None: the preset's layout."""
    from bert_jax.config import run as run_config
    from bert_jax.config.bert import BertConfig

    result = run_config.pretrain_config()
    result.model.preset = preset
    result.model.scan_layers = scan_layers
    result.model.max_position_embeddings = max(512, seq_len)
    result.tokenizer.vocab_size = BertConfig.preset(preset).vocab_size
    result.dtype, result.remat = dtype, remat
    result.max_seq_len = seq_len
    result.batch_size = result.eval_batch_size = batch_size
    result.data.corpus = "synthetic"
    result.data.max_predictions = max_predictions or max(1, round(0.15 * seq_len))
    result.total_steps = total_steps
    return result


def build(config, mesh, abstract: bool = False) -> tuple[Any, Any]:
    """(loop.Task, program.TrainProgram) of `config` on `mesh`: a fresh state (abstract=True:
    ShapeDtypeStructs, nothing allocated) and the jitted step. ValueError (the recipe's checks)
    for a batch the mesh cannot split or a sequence longer than the model's positions."""
    from bert_jax.config import settings
    from bert_jax.recipes import common, pretrain

    run = settings.read(config, "pretrain")
    cfg = common.model_config(run, run.tokenizer.vocab_size)
    run.check_fits(mesh, cfg)
    task = pretrain.make_task(run, cfg)
    return task, common.train_program(run, mesh, task, run.total_steps, abstract=abstract)


def batches(config) -> Iterator[dict[str, np.ndarray]]:
    """The recipe's training batches of the synthetic corpus: this process's rows (it reads no
    workdir)."""
    from bert_jax.config import settings
    from bert_jax.recipes import pretrain

    run = settings.read(config, "pretrain")
    train, _ = pretrain.make_data(run, "", run.tokenizer.vocab_size)
    return train
