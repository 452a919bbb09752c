"""Activation sharding constraints: what the compiled (data, fsdp, tensor) = (2, 2, 2) train step
communicates, on 8 CPU devices (a subprocess with XLA_FLAGS set before jax is imported).

Weights split over fsdp and tensor are expected to be all-gathered over fsdp before use (that is
FSDP: [hidden, intermediate / tensor] for the FFN's first kernel), never over tensor: an
all-gather whose result holds a tensor-split dimension whole ([hidden, intermediate],
[vocab, hidden / fsdp], ...) would mean every device computes the whole matmul. The step is the
loop's own (`bert_jax.train.program`), unrolled and scanned. Without the constraints, XLA
gathers the whole vocabulary of the word-embedding table for its lookup ([vocab, hidden / fsdp]
on every device), which this test refuses.

In a plain model.apply (no rules, no mesh in context) the constraints are not in the program.
"""

import re
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

from bert_jax import BertConfig, BertModel
from bert_jax.runtime import sharding

import eight_devices

# Sizes chosen so that no activation shape can be mistaken for a weight's: rows per device 2,
# sequence 24, masked positions 3.
HIDDEN, INTERMEDIATE, VOCAB, HEADS, HEAD_DIM, LAYERS = 64, 256, 96, 4, 16, 2
BATCH, SEQ, PREDICTIONS = 8, 24, 3
FSDP = TENSOR = 2


def _config(scan_layers: bool, layers: int = LAYERS) -> BertConfig:
    return BertConfig.preset("tiny", num_hidden_layers=layers, vocab_size=VOCAB,
                             hidden_size=HIDDEN, num_attention_heads=HEADS,
                             intermediate_size=INTERMEDIATE, max_position_embeddings=SEQ,
                             scan_layers=scan_layers)


def _compiled_text(cfg: BertConfig) -> str:
    """The optimised HLO of the loop's train step on a (2, 2, 2) mesh (in the subprocess)."""
    from bert_jax.config import settings
    from bert_jax.model import BertForPreTraining
    from bert_jax.recipes import pretrain
    from bert_jax.train import loop, optimizer, program

    model = BertForPreTraining(cfg, with_nsp=False)
    mesh = sharding.make_mesh(2, FSDP, TENSOR)

    def init_fn(rng):
        ids = jnp.zeros((1, SEQ), jnp.int32)
        return model.init(rng, ids, ids[:, :PREDICTIONS])["params"]

    opt_config = settings.OptimizerConfig(total_steps=10, warmup_steps=1)
    batch_sharding = sharding.batch_sharding(mesh)
    shapes = {"input_ids": (BATCH, SEQ), "token_type_ids": (BATCH, SEQ),
              "segment_ids": (BATCH, SEQ), "position_ids": (BATCH, SEQ),
              "masked_positions": (BATCH, PREDICTIONS), "masked_ids": (BATCH, PREDICTIONS)}
    batch = {k: jax.ShapeDtypeStruct(s, jnp.int32, sharding=batch_sharding)
             for k, s in shapes.items()}
    batch["masked_weights"] = jax.ShapeDtypeStruct((BATCH, PREDICTIONS), jnp.float32,
                                                   sharding=batch_sharding)
    task = loop.Task(model_config=cfg, init_fn=init_fn, loss_fn=pretrain.make_loss(model))
    loop_config = settings.LoopConfig(total_steps=10, global_batch_size=BATCH)
    train = program.build(task, optimizer.make_optimizer(opt_config), loop_config, mesh,
                          learning_rate_fn=optimizer.learning_rate_schedule(opt_config),
                          abstract=True)
    return train.compile(batch).as_text()


def _all_gather_shapes(hlo: str) -> list[list[int]]:
    """The result shape of every all-gather in the program (per device)."""
    found = re.findall(r"= \w+\[([\d,]*)\]\{[\d,]*\} all-gather(?:-start)?\(", hlo)
    return [[int(d) for d in dims.split(",") if d] for dims in found]


