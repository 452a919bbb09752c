"""ModernBERT against transformers' own: parity on random weights, both directions of the
checkpoint conversion, the scanned layout, packed rows and the one-line refusals.

The reference models are transformers' ModernBert* classes built from small configs with random
weights (no download), eager attention (what runs without flash-attn), no torch.compile. Their
weights are redrawn larger than transformers' init (std 0.15, LayerNorm scales around 1, biases
around 0) so that attention is sharp: a wrong window, RoPE base or half of the fused GeGLU then
moves the outputs by far more than the tolerance. Outputs are compared at the real tokens (at
padding transformers' flash path returns zeros, eager something, neither is used).
"""

import json
import os

import flax.linen as nn
import jax
import numpy as np
import pytest
import torch
import transformers
from jax.sharding import PartitionSpec as P
from safetensors import numpy as safetensors_numpy

from bert_jax.config.bert import ConfigError
from bert_jax.config.modernbert import PRESETS, ModernBertConfig
from bert_jax.convert import modernbert as convert
from bert_jax.convert.hf_layout import CheckpointError
from bert_jax.model import modernbert, modernbert_scan
from bert_jax.runtime import sharding

import hf_peer

TOL = 1e-5  # fp32
VOCAB = 97
BATCH, SEQ = 3, 20
LENGTHS = (SEQ, SEQ - 7, 5)  # rows 1 and 2 padded at the end
WEIGHT_STD = 0.15

# (local_attention, global_attn_every_n_layers, layers, bias flags): a window shorter than the
# rows, a short period with every bias on, global attention everywhere, a window longer than
# the rows.
SETTINGS = {
    "window8_every3": dict(local_attention=8, global_attn_every_n_layers=3, num_hidden_layers=4),
    "window4_every2_biases": dict(local_attention=4, global_attn_every_n_layers=2,
                                  num_hidden_layers=5, attention_bias=True, mlp_bias=True,
                                  norm_bias=True, classifier_bias=True),
    "all_global": dict(local_attention=8, global_attn_every_n_layers=1, num_hidden_layers=3),
    "window64_every3": dict(local_attention=64, global_attn_every_n_layers=3,
                            num_hidden_layers=3),
}


def hf_config(**overrides) -> transformers.ModernBertConfig:
    settings = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
                    num_attention_heads=4, max_position_embeddings=64,
                    global_attn_every_n_layers=3, local_attention=8, global_rope_theta=160000.0,
                    local_rope_theta=10000.0, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                    cls_token_id=1, sep_token_id=2, attn_implementation="eager",
                    **hf_peer.EAGER_MODERNBERT)
    settings.update(overrides)
    return transformers.ModernBertConfig(**settings)


