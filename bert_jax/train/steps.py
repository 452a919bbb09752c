"""Pure step functions for any task: the train state, a train step and an eval step.

A *loss function* is what a task plugs into the generic steps:

    loss_fn(params, batch, rng, deterministic) -> (loss_terms, metrics)

Both results are dicts of `Weighted` pairs `(sum, weight)`: a sum over the examples (or masked
tokens) of the batch, and the total weight it was summed over. The objective is

    loss = sum over terms t of  sum_t / weight_t

and a metric is reported as sum / weight. Keeping sums (not means) makes two things exact:
gradient accumulation (micro-batch gradients of sum_t are added and divided by the weight of the
whole batch, so 4 micro-batches of 8 give the gradient of one batch of 32) and evaluation over many
batches (sums are added across batches and divided once). The weights must depend on the batch
only (masks, labels), never on the parameters.

Each recipe writes its loss_fn (pre-training: `bert_jax.recipes.pretrain.make_loss`; fine-tuning:
one per task kind in `bert_jax.recipes.finetune`) and reuses these steps unchanged.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding

from bert_jax.config.settings import DROPOUT_RNGS
from bert_jax.train import dropout_bits, fsdp
from bert_jax.train import optimizer as optimizer_lib

Array = jax.Array
Params = Any
Batch = Mapping[str, Array]
Weighted = tuple[Array, Array]  # (sum over the batch, weight it was summed over)
LossFn = Callable[[Params, Batch, Array, bool],
                  tuple[dict[str, Weighted], dict[str, Weighted]]]
TrainStep = Callable[["TrainState", Batch], tuple["TrainState", dict[str, Array]]]


@flax.struct.dataclass
class TrainState:
    """Everything a training run needs to continue bit for bit, as global jax.Arrays.

    step: int32 scalar, the number of optimizer updates applied so far.
    rng: uint32[2] base key; the dropout key of step s is fold_in(rng, s), so a resumed run
      draws the same dropout masks as an uninterrupted one.
    """

    step: Array
    params: Params
    opt_state: optax.OptState
    rng: Array

    @classmethod
    def create(cls, params: Params, optimizer: optax.GradientTransformation,
               rng: Array) -> TrainState:
        return cls(step=jnp.zeros((), jnp.int32), params=params,
                   opt_state=optimizer.init(params), rng=jnp.asarray(rng, jnp.uint32))


def mean_of(pair: Weighted) -> Array:
    """sum / weight, and 0 where nothing was counted (no NaN, no NaN gradient)."""
    total, weight = pair
    return total / jnp.where(weight > 0, weight, 1.0)


def combine(terms: Mapping[str, Weighted]) -> Array:
    """The objective: the sum of the weighted means of the loss terms."""
    return sum((mean_of(pair) for pair in terms.values()), jnp.zeros((), jnp.float32))


# ----- train and eval steps --------------------------------------------------------------------

def split_micro_batches(batch: Batch, num_micro_batches: int) -> dict[str, Array]:
    """[B, ...] -> [num_micro_batches, B / num_micro_batches, ...], micro-batch j = rows j, j+k, ...

    Interleaving (rather than contiguous blocks) keeps every device's rows spread over all
    micro-batches, so a batch sharded along its rows needs no communication to be split.
    """
    def split(x):
        rows = x.shape[0]
        if rows % num_micro_batches:
            raise ValueError(f"batch of {rows} rows cannot be split into {num_micro_batches} "
                             "micro-batches (accumulation_steps must divide the batch size)")
        x = x.reshape((rows // num_micro_batches, num_micro_batches) + x.shape[1:])
        return jnp.swapaxes(x, 0, 1)
    return {k: split(v) for k, v in batch.items()}


def _weighted_objective(loss_fn: LossFn):
    """objective(params, batch, rng, term_weights) -> (sum_t sum_t / W_t, (terms, metrics)).

    W_t is the weight of the whole batch (term_weights; None: of this batch itself). With the
    whole batch's W_t the objectives of micro-batches add up exactly to the whole batch's, and
    so do their gradients.
    """
    def objective(params, batch, rng, term_weights):
        terms, metrics = loss_fn(params, batch, rng, False)
        if term_weights is None:
            term_weights = {name: weight for name, (_, weight) in terms.items()}
        total = sum((mean_of((value, term_weights[name])) for name, (value, _) in terms.items()),
                    jnp.zeros((), jnp.float32))
        return total, (terms, metrics)
    return objective


def _batch_gradients(loss_fn: LossFn, params: Params, batch: Batch, rng: Array,
                     accumulation_steps: int, batch_sharding: Optional[NamedSharding],
                     global_sum: Optional[Callable[[Any], Any]] = None):
    """(gradients, (term sums, metric sums)) of `batch`, summed over its micro-batches.

    global_sum: None when `batch` is the whole batch (under the partitioner); when `batch` is one
    device's rows (bert_jax.train.fsdp), adds a pytree over every device's rows, so that the
    loss terms are divided by the weights of the whole batch.
    """
    grad_fn = jax.value_and_grad(_weighted_objective(loss_fn), has_aux=True)
    if accumulation_steps == 1 and global_sum is None:
        (_, aux), grads = grad_fn(params, batch, rng, None)
        return grads, aux
    # The weights of the whole batch first: the loss terms' weights depend on the batch only, so
    # XLA drops the model from this call and keeps the sums of the masks.
    whole_terms, _ = loss_fn(params, batch, rng, False)
    term_weights = {name: jax.lax.stop_gradient(w) for name, (_, w) in whole_terms.items()}
    if global_sum is not None:
        term_weights = global_sum(term_weights)
    if accumulation_steps == 1:
        (_, aux), grads = grad_fn(params, batch, rng, term_weights)
        return grads, aux
    micro_batches = split_micro_batches(batch, accumulation_steps)

    def accumulate(carry, inputs):
        grads_sum, sums = carry
        index, micro_batch = inputs
        if batch_sharding is not None:
            micro_batch = jax.lax.with_sharding_constraint(micro_batch, batch_sharding)
        (_, aux), grads = grad_fn(params, micro_batch, jax.random.fold_in(rng, index),
                                  term_weights)
        return (jax.tree.map(jnp.add, grads_sum, grads), jax.tree.map(jnp.add, sums, aux)), None

    aux_shapes = jax.eval_shape(
        lambda: loss_fn(params, jax.tree.map(lambda x: x[0], micro_batches), rng, False))
    zeros = (jax.tree.map(jnp.zeros_like, params),
             jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), aux_shapes))
    (grads, sums), _ = jax.lax.scan(accumulate, zeros,
                                    (jnp.arange(accumulation_steps), micro_batches))
    return grads, sums


def dropout_key(base: Array, step: Array, dropout_rng: str = "threefry") -> Array:
    """The dropout key of `step`: fold_in(base, step) (threefry, uint32[2]), or for "hash" and
    "rbg" a typed key of that generator whose words are drawn from that threefry key (see
    DROPOUT_RNGS)."""
    key = jax.random.fold_in(base, step)
    if dropout_rng == "threefry":
        return key
    if dropout_rng == "hash":
        return jax.random.wrap_key_data(jax.random.bits(key, (2,), jnp.uint32),
                                        impl=dropout_bits.hash_impl())
    if dropout_rng == "rbg":
        return jax.random.wrap_key_data(jax.random.bits(key, (4,), jnp.uint32), impl="rbg")
    raise ValueError(f"dropout_rng={dropout_rng!r}: choose one of {DROPOUT_RNGS}")


def make_train_step(loss_fn: LossFn, optimizer: optax.GradientTransformation,
                    accumulation_steps: int = 1,
                    learning_rate_fn: Optional[optax.Schedule] = None,
                    batch_sharding: Optional[NamedSharding] = None,
                    dropout_rng: str = "threefry",
                    explicit_fsdp: Optional[Params] = None) -> TrainStep:
    """train_step(state, batch) -> (new state, metrics) for any loss_fn (see module docstring).

    With accumulation_steps = k > 1 the batch is split into k micro-batches whose gradients are
    summed in a lax.scan before one optimizer update: peak activation memory is that of B/k rows.
    Metrics (all scalars): `loss`, each loss term and metric as a mean over the whole batch,
    `grad_norm` (before clipping), `learning_rate` when learning_rate_fn is given, and the
    non-finite step counts of an optimizer from bert_jax.train.optimizer.
    `batch_sharding` (rows over the data axes) keeps each micro-batch sharded like the batch.
    `dropout_rng` picks the generator of the dropout bits (DROPOUT_RNGS).
    `explicit_fsdp`: None, or the parameters' NamedShardings on a mesh with a split fsdp axis:
    then the gradients come from bert_jax.train.fsdp (the FSDP collectives written out).
    """
    if accumulation_steps < 1:
        raise ValueError(f"accumulation_steps={accumulation_steps} must be >= 1")
    if dropout_rng not in DROPOUT_RNGS:
        raise ValueError(f"dropout_rng={dropout_rng!r}: choose one of {DROPOUT_RNGS}")

    def train_step(state: TrainState, batch: Batch):
        rng = dropout_key(state.rng, state.step, dropout_rng)
        if explicit_fsdp is None:
            grads, (terms, metrics) = _batch_gradients(
                loss_fn, state.params, batch, rng, accumulation_steps, batch_sharding)
        else:
            def compute(params, local_batch, key, global_sum):
                return _batch_gradients(loss_fn, params, local_batch, key, accumulation_steps,
                                        None, global_sum)
            mesh = jax.tree.leaves(explicit_fsdp)[0].mesh
            grads, (terms, metrics) = fsdp.gradients(compute, state.params, batch, rng,
                                                     explicit_fsdp, mesh)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        new_state = state.replace(step=state.step + 1, params=params, opt_state=opt_state)
        logged = {"loss": combine(terms), "grad_norm": optax.tree.norm(grads),
                  **optimizer_lib.nonfinite_counts(opt_state)}
        logged.update({name: mean_of(pair) for name, pair in {**terms, **metrics}.items()})
        if learning_rate_fn is not None:
            logged["learning_rate"] = jnp.asarray(learning_rate_fn(state.step), jnp.float32)
        return new_state, logged

    return train_step


def make_eval_step(loss_fn: LossFn) -> Callable[[Params, Batch], tuple[dict, dict]]:
    """eval_step(params, batch) -> (loss-term sums, metric sums), deterministic (no dropout)."""

    def eval_step(params, batch):
        return loss_fn(params, batch, jax.random.PRNGKey(0), True)

    return eval_step


def add_sums(total: Optional[tuple[dict, dict]], new: tuple[dict, dict]) -> tuple[dict, dict]:
    """Accumulate eval_step results (pairs of dicts of Weighted) across batches, on the host."""
    new = jax.tree.map(lambda x: np.asarray(x, np.float64), jax.device_get(new))
    return new if total is None else jax.tree.map(np.add, total, new)


def summarize(sums: tuple[Mapping[str, Weighted], Mapping[str, Weighted]]) -> dict[str, float]:
    """(term sums, metric sums) -> {'loss': ..., term: mean, metric: mean} as Python floats."""
    terms, metrics = sums
    mean = lambda pair: float(pair[0] / pair[1]) if float(pair[1]) > 0 else 0.0
    out = {"loss": sum(mean(pair) for pair in terms.values())}
    out.update({name: mean(pair) for name, pair in {**terms, **metrics}.items()})
    return out
