"""Pure step functions: the train state, the pre-training loss, a train step and an eval step.

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

Pre-training: `make_pretrain_loss(model)` gives the masked-LM loss (cross-entropy at the masked
positions, weighted by `masked_weights`) plus, when the batch carries `nsp_labels`, the
next-sentence-prediction loss, as in the paper. Fine-tuning writes its own loss_fn and reuses
`make_train_step` and `make_eval_step` unchanged.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding

from bert_jax.model import BertForPreTraining

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
               rng: Array) -> "TrainState":
        return cls(step=jnp.zeros((), jnp.int32), params=params,
                   opt_state=optimizer.init(params), rng=jnp.asarray(rng, jnp.uint32))


def mean_of(pair: Weighted) -> Array:
    """sum / weight, and 0 where nothing was counted (no NaN, no NaN gradient)."""
    total, weight = pair
    return total / jnp.where(weight > 0, weight, 1.0)


def combine(terms: Mapping[str, Weighted]) -> Array:
    """The objective: the sum of the weighted means of the loss terms."""
    return sum((mean_of(pair) for pair in terms.values()), jnp.zeros((), jnp.float32))


# ----- the pre-training loss -------------------------------------------------------------------

def make_pretrain_loss(model: BertForPreTraining) -> LossFn:
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


def make_train_step(loss_fn: LossFn, optimizer: optax.GradientTransformation,
                    accumulation_steps: int = 1,
                    learning_rate_fn: Optional[optax.Schedule] = None,
                    batch_sharding: Optional[NamedSharding] = None) -> TrainStep:
    """train_step(state, batch) -> (new state, metrics) for any loss_fn (see module docstring).

    With accumulation_steps = k > 1 the batch is split into k micro-batches whose gradients are
    summed in a lax.scan before one optimizer update: peak activation memory is that of B/k rows.
    Metrics (all scalars): `loss`, each loss term and metric as a mean over the whole batch,
    `grad_norm` (before clipping) and `learning_rate` when learning_rate_fn is given.
    `batch_sharding` (rows over the data axes) keeps each micro-batch sharded like the batch.
    """
    if accumulation_steps < 1:
        raise ValueError(f"accumulation_steps={accumulation_steps} must be >= 1")

    def weighted_objective(params, batch, rng, term_weights):
        """Sum_t sum_t / W_t, W_t the weight of the whole batch (None: of this batch itself).

        With the whole batch's W_t, the objectives of the micro-batches add up exactly to the
        objective of the whole batch, and so do their gradients.
        """
        terms, metrics = loss_fn(params, batch, rng, False)
        if term_weights is None:
            term_weights = {name: weight for name, (_, weight) in terms.items()}
        objective = sum((mean_of((total, term_weights[name])) for name, (total, _) in terms.items()),
                        jnp.zeros((), jnp.float32))
        return objective, (terms, metrics)

    def train_step(state: TrainState, batch: Batch):
        rng = jax.random.fold_in(state.rng, state.step)
        grad_fn = jax.value_and_grad(weighted_objective, has_aux=True)
        if accumulation_steps == 1:
            (_, (terms, metrics)), grads = grad_fn(state.params, batch, rng, None)
        else:
            # The weights of the whole batch first: the loss terms' weights depend on the batch
            # only, so XLA drops the model from this call and keeps the sums of the masks.
            whole_terms, _ = loss_fn(state.params, batch, rng, False)
            term_weights = {name: jax.lax.stop_gradient(w) for name, (_, w) in whole_terms.items()}
            micro_batches = split_micro_batches(batch, accumulation_steps)

            def accumulate(carry, inputs):
                grads_sum, sums = carry
                index, micro_batch = inputs
                if batch_sharding is not None:
                    micro_batch = jax.lax.with_sharding_constraint(micro_batch, batch_sharding)
                (_, aux), grads = grad_fn(state.params, micro_batch,
                                          jax.random.fold_in(rng, index), term_weights)
                grads_sum = jax.tree.map(jnp.add, grads_sum, grads)
                sums = jax.tree.map(jnp.add, sums, aux)
                return (grads_sum, sums), None

            zero_grads = jax.tree.map(jnp.zeros_like, state.params)
            aux_shapes = jax.eval_shape(
                lambda: loss_fn(state.params, jax.tree.map(lambda x: x[0], micro_batches),
                                rng, False))
            zero_sums = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), aux_shapes)
            (grads, (terms, metrics)), _ = jax.lax.scan(
                accumulate, (zero_grads, zero_sums),
                (jnp.arange(accumulation_steps), micro_batches))

        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        new_state = state.replace(step=state.step + 1, params=params, opt_state=opt_state)
        logged = {"loss": combine(terms), "grad_norm": optax.tree.norm(grads)}
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
    mean = lambda pair: float(pair[0] / pair[1]) if float(pair[1]) > 0 else 0.0  # noqa: E731
    out = {"loss": sum(mean(pair) for pair in terms.values())}
    out.update({name: mean(pair) for name, pair in {**terms, **metrics}.items()})
    return out