def hf_model(cls, seed: int = 0, **overrides):
    """transformers' `cls` from a small config, its weights redrawn (see the module doc)."""
    torch.manual_seed(seed)
    model = cls(hf_config(**overrides)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(WEIGHT_STD * torch.randn_like(p))
    return model


def batch(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """input_ids and attention_mask [BATCH, SEQ], padding (id 0) at the end of rows 1 and 2."""
    rng = np.random.default_rng(seed)
    mask = (np.arange(SEQ)[None] < np.asarray(LENGTHS)[:, None]).astype(np.int64)
    ids = np.where(mask, rng.integers(3, VOCAB, (BATCH, SEQ)), 0)
    return ids, mask


def torch_outputs(model, ids, mask):
    with torch.no_grad():
        out = model(input_ids=torch.as_tensor(ids), attention_mask=torch.as_tensor(mask))
    return (out.last_hidden_state if hasattr(out, "last_hidden_state") else out.logits).numpy()


def saved(model, tmp_path_factory, name: str) -> str:
    folder = str(tmp_path_factory.mktemp(name))
    model.save_pretrained(folder)
    return folder


def ours(folder: str, **overrides):
    """Our model and params read from a Hugging Face folder."""
    cfg, params = convert.load(folder, **overrides)
    return cfg, params, convert.model_for(cfg, params, convert.architecture(folder))


def real_max_diff(a: np.ndarray, b: np.ndarray, mask: np.ndarray) -> float:
    """Largest |a - b| over the real tokens of [batch, seq, ...] arrays."""
    return float(np.abs(np.asarray(a) - np.asarray(b))[mask.astype(bool)].max())


def report(what: str, diff: float) -> None:
    print(f"parity {what}: max abs diff {diff:.3g}")


# ----- config --------------------------------------------------------------------------------

def test_config_round_trip_through_transformers():
    theirs = hf_config(**SETTINGS["window4_every2_biases"], classifier_pooling="mean",
                       local_rope_theta=5000.0)
    cfg = ModernBertConfig.from_hf_dict(theirs.to_dict())
    assert cfg.family == "modernbert"
    assert (cfg.local_attention, cfg.global_attn_every_n_layers, cfg.local_rope_theta) == (4, 2,
                                                                                         5000.0)
    back = transformers.ModernBertConfig(**cfg.to_hf_dict())
    for key, value in theirs.to_dict().items():
        if key in ("architectures", "transformers_version", "_attn_implementation_autoset",
                   "torch_dtype", "dtype", "reference_compile"):
            continue
        assert back.to_dict()[key] == value, key
    # transformers 4's None for local_rope_theta: local layers use the global base
    legacy = {k: v for k, v in theirs.to_dict().items()
              if k not in ("layer_types", "rope_parameters")}  # transformers 5's layout
    none = ModernBertConfig.from_hf_dict({**legacy, "local_rope_theta": None})
    assert none.local_rope_theta == none.global_rope_theta == 160000.0


def test_both_config_layouts_read_as_one_model():
    """transformers 4 writes global_attn_every_n_layers and two RoPE bases; transformers 5 a kind
    per layer and RoPE settings per kind. Either reads as the same config, whichever transformers
    is installed; where both are present, 5's decide (as in transformers 5)."""
    v4 = {"model_type": "modernbert", "num_hidden_layers": 5, "global_attn_every_n_layers": 2,
          "global_rope_theta": 80000.0, "local_rope_theta": 5000.0}
    v5 = {"model_type": "modernbert", "num_hidden_layers": 5,
          "layer_types": ["full_attention", "sliding_attention"] * 2 + ["full_attention"],
          "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 80000.0},
                              "sliding_attention": {"rope_type": "default",
                                                    "rope_theta": 5000.0}}}
    expected = ModernBertConfig.from_hf_dict(v4)
    assert (expected.global_attn_every_n_layers, expected.local_rope_theta) == (2, 5000.0)
    assert ModernBertConfig.from_hf_dict(v5) == expected
    assert ModernBertConfig.from_hf_dict({**v4, **v5, "global_attn_every_n_layers": 3,
                                          "local_rope_theta": 1.0}) == expected
    one_global = {**v5, "layer_types": ["full_attention"] + ["sliding_attention"] * 4}
    assert ModernBertConfig.from_hf_dict(one_global).global_attn_every_n_layers == 5
    for bad, message in (
            ({"layer_types": ["sliding_attention", "full_attention"]}, "only full attention in "
             "every n-th layer from layer 0"),
            ({"layer_types": ["full_attention", "sliding_attention", "full_attention",
                              "full_attention"]}, "only full attention"),
            ({"layer_types": ["full_attention", "chunked"]}, "expected a list of"),
            ({"rope_parameters": {"full_attention": {"rope_type": "yarn", "factor": 4.0}}},
             "is not supported"),
            ({"rope_parameters": {"rope_type": "default", "rope_theta": 1.0}},
             "expected an object keyed by")):
        with pytest.raises(ConfigError, match=f"cfg.json: .*{message}"):
            ModernBertConfig.from_hf_dict({**v5, **bad}, source="cfg.json")


def test_published_base_config_reads_as_the_base_preset():
    """The keys of answerdotai/ModernBERT-base's config.json (transformers 4.47's), among them
    settings of transformers' own that change nothing we compute."""
    published = {
        "architectures": ["ModernBertForMaskedLM"], "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": 50281, "classifier_activation": "gelu",
        "classifier_bias": False, "classifier_dropout": 0.0, "classifier_pooling": "mean",
        "cls_token_id": 50281, "decoder_bias": True, "deterministic_flash_attn": False,
        "embedding_dropout": 0.0, "eos_token_id": 50282, "global_attn_every_n_layers": 3,
        "global_rope_theta": 160000.0, "gradient_checkpointing": False,
        "hidden_activation": "gelu", "hidden_size": 768, "initializer_cutoff_factor": 2.0,
        "initializer_range": 0.02, "intermediate_size": 1152, "layer_norm_eps": 1e-05,
        "local_attention": 128, "local_rope_theta": 10000.0, "max_position_embeddings": 8192,
        "mlp_bias": False, "mlp_dropout": 0.0, "model_type": "modernbert", "norm_bias": False,
        "norm_eps": 1e-05, "num_attention_heads": 12, "num_hidden_layers": 22,
        "pad_token_id": 50283, "position_embedding_type": "absolute", "reference_compile": True,
        "sep_token_id": 50282, "sparse_pred_ignore_index": -100, "sparse_prediction": False,
        "torch_dtype": "float32", "transformers_version": "4.47.0.dev0", "vocab_size": 50368}
    cfg = ModernBertConfig.from_hf_dict(published)
    assert cfg == ModernBertConfig.preset("base", classifier_pooling="mean")
    assert [cfg.window_of(i) for i in range(4)] == [None, 128, 128, None]
    assert "family" not in cfg.to_hf_dict() and cfg.to_hf_dict()["model_type"] == "modernbert"


@pytest.mark.parametrize("name", ["base", "large", "tiny"])
def test_num_params_is_transformers_count(name):
    cfg = ModernBertConfig.preset(name, pad_token_id=0)
    with torch.device("meta"):
        model = transformers.ModernBertModel(transformers.ModernBertConfig(
            **cfg.to_hf_dict(), **hf_peer.EAGER_MODERNBERT))
    assert cfg.num_params() == sum(p.numel() for p in model.parameters())
    if name == "base":
        assert round(cfg.num_params() / 1e6) == 149  # ModernBERT-base's published size
    assert PRESETS[name][0] == cfg.num_hidden_layers


@pytest.mark.parametrize("changes, message", [
    (dict(hidden_size=30), "not divisible by num_attention_heads"),
    (dict(classifier_pooling="max"), "classifier_pooling='max'"),
    (dict(local_attention=0), "local_attention must be a positive integer"),
    (dict(hidden_activation="gelu_fast"), "hidden_activation='gelu_fast' is unknown"),
    (dict(pad_token_id=500), "pad_token_id=500 is outside the vocabulary"),
    (dict(model_type="bert"), "model_type='bert', expected 'modernbert'"),
    (dict(rope_scaling={"rope_type": "linear", "factor": 2.0}), "rope_scaling="),
])
def test_config_refusals_are_one_line(changes, message):
    hf = {**hf_config().to_dict(), **changes}
    with pytest.raises(ConfigError, match=message) as caught:
        ModernBertConfig.from_hf_dict(hf, source="x/config.json")
    assert "\n" not in str(caught.value) and str(caught.value).startswith("x/config.json: ")


# ----- parity ----------------------------------------------------------------------------------

@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_model_hidden_states_match_transformers(setting, tmp_path_factory):
    theirs = hf_model(transformers.ModernBertModel, **SETTINGS[setting])
    folder = saved(theirs, tmp_path_factory, setting)
    _, params, model = ours(folder)
    assert isinstance(model, modernbert.ModernBertModel)
    ids, mask = batch()
    out = jax.jit(model.apply)({"params": params}, ids, attention_mask=mask)
    diff = real_max_diff(out.sequence_output, torch_outputs(theirs, ids, mask), mask)
    report(f"ModernBertModel hidden states, {setting}", diff)
    assert diff < TOL


@pytest.mark.parametrize("setting", ["window8_every3", "window4_every2_biases"])
def test_masked_lm_logits_match_transformers(setting, tmp_path_factory):
    decoder_bias = setting == "window8_every3"
    theirs = hf_model(transformers.ModernBertForMaskedLM, **SETTINGS[setting],
                      decoder_bias=decoder_bias)
    folder = saved(theirs, tmp_path_factory, f"mlm_{setting}")
    _, params, model = ours(folder)
    assert isinstance(model, modernbert.ModernBertForMaskedLM)
    assert ("decoder_bias" in params["mlm"]) == decoder_bias
    _, encoder = convert.load(folder, with_heads=False)  # the bare ModernBertModel tree
    assert jax.tree.all(jax.tree.map(np.array_equal, encoder, params["bert"]))
    ids, mask = batch()
    logits = jax.jit(model.apply)({"params": params}, ids, attention_mask=mask).mlm_logits
    diff = real_max_diff(logits, torch_outputs(theirs, ids, mask), mask)
    report(f"ModernBertForMaskedLM logits, {setting} (decoder_bias={decoder_bias})", diff)
    assert diff < TOL
    if not decoder_bias:
        return
    positions = np.array([[0, 3, 19], [1, 12, 2], [4, 0, 1]])  # the masked positions only
    gathered = jax.jit(model.apply)({"params": params}, ids, positions,
                                    attention_mask=mask).mlm_logits
    np.testing.assert_allclose(gathered, np.take_along_axis(np.asarray(logits),
                                                            positions[:, :, None], axis=1),
                               atol=TOL)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_sequence_classification_logits_match_transformers(pooling, tmp_path_factory):
    theirs = hf_model(transformers.ModernBertForSequenceClassification,
                      **SETTINGS["window4_every2_biases"], classifier_pooling=pooling,
                      num_labels=3)
    folder = saved(theirs, tmp_path_factory, f"seq_{pooling}")
    _, params, model = ours(folder)
    assert isinstance(model, modernbert.ModernBertForSequenceClassification)
    ids, mask = batch()
    logits = jax.jit(model.apply)({"params": params}, ids, attention_mask=mask)
    assert logits.shape == (BATCH, 3)
    diff = float(np.abs(np.asarray(logits) - torch_outputs(theirs, ids, mask)).max())
    report(f"ModernBertForSequenceClassification logits, {pooling} pooling", diff)
    assert diff < TOL


def test_token_classification_logits_match_transformers(tmp_path_factory):
    theirs = hf_model(transformers.ModernBertForTokenClassification,
                      **SETTINGS["window8_every3"], num_labels=5)
    folder = saved(theirs, tmp_path_factory, "token")
    _, params, model = ours(folder)
    assert isinstance(model, modernbert.ModernBertForTokenClassification)
    ids, mask = batch()
    logits = jax.jit(model.apply)({"params": params}, ids, attention_mask=mask)
    diff = real_max_diff(logits, torch_outputs(theirs, ids, mask), mask)
    report("ModernBertForTokenClassification logits", diff)
    assert diff < TOL


# ----- scanned layers --------------------------------------------------------------------------

def test_scanned_layers_keep_the_pattern_and_compute_the_same(tmp_path_factory):
    # 6 layers, global every 2: layer 0, groups (1 local, 2 global) and (3, 4), layer 5 after.
    theirs = hf_model(transformers.ModernBertForMaskedLM, num_hidden_layers=6,
                      global_attn_every_n_layers=2, local_attention=6)
    folder = saved(theirs, tmp_path_factory, "scan")
    _, unrolled, model = ours(folder)
    scan_cfg, scanned, scan_model = ours(folder, scan_layers=True)
    encoder = scanned["bert"]["encoder"]
    assert sorted(encoder) == ["final_norm", "layer_0", "layer_5", "layers"]
    assert sorted(encoder["layers"]) == ["member_0", "member_1"]
    assert encoder["layers"]["member_1"]["attn"]["Wqkv"]["kernel"].shape == (2, 32, 3, 4, 8)
    np.testing.assert_array_equal(encoder["layers"]["member_1"]["mlp"]["Wo"]["kernel"][1],
                                  unrolled["bert"]["encoder"]["layer_4"]["mlp"]["Wo"]["kernel"])
    back = modernbert_scan.unstack_layers(scanned, scan_cfg)
    assert jax.tree.all(jax.tree.map(np.array_equal, back, unrolled))

    ids, mask = batch()
    flat = jax.jit(model.apply)({"params": unrolled}, ids, attention_mask=mask).mlm_logits
    stacked = jax.jit(scan_model.apply)({"params": scanned}, ids,
                                        attention_mask=mask).mlm_logits
    diff = real_max_diff(stacked, flat, mask)
    report("scanned vs unrolled MLM logits (6 layers, every 2)", diff)
    assert diff < TOL  # the same arithmetic, fused differently by XLA
    diff = real_max_diff(stacked, torch_outputs(theirs, ids, mask), mask)
    report("scanned ModernBertForMaskedLM vs transformers", diff)
    assert diff < TOL


def test_scanned_rematerialised_gradients_are_the_unrolled_ones(tmp_path_factory):
    """nn.scan over the groups, each layer under nn.remat: the same gradients as unrolled."""
    folder = saved(hf_model(transformers.ModernBertForMaskedLM, num_hidden_layers=6,
                            global_attn_every_n_layers=2, local_attention=6),
                   tmp_path_factory, "scan_grads")
    _, unrolled, model = ours(folder)
    scan_cfg, scanned, scan_model = ours(folder, scan_layers=True, remat_policy="full")
    ids, mask = batch()

    def loss(model, params):
        return model.apply({"params": params}, ids, attention_mask=mask).mlm_logits.std()

    grads = jax.jit(jax.grad(lambda p: loss(model, p)))(unrolled)
    scan_grads = modernbert_scan.unstack_layers(
        jax.jit(jax.grad(lambda p: loss(scan_model, p)))(scanned), scan_cfg)
    worst = max(jax.tree.leaves(jax.tree.map(lambda a, b: float(np.abs(a - b).max()),
                                             grads, scan_grads)))
    report("scanned (remat full) vs unrolled gradients", worst)
    assert worst < TOL


# ----- packed rows -----------------------------------------------------------------------------

def test_packed_rows_compute_each_sequence_alone(tmp_path_factory):
    """Two sequences packed in one row (segment ids 1, 2, then padding) give what each gives in
    a row of its own: positions restart, attention and the window stay within the segment."""
    theirs = hf_model(transformers.ModernBertModel, local_attention=4,
                      global_attn_every_n_layers=2, num_hidden_layers=3,
                      classifier_pooling="mean")
    _, params, model = ours(saved(theirs, tmp_path_factory, "packed"))
    apply = jax.jit(model.apply)
    ids, _ = batch(seed=1)
    lengths = (7, 9)
    row = np.concatenate([ids[0, :7], ids[1, :9], np.zeros(4, np.int64)])[None]
    segments = np.array([[1] * 7 + [2] * 9 + [0] * 4])
    packed = apply({"params": params}, row, attention_mask=(segments > 0).astype(np.int64),
                   segment_ids=segments, pool_positions=np.array([[0, 7]]))
    alone_mask = (np.arange(9)[None] < np.array(lengths)[:, None]).astype(np.int64)
    alone = apply({"params": params}, np.where(alone_mask, ids[:2, :9], 0),
                  attention_mask=alone_mask)  # one row each, the first padded to 9
    for k, (start, length) in enumerate(zip((0, 7), lengths)):
        np.testing.assert_allclose(packed.sequence_output[0, start:start + length],
                                   alone.sequence_output[k, :length], atol=TOL)
        np.testing.assert_allclose(packed.pooled_output[0, k], alone.pooled_output[k], atol=TOL)


# ----- checkpoints both ways -------------------------------------------------------------------

@pytest.mark.parametrize("cls", [transformers.ModernBertForMaskedLM,
                                 transformers.ModernBertForSequenceClassification])
def test_hugging_face_round_trip(cls, tmp_path_factory):
    """transformers -> save_pretrained -> our load -> our save -> transformers: same outputs."""
    theirs = hf_model(cls, **SETTINGS["window4_every2_biases"], num_labels=2)
    folder = saved(theirs, tmp_path_factory, cls.__name__)
    cfg, params = convert.load(folder, scan_layers=True)
    out = str(tmp_path_factory.mktemp(f"{cls.__name__}_ours"))
    convert.save(cfg, params, out, architecture=convert.architecture(folder))
    assert not os.path.exists(os.path.join(out, "pytorch_model.bin"))
    with open(os.path.join(out, "config.json")) as f:
        assert json.load(f)["architectures"] == [cls.__name__]
    back = cls.from_pretrained(out, attn_implementation="eager",
                               **hf_peer.EAGER_MODERNBERT).eval()
    ids, mask = batch()
    diff = float(np.abs(torch_outputs(back, ids, mask) - torch_outputs(theirs, ids, mask)).max())
    report(f"round trip {cls.__name__}", diff)
    assert diff == 0.0
    again_cfg, again = convert.load(out)
    assert again_cfg == cfg.replace(scan_layers=False)
    assert jax.tree.all(jax.tree.map(np.array_equal, again,
                                     modernbert_scan.unstack_layers(params, cfg)))


def test_model_init_tree_is_what_the_converter_writes(tmp_path):
    """A tree that our own init makes exports, and transformers loads it without a missing or
    unexpected key."""
    cfg = ModernBertConfig.preset("tiny", vocab_size=VOCAB, pad_token_id=0, norm_bias=True,
                                  local_attention=4, global_attn_every_n_layers=2,
                                  scan_layers=True)  # layer 0, then one scanned group
    model = modernbert.ModernBertForMaskedLM(cfg)
    shapes = jax.eval_shape(model.init, jax.random.key(0), np.ones((1, 8), np.int64))["params"]
    # logical axes for the mesh rules (bert_jax.runtime.sharding), the fused parts on axes of
    # their own
    specs = nn.get_partition_spec(shapes)["bert"]
    assert specs["embeddings"]["tok_embeddings"]["embedding"] == P("vocab", "embed")
    assert specs["encoder"]["layers"]["member_0"]["attn"]["Wqkv"]["kernel"] == P(
        "layers", "embed", None, "heads", "kv")
    assert specs["encoder"]["layer_0"]["attn"]["Wo"]["kernel"] == P("heads", "kv", "embed")
    assert specs["encoder"]["layer_0"]["mlp"]["Wi"]["kernel"] == P("embed", None, "mlp")
    assert "attn_norm" not in specs["encoder"]["layer_0"]  # an identity in layer 0
    # the shardings of one layout, converted, are those of the other
    mesh = sharding.make_mesh(devices=jax.devices()[:1])
    scanned_shardings = sharding.param_shardings(shapes, mesh)
    unrolled_shardings = sharding.param_shardings(jax.eval_shape(
        modernbert.ModernBertForMaskedLM(cfg.replace(scan_layers=False)).init,
        jax.random.key(0), np.ones((1, 8), np.int64))["params"], mesh)
    def specs_of(shardings):  # the specs as tuples: a stacked leaf's has one more entry
        return jax.tree.map(lambda s: tuple(s.spec), shardings)

    assert specs_of(modernbert_scan.shardings_in_layout(unrolled_shardings, cfg, True)) == \
        specs_of(scanned_shardings)
    assert specs_of(modernbert_scan.shardings_in_layout(scanned_shardings, cfg, False)) == \
        specs_of(unrolled_shardings)
    params = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), nn.meta.unbox(shapes))
    convert.save(cfg, params, tmp_path)
    _, info = transformers.ModernBertForMaskedLM.from_pretrained(
        tmp_path, output_loading_info=True, **hf_peer.EAGER_MODERNBERT)
    assert not info["missing_keys"] and not info["unexpected_keys"]


