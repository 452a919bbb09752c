"""hf_flax: transformers' FlaxBertForMaskedLM trained the way its run_mlm_flax.py example trains
it, written here in that style (no code taken from it).

    data       the shared blocks (benchmarks/peers/mlm_blocks.py): concatenated text cut into
               128-token blocks, a new order each epoch, dynamic 80/10/10 masking at 15%
    model      FlaxBertForMaskedLM from a BertConfig (random init, seeded), float32; logits over
               the whole vocabulary at every position, the loss over the masked ones
    optimizer  a flax TrainState with the reference recipe as an optax transform
               (benchmarks/peers/recipe.py: AdamW without decay on biases and LayerNorm, linear
               warm-up then linear decay to 0, after global-norm clipping: the comparison's
               shared hyper-parameters; run_mlm_flax itself does not clip)
    step       jax.jit, the state donated, a dropout key split off each step

Evaluation: the held-out rows as Hugging Face inputs (benchmarks/peers/heldout.py), no dropout.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import transformers
from flax.training import train_state

from benchmarks.peers import heldout as heldout_lib
from benchmarks.peers import mlm_blocks, recipe


def masked_lm_sums(logits: jax.Array, labels: jax.Array) -> tuple[jax.Array, ...]:
    """(cross-entropy sum, correct predictions, predictions) over the labelled positions.

    logits [B, L, V], labels [B, L] (heldout.IGNORED_LABEL where nothing is predicted)."""
    weights = (labels != heldout_lib.IGNORED_LABEL).astype(jnp.float32)
    targets = jnp.where(labels == heldout_lib.IGNORED_LABEL, 0, labels)
    cross_entropy = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    correct = (jnp.argmax(logits, axis=-1) == targets).astype(jnp.float32)
    return jnp.sum(cross_entropy * weights), jnp.sum(correct * weights), jnp.sum(weights)


def train_step(state: train_state.TrainState, batch: dict, dropout_rng: jax.Array):
    """One AdamW step on the mean loss over the masked tokens; (new state, loss, next key)."""
    dropout_rng, next_rng = jax.random.split(dropout_rng)

    def loss_fn(params):
        logits = state.apply_fn(batch["input_ids"], batch["attention_mask"],
                                batch["token_type_ids"], params=params, dropout_rng=dropout_rng,
                                train=True)[0]
        total, _, count = masked_lm_sums(logits.astype(jnp.float32), batch["labels"])
        return total / jnp.maximum(count, 1.0)

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss, next_rng


class HFFlaxMLM(mlm_blocks.BlocksPeer):
    """The peer behind the harness's calls (benchmarks/peers/clocked.py)."""

    def __init__(self, spec: dict):
        super().__init__(spec)
        self.model = self.state = self.pending = self.batches = self.optimizer = None
        self.step_fn = jax.jit(train_step, donate_argnums=(0,))
        self.eval_fn = jax.jit(self._eval_sums)

    def prepare(self, total_steps: int) -> None:
        self.batches = mlm_blocks.EpochBatches(self.blocks, self.train["batch_size"], self.vocab,
                                               self.spec["seed"])
        self.optimizer = recipe.optax_transform(recipe.Recipe.of(
            self.train["learning_rate"], self.train["warmup_fraction"], total_steps,
            self.train["optimizer"]))

    def init(self) -> None:
        self.state = self.pending = None
        self.model = transformers.FlaxBertForMaskedLM(self.hf_config, seed=self.spec["seed"],
                                                      dtype=jnp.float32)
        self.state = train_state.TrainState.create(apply_fn=self.model.__call__,
                                                   params=self.model.params, tx=self.optimizer)
        self.dropout_rng = jax.random.PRNGKey(self.spec["seed"])

    def train_step(self) -> None:
        batch = next(self.batches)
        self.sync()
        self.state, self.pending, self.dropout_rng = self.step_fn(self.state, batch,
                                                                  self.dropout_rng)

    def sync(self) -> None:
        if self.pending is not None:
            self.pending.block_until_ready()

    def _eval_sums(self, params, batch):
        logits = self.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"],
                            params=params, train=False)[0]
        return masked_lm_sums(logits.astype(jnp.float32), batch["labels"])

    def evaluate(self, rows: heldout_lib.Heldout) -> dict[str, float]:
        sums = np.zeros(3)
        for batch in rows.batches():
            sums += np.asarray(jax.device_get(
                self.eval_fn(self.state.params, heldout_lib.hf_inputs(batch))), np.float64)
        total, correct, count = sums
        return {"accuracy": correct / count, "loss": total / count, "masked_tokens": int(count)}

    def describe(self) -> dict:
        return {"config_source": "transformers.FlaxBertForMaskedLM, run_mlm_flax style",
                "model": self.hf_config.to_dict(),
                "recipe": {"max_seq_len": int(self.blocks.shape[1]), **self.train,
                           "blocks": len(self.blocks)},
                "num_params": int(sum(np.size(x) for x in jax.tree.leaves(self.state.params)))}