def _worker(out_dir: str) -> None:
    assert jax.device_count() == 8
    # Unrolled, every layer is its own copy of the same program: one layer shows what each
    # gathers, at half the compilation. Scanned, the stack keeps its 2 layers (a scan of one
    # step could be simplified away).
    results = {name: _all_gather_shapes(_compiled_text(_config(scanned, layers)))
               for name, scanned, layers in (("unrolled", False, 1), ("scanned", True, LAYERS))}
    eight_devices.write(out_dir, results)


@pytest.fixture(scope="module")
def gathers(tmp_path_factory):
    out_dir = str(tmp_path_factory.mktemp("activation_sharding"))
    return eight_devices.run(__file__, out_dir, timeout=900)


def _with_layers(shapes):
    """Each shape, and the same with the scanned stack's leading axis."""
    return [list(s) for s in shapes] + [[LAYERS, *s] for s in shapes]


# Weights with a tensor-split dimension, that dimension whole (the other whole or split by fsdp).
TENSOR_DIMENSION_WHOLE = _with_layers(
    [[h, INTERMEDIATE] for h in (HIDDEN, HIDDEN // FSDP)]  # FFN intermediate (and gate)
    + [[INTERMEDIATE, h] for h in (HIDDEN, HIDDEN // FSDP)]  # FFN output
    + [[h, HEADS, HEAD_DIM] for h in (HIDDEN, HIDDEN // FSDP)]  # query, key, value
    + [[HEADS, HEAD_DIM, h] for h in (HIDDEN, HIDDEN // FSDP)]  # attention output
    + [[VOCAB, h] for h in (HIDDEN, HIDDEN // FSDP)])  # word embeddings (tied decoder)
# The FSDP gathers: the fsdp dimension whole, the tensor one still split.
FFN_FSDP_GATHERS = _with_layers([[HIDDEN, INTERMEDIATE // TENSOR]])
TABLE_FSDP_GATHERS = [[VOCAB // TENSOR, HIDDEN]]


@pytest.mark.parametrize("layout", ["unrolled", "scanned"])
def test_no_all_gather_joins_a_tensor_split_dimension(gathers, layout):
    joined = [shape for shape in gathers[layout] if shape in TENSOR_DIMENSION_WHOLE]
    assert not joined, f"all-gathers that join a tensor-split weight dimension: {joined}"


@pytest.mark.parametrize("layout", ["unrolled", "scanned"])
def test_weights_are_gathered_over_fsdp_only(gathers, layout):
    assert any(shape in FFN_FSDP_GATHERS for shape in gathers[layout]), gathers[layout]
    assert any(shape in TABLE_FSDP_GATHERS for shape in gathers[layout]), gathers[layout]


def _constraints_in(fn, *args) -> int:
    return str(jax.make_jaxpr(fn)(*args)).count("sharding_constraint")


def test_constraints_apply_only_under_activation_sharding():
    cfg = _config(scan_layers=False)
    model = BertModel(cfg)
    ids = jnp.ones((2, SEQ), jnp.int32)
    params = nn.meta.unbox(model.init(jax.random.PRNGKey(0), ids)["params"])
    apply = lambda p: model.apply({"params": p}, ids).sequence_output
    assert _constraints_in(apply, params) == 0  # a plain apply: no rules, no mesh
    mesh = sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1])
    with nn.logical_axis_rules(sharding.LOGICAL_AXIS_RULES):
        assert _constraints_in(apply, params) == 0  # rules without a mesh: still none
    constrained = sharding.with_activation_sharding(apply, mesh)
    # Per layer: q, k, v, context, FFN inner, residual stream; plus the table and the embeddings.
    assert _constraints_in(constrained, params) == 6 * cfg.num_hidden_layers + 2
    out = jax.jit(constrained)(params)
    assert jnp.allclose(out, jax.jit(apply)(params), rtol=0, atol=0)


if __name__ == "__main__":
    _worker(sys.argv[1])
