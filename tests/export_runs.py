"""A contrastive run's workdir (a tiny encoder's checkpoint and config.json), shared by the
export tests."""

import json

import jax
import numpy as np

from bert_jax import BertConfig, BertModel
from bert_jax.train.checkpoint import store as checkpointing

CFG = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                 intermediate_size=32, max_position_embeddings=64, type_vocab_size=2)
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(59)]


def contrastive_run(root, max_seq_len=24, with_vocab=True):
    """A run's workdir as a contrastive fine-tuning leaves it: params {"bert": encoder without
    pooler} at step 3, config.json with its max_seq_len and tokenizer."""
    import flax.linen as nn
    params = nn.meta.unbox(BertModel(CFG, add_pooler=False).init(
        jax.random.key(0), np.ones((1, 4), np.int32))["params"])
    workdir = root / "run"
    manager = checkpointing.make_manager(str(workdir / "checkpoints"), keep=1, async_saves=False)
    try:
        checkpointing.save(manager, 3, {"params": {"bert": params}}, model_config=CFG)
        manager.wait_until_finished()
    finally:
        manager.close()
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    (workdir / "config.json").write_text(json.dumps(
        {"recipe": "finetune", "task": "contrastive", "max_seq_len": max_seq_len,
         "tokenizer": {"path": str(vocab), "lowercase": True}, "init": {"hf_dir": ""}}))
    return workdir, vocab, params
