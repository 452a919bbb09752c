"""What reads a saved run afterwards (embeddings, export to Hugging Face) needs to rebuild as the
run built it, whatever its recipe: its tokenizer.

A run's <workdir>/config.json names its recipe, and each recipe builds its tokenizer its own way
(fine-tuning: `common.load_tokenizer`; pre-training: `pretrain.load_tokenizer`, the demo corpus's
vocabulary when the config names none). Choosing between them needs both, so it is done here,
above the recipes, not in `common`, which every recipe imports.
"""

from __future__ import annotations

from typing import Optional

from bert_jax.config import settings
from bert_jax.recipes import common, pretrain, run_record


def run_tokenizer(workdir: str, config: Optional[settings.Config] = None):
    """The WordPiece tokenizer a training run used, built from <workdir>/config.json (or
    `config`) as the run built it; None for a pre-training run on the synthetic corpus (random
    token ids, no vocabulary). A config without `recipe` is a pre-training run's."""
    config = config if config is not None else run_record.load_config(workdir)
    if config.recipe != "pretrain":
        return common.load_tokenizer(config)
    return pretrain.load_tokenizer(config, workdir)
