"""What reads a saved run afterwards (embeddings, export to Hugging Face) needs to rebuild as the
run built it, whatever its recipe: its tokenizer (`run_tokenizer`), and the encoder of a run or of
a Hugging Face folder for sentence embeddings (`load_encoder`).

A run's <workdir>/config.json names its recipe, and each recipe builds its tokenizer its own way
(fine-tuning: `common.finetuning_tokenizer`; pre-training: `pretrain.pretraining_tokenizer`, the
demo corpus's vocabulary when the config names none). Choosing between them needs both, so it is
done here, above the recipes, not in `common`, which every recipe imports.
"""

from __future__ import annotations

from typing import Optional

import jax

from bert_jax.config import settings
from bert_jax.data.tokenizers import load as tokenizer_lib
from bert_jax.embeddings.encode import Encoder, encoder_tree


def run_tokenizer(workdir: str, config: Optional[settings.Config] = None):
    """The WordPiece tokenizer a training run used, built from <workdir>/config.json (or
    `config`) as the run built it; None for a pre-training run on the synthetic corpus (random
    token ids, no vocabulary). A config without `recipe` is a pre-training run's."""
    # Imported here: load_encoder of a Hugging Face folder (embed.py --model) needs no recipe,
    # so the command loads neither the recipes nor Orbax, as before load_encoder moved here.
    from bert_jax.recipes import common, pretrain, run_record
    run = settings.typed(config if config is not None else run_record.load_config(workdir))
    if run.recipe != "pretrain":
        return common.finetuning_tokenizer(run)
    return pretrain.pretraining_tokenizer(run, workdir)


def load_encoder(hf_dir: Optional[str] = None, workdir: Optional[str] = None,
                 step: Optional[int] = None) -> Encoder:
    """The encoder of a Hugging Face folder (`hf_dir`) or of a run (`workdir`, its newest
    checkpoint or `step`; fine-tuning heads are dropped). Exactly one of the two."""
    if (hf_dir is None) == (workdir is None):
        raise ValueError("give exactly one of a Hugging Face folder and a run's workdir")
    if hf_dir is not None:
        from bert_jax.convert import hf
        cfg, params = hf.load(hf_dir, with_heads=False)
        tokenizer, source = tokenizer_lib.load_tokenizer(hf_dir), hf_dir
    else:
        from bert_jax.train.checkpoint import params as params_loading
        from bert_jax.train.checkpoint import store as checkpointing
        source = checkpointing.checkpoint_dir(workdir)
        cfg, params = params_loading.load_params(source, step=step)
        tokenizer = run_tokenizer(workdir)
        if tokenizer is None:
            raise ValueError(f"{workdir}: the run has no vocabulary (synthetic corpus), so there "
                             "are no texts to embed")
    if tokenizer.vocab_size > cfg.vocab_size:
        raise ValueError(f"tokenizer {tokenizer.source} has {tokenizer.vocab_size} tokens but "
                         f"the model of {source} only {cfg.vocab_size}")
    return Encoder(cfg, jax.device_put(encoder_tree(params)), tokenizer, source)