def test_load_refusals_are_one_line(tmp_path_factory):
    folder = saved(hf_model(transformers.ModernBertForMaskedLM), tmp_path_factory, "refuse")
    weights = os.path.join(folder, "model.safetensors")
    tensors = safetensors_numpy.load_file(weights)
    with open(os.path.join(folder, "config.json")) as f:
        hf = json.load(f)
    for name, change in (("missing", {"model.layers.1.attn.Wqkv.weight": None}),
                         ("shape", {"head.dense.weight": np.zeros((3, 3), np.float32)})):
        broken = str(tmp_path_factory.mktemp(name))
        with open(os.path.join(broken, "config.json"), "w") as f:
            json.dump(hf, f)
        changed = {k: v for k, v in {**tensors, **change}.items() if v is not None}
        safetensors_numpy.save_file(changed, os.path.join(broken, "model.safetensors"))
        with pytest.raises(CheckpointError, match="model.layers.1.attn.Wqkv.weight"
                           if name == "missing" else "has shape") as caught:
            convert.load(broken)
        assert "\n" not in str(caught.value)
    with pytest.raises(FileNotFoundError, match="no model.safetensors"):
        convert.load(_config_only(tmp_path_factory, hf))
    cfg, params = convert.load(folder)
    with pytest.raises(CheckpointError, match="sequence or a token classifier"):
        convert.save(cfg, {"bert": params["bert"], "classifier": {}}, str(broken))


def _config_only(tmp_path_factory, hf) -> str:
    folder = str(tmp_path_factory.mktemp("config_only"))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(hf, f)
    return folder
