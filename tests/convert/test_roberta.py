"""RoBERTa and XLM-R checkpoints in and out, checked against transformers (torch CPU, fp32, eval).

The references are transformers' own RobertaModel, RobertaForMaskedLM,
RobertaForSequenceClassification, RobertaForTokenClassification, RobertaForQuestionAnswering,
XLMRobertaModel and XLMRobertaForMaskedLM, built from a small config with random weights (every
parameter perturbed, so that no bias or LayerNorm term is trivially zero or one) and saved by
`save_pretrained`. The batch is right-padded with <pad> (id 1), and one row fills all
max_position_embeddings - 2 positions, so the last row of the position table is read. transformers
computes the positions from input_ids != pad (position_ids are never passed to it); ours are
0..seq-1 moved by position_offset = pad_token_id + 1.

Tokenizers: a byte-level BPE (RoBERTa's pipeline) and a Unigram with Metaspace (XLM-R's
SentencePiece pipeline) are trained here on a few sentences with `tokenizers`, written as
tokenizer.json, and read by ours and by transformers' fast tokenizers from the same file.
"""

import json
import os

import flax.linen as nn
import jax
import numpy as np
import pytest
import safetensors.numpy
import tokenizers
import torch
import transformers
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

from bert_jax import BertConfig, BertForPreTraining, BertModel, ConfigError
from bert_jax.convert import hf
from bert_jax.data.corpora import demo as demo_corpus
from bert_jax.data.finetuning import encoding, readers, squad
from bert_jax.data.pretraining import masking
from bert_jax.data.tokenizers import load as tok
from bert_jax.embeddings import encode as sentence_embeddings
from bert_jax.recipes.finetune import recipe
from bert_jax.tools import convert_runs as runs
from bert_jax.tools import saved_runs
from bert_jax.train.checkpoint import params as params_loading

import hf_peer
from finetune_runs import tiny_finetune_config
from roberta_peer import FAIRSEQ_SPECIALS, PAD, SENTENCES, SMALL, byte_level_bpe

torch.set_num_threads(2)
transformers.logging.set_verbosity_error()

FP32_TOLERANCE = 1e-5  # the bound for fp32 parity
SEQ = SMALL["max_position_embeddings"] - PAD - 1  # the longest row: 22 tokens


def random_reference(architecture, seed=0, **config):
    """A transformers model of `architecture` (e.g. "RobertaForMaskedLM") with every parameter
    perturbed."""
    config_class = (transformers.XLMRobertaConfig if architecture.startswith("XLM")
                    else transformers.RobertaConfig)
    torch.manual_seed(seed)
    model = getattr(transformers, architecture)(config_class(**{**SMALL, **config})).eval()
    with torch.no_grad():
        for parameter in model.parameters():  # tied tensors are listed once
            parameter.add_(0.1 * torch.randn_like(parameter))
    return model


def padded_batch(seed=0, lengths=(SEQ, 13, 6)):
    """<s> tokens </s> then <pad>, right-padded: input_ids, attention_mask [3, SEQ] int32."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, SMALL["vocab_size"], size=(len(lengths), SEQ)).astype(np.int32)
    mask = (np.arange(SEQ)[None] < np.asarray(lengths)[:, None]).astype(np.int32)
    ids[:, 0] = 0
    ids[np.arange(len(lengths)), np.asarray(lengths) - 1] = 2
    return {"input_ids": np.where(mask == 1, ids, PAD), "attention_mask": mask}


def torch_outputs(model, batch):
    """transformers' outputs, given only the ids and the mask: positions and token types are
    its own."""
    with torch.no_grad():
        return model(**{k: torch.from_numpy(v.astype(np.int64)) for k, v in batch.items()})


def our_outputs(cfg, params, batch):
    """What our model for `params` gives: (name, array) pairs named as transformers names them."""
    model = hf.model_for(cfg, params)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    types = np.zeros_like(ids)
    if isinstance(model, BertModel):
        out = jax.jit(model.apply)({"params": params}, ids, types, mask)
        pairs = [("last_hidden_state", out.sequence_output)]
        return pairs + ([("pooler_output", out.pooled_output)] if model.add_pooler else [])
    if isinstance(model, BertForPreTraining):  # every position is "masked": all the logits
        positions = np.broadcast_to(np.arange(ids.shape[1], dtype=np.int32), ids.shape)
        out = jax.jit(model.apply)({"params": params}, ids, positions, types, mask)
        return [("logits", out.mlm_logits)]
    out = jax.jit(model.apply)({"params": params}, ids, types, mask)
    if isinstance(out, tuple):  # span QA
        return [("start_logits", out[0]), ("end_logits", out[1])]
    return [("logits", out)]


def max_diffs(ours, reference, mask):
    """name -> max |ours - reference|, over real tokens where the output is per token."""
    diffs = {}
    for name, value in ours:
        diff = np.abs(np.asarray(value) - getattr(reference, name).numpy())
        diffs[name] = float((diff[mask] if diff.shape[:2] == mask.shape else diff).max())
    return diffs


# ----- config ---------------------------------------------------------------------------------

def test_roberta_config_json_both_ways():
    for config_class, model_type in ((transformers.RobertaConfig, "roberta"),
                                     (transformers.XLMRobertaConfig, "xlm-roberta")):
        hf_dict = json.loads(config_class(**SMALL).to_json_string())
        cfg = BertConfig.from_hf_dict(hf_dict)
        assert (cfg.model_type, cfg.position_offset, cfg.type_vocab_size) == (model_type, 2, 1)
        assert cfg.max_sequence_length == SEQ
        written = cfg.to_hf_dict()
        assert written["model_type"] == model_type and "position_offset" not in written
        assert BertConfig.from_hf_dict(written) == cfg
        loaded = config_class.from_dict(written)  # transformers reads it back the same
        assert (loaded.pad_token_id, loaded.max_position_embeddings) == (PAD, 24)
    # A config.json without pad_token_id: transformers' RobertaConfig default, 1.
    bare = {k: v for k, v in json.loads(transformers.RobertaConfig(**SMALL).to_json_string())
            .items() if k != "pad_token_id"}
    assert BertConfig.from_hf_dict(bare).position_offset == 2
    # BERT never moves.
    assert BertConfig().position_offset == 0 and BertConfig().max_sequence_length == 512
    with pytest.raises(ConfigError, match="position_offset=2 moves rows"):
        BertConfig(position_offset=2, position_embedding_type="rotary")
    with pytest.raises(ConfigError, match="model_type='gpt2'"):
        BertConfig.from_hf_dict({**bare, "model_type": "gpt2"})


def test_a_row_longer_than_the_offset_table_is_refused():
    cfg = BertConfig(**{k: SMALL[k] for k in ("vocab_size", "hidden_size", "num_hidden_layers",
                                              "num_attention_heads", "intermediate_size",
                                              "max_position_embeddings", "pad_token_id")},
                     model_type="roberta", position_offset=PAD + 1)
    model = BertModel(cfg)  # shapes only: the check runs while tracing
    params = jax.eval_shape(model.init, jax.random.key(0), np.zeros((1, SEQ), np.int32))
    with pytest.raises(ValueError, match="exceeds max_position_embeddings=24 less "
                                         "position_offset=2"):
        jax.eval_shape(model.apply, params, np.zeros((1, SEQ + 1), np.int32))


# ----- parity and round trip, per class ---------------------------------------------------------

ARCHITECTURES = ["RobertaModel", "RobertaForMaskedLM", "RobertaForSequenceClassification",
                 "RobertaForTokenClassification", "RobertaForQuestionAnswering",
                 "XLMRobertaModel", "XLMRobertaForMaskedLM",
                 "XLMRobertaForSequenceClassification"]


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_checkpoint_matches_transformers_and_round_trips(tmp_path, architecture):
    extra = {"num_labels": 3} if "Classification" in architecture else {}
    reference = random_reference(architecture, seed=len(architecture), **extra)
    reference.save_pretrained(tmp_path / "in", safe_serialization=True)
    cfg, params = hf.load(tmp_path / "in")
    model_type = "xlm-roberta" if architecture.startswith("XLM") else "roberta"
    assert (cfg.model_type, cfg.position_offset) == (model_type, PAD + 1)

    batch = padded_batch(seed=len(architecture))
    mask = batch["attention_mask"].astype(bool)
    assert mask.all(axis=1).any() and (~mask).any()  # a full-length row, and padding
    expected = torch_outputs(reference, batch)
    diffs = max_diffs(our_outputs(cfg, params, batch), expected, mask)
    print(f"{architecture} fp32 parity: " + ", ".join(
        f"{name} max |diff| {value:.3g}" for name, value in diffs.items()))
    assert diffs and max(diffs.values()) <= FP32_TOLERANCE

    hf.save(cfg, params, tmp_path / "out")
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["architectures"] == [architecture] and written["model_type"] == model_type
    reloaded, info = getattr(transformers, architecture).from_pretrained(
        tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    again = torch_outputs(reloaded.eval(), batch)
    for name in diffs:
        np.testing.assert_array_equal(getattr(again, name).numpy(),
                                      getattr(expected, name).numpy())
    # And ours reads its own export back unchanged.
    _, params_back = hf.load(tmp_path / "out")
    jax.tree.map(np.testing.assert_array_equal, params_back, params)


def test_sequence_classifier_head_is_our_pooler_and_classifier(tmp_path):
    reference = random_reference("RobertaForSequenceClassification", seed=3, num_labels=2)
    reference.save_pretrained(tmp_path, safe_serialization=True)
    _, params = hf.load(tmp_path)
    head = reference.classifier
    np.testing.assert_array_equal(params["bert"]["pooler"]["dense"]["kernel"],
                                  head.dense.weight.detach().numpy().T)
    np.testing.assert_array_equal(params["classifier"]["dense"]["kernel"],
                                  head.out_proj.weight.detach().numpy().T)
    # The encoder alone: the pooler goes with the head's dense layer.
    _, encoder = hf.load(tmp_path, with_heads=False)
    assert hf.heads_of(encoder) == () and "pooler" not in encoder


def test_through_our_checkpoint_and_back(tmp_path):
    """experiments/convert.py's two directions: the config (model_type, position_offset) is kept
    by our checkpoint, and the export is the checkpoint transformers saved, tensor for tensor."""
    random_reference("XLMRobertaForSequenceClassification", seed=6, num_labels=2
                     ).save_pretrained(tmp_path / "in", safe_serialization=True)
    runs.hf_to_ours(str(tmp_path / "in"), str(tmp_path / "ours"), encoder_only=False)
    cfg, _ = params_loading.load_params(str(tmp_path / "ours"), step=0)
    assert (cfg.model_type, cfg.position_offset) == ("xlm-roberta", PAD + 1)
    runs.ours_to_hf(str(tmp_path / "ours"), str(tmp_path / "out"), None, encoder_only=False,
                    tokenizer="none")
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["architectures"] == ["XLMRobertaForSequenceClassification"]
    before = safetensors.numpy.load_file(tmp_path / "in" / "model.safetensors")
    after = safetensors.numpy.load_file(tmp_path / "out" / "model.safetensors")
    assert sorted(before) == sorted(after)
    for name in before:
        np.testing.assert_array_equal(after[name], before[name])


def test_our_fresh_xlm_r_runs_the_same_in_transformers(tmp_path):
    """ours -> HF for a tree that never came from HF: boxed params straight from `init`."""
    fields = {k: v for k, v in SMALL.items() if k not in ("bos_token_id", "eos_token_id")}
    cfg = BertConfig(**fields, model_type="xlm-roberta", position_offset=PAD + 1)
    batch = padded_batch(seed=5)
    positions = np.broadcast_to(np.arange(SEQ, dtype=np.int32), batch["input_ids"].shape)
    variables = jax.jit(BertForPreTraining(cfg, with_nsp=False).init)(
        jax.random.key(0), batch["input_ids"], positions)
    hf.save(cfg, variables, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == \
        ["XLMRobertaForMaskedLM"]
    reloaded = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert type(reloaded).__name__ == "XLMRobertaForMaskedLM"
    params = jax.tree.map(np.asarray, nn.meta.unbox(variables["params"]))
    diffs = max_diffs(our_outputs(cfg, params, batch), torch_outputs(reloaded, batch),
                      batch["attention_mask"].astype(bool))
    assert diffs["logits"] <= FP32_TOLERANCE


def test_what_a_roberta_checkpoint_cannot_hold_is_refused(tmp_path):
    reference = random_reference("RobertaForMaskedLM", seed=4)
    reference.save_pretrained(tmp_path / "in", safe_serialization=True)
    cfg, params = hf.load(tmp_path / "in")
    with pytest.raises(hf.CheckpointError, match="position_offset=0 cannot be exported as "
                                                 "model_type='roberta'"):
        hf.save(cfg.replace(position_offset=0), params, tmp_path / "a")
    with pytest.raises(hf.CheckpointError, match="position_offset=2 cannot be exported as "
                                                 "model_type='bert'"):
        hf.save(cfg.replace(model_type="bert"), params, tmp_path / "b")
    with pytest.raises(hf.CheckpointError, match="applies gelu whatever hidden_act says"):
        hf.save(cfg.replace(hidden_act="relu"), params, tmp_path / "c")
    nsp = {"bert": {**params["bert"], "pooler": {"dense": {
        "kernel": np.zeros((32, 32), np.float32), "bias": np.zeros(32, np.float32)}}},
        "mlm": params["mlm"], "nsp": {"dense": {"kernel": np.zeros((32, 2), np.float32),
                                                "bias": np.zeros(2, np.float32)}}}
    with pytest.raises(hf.CheckpointError, match="a Roberta checkpoint has no 'nsp' head"):
        hf.save(cfg, nsp, tmp_path / "d")
    assert not any((tmp_path / name).exists() for name in "abcd")  # nothing half-written

    config = json.loads((tmp_path / "in" / "config.json").read_text())
    (tmp_path / "in" / "config.json").write_text(json.dumps({**config, "hidden_act": "relu"}))
    with pytest.raises(hf.CheckpointError, match="applies gelu whatever hidden_act says"):
        hf.load(tmp_path / "in")
    assert hf.load(tmp_path / "in", with_heads=False)[0].hidden_act == "relu"


# ----- tokenizers -------------------------------------------------------------------------------

TEXTS = ["The quick dog runs.", "Zürich's café, north of the sun!", "unseen words: quokka 42",
         "  spaced   out  "]
PAIRS = [("Where is the dog?", "It sleeps in the sun."), ("fox", "Café naïve")]


def sentencepiece_unigram(path):
    """XLM-R's pipeline: NFKC, Metaspace, Unigram, <s> A </s> (</s> B </s>) by a template."""
    tokenizer = tokenizers.Tokenizer(models.Unigram())
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    tokenizer.train_from_iterator(SENTENCES, trainers.UnigramTrainer(
        vocab_size=150, special_tokens=FAIRSEQ_SPECIALS, unk_token="<unk>", show_progress=False))
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", 0), ("</s>", 2)])
    tokenizer.save(str(path))
    return path


# kind: (builder, transformers' tokenizer class of the model, the word-start mark)
TOKENIZERS = {"bpe": (byte_level_bpe, "RobertaTokenizer", "\u0120"),
              "unigram": (sentencepiece_unigram, "XLMRobertaTokenizer", "\u2581")}


@pytest.mark.parametrize("kind", sorted(TOKENIZERS))
def test_tokenizer_json_reads_like_transformers(tmp_path, kind):
    build, model_class, mark = TOKENIZERS[kind]
    path = build(tmp_path / "tokenizer.json")
    as_is = transformers.PreTrainedTokenizerFast(tokenizer_file=str(path))
    model_tokenizer = getattr(transformers, hf_peer.fast_tokenizer_name(model_class))
    ours = tok.load_tokenizer(str(path))
    assert ours.kind == {"bpe": "BPE", "unigram": "Unigram"}[kind]
    assert (ours.cls_id, ours.pad_id, ours.sep_id, ours.unk_id) == (0, 1, 2, 3)
    assert ours.mask_id == ours.token_to_id("<mask>") == 4 and ours.special_ids == (0, 1, 2, 3, 4)
    assert not ours.is_ordinary[list(ours.special_ids)].any() and ours.is_ordinary[5:].all()
    # Masking: <mask> for the mask, the five never masked, whole words kept together.
    spec = masking.MaskingSpec.from_tokenizer(ours, 0.5, 32, whole_word=True)
    assert spec.mask_id == 4 and set(spec.special_ids) == {0, 1, 2, 3, 4}
    assert not np.isin(spec.replacement_ids, spec.special_ids).any()
    row = np.asarray(encoding.pack_pair(ours, ours.encode(SENTENCES[2]), None, 64)[0])
    for seed in range(5):
        chosen = masking.choose_masked_positions(row, spec, np.random.default_rng(seed))
        assert len(chosen) and not np.isin(row[chosen], spec.special_ids).any()
        continuing = chosen[ours.is_continuation[row[chosen]] & (row[chosen - 1] != ours.cls_id)]
        assert np.isin(continuing - 1, chosen).all()  # a word's pieces go together

    # transformers 5's model classes rebuild the pipeline from their defaults (hf_peer): the
    # Unigram's NFKC would be gone, so there only the tokenizer.json as it is is a reference.
    references = [as_is] + ([model_tokenizer(tokenizer_file=str(path))] if hf_peer.MAJOR < 5
                            else [])
    for reference in references:
        for text in TEXTS:
            ids = ours.encode(text)
            assert reference(text)["input_ids"] == [ours.cls_id, *ids, ours.sep_id]
            assert encoding.pack_pair(ours, ids, None, 64)[0] == reference(text)["input_ids"]
        for a, b in PAIRS:
            expected = reference(a, b)["input_ids"]
            assert ours.encode_pair(a, b).ids == expected
            assert encoding.pack_pair(ours, ours.encode(a), ours.encode(b), 64)[0] == expected

    # Span QA rows: <s> question </s> </s> context </s>, the answer's tokens at its characters.
    context = "The dog sleeps in the sun."
    example = readers.QAExample("q", "Where is the dog?", context,
                                (readers.Answer("in the sun", context.index("in the sun")),))
    qa = squad.encode_qa_examples(ours, [example], squad.WindowConfig(64, 16, 16))
    expected = as_is(example.question, context)["input_ids"]
    assert qa["input_ids"][0, :len(expected)].tolist() == expected
    first = qa["offsets"][0, qa["start_positions"][0], 0]
    last = qa["offsets"][0, qa["end_positions"][0], 1]
    assert context[first:last].strip() == "in the sun"

    # Words of a tagged sentence are encoded as transformers encodes split words (RoBERTa's
    # byte-level BPE: each with its "Ġ", as with add_prefix_space=True).
    words = ("Where", "is", "Zürich's", "station", "?")
    # (transformers 5's PreTrainedTokenizerFast ignores add_prefix_space; its RobertaTokenizer,
    # loaded from the folder, rebuilds RoBERTa's byte-level pipeline, this one, with it.)
    by_words = (model_tokenizer if hf_peer.MAJOR < 5 or kind == "bpe"
                else transformers.PreTrainedTokenizerFast)
    split = by_words.from_pretrained(str(tmp_path), add_prefix_space=True)(
        list(words), is_split_into_words=True)["input_ids"]
    rows = encoding.encode_tagged_sentences(
        ours, [readers.TaggedSentence(words, ("O",) * len(words))], 32, ("O",))
    assert rows["input_ids"][0, :len(split)].tolist() == split
    assert not rows["attention_mask"][0, len(split):].any()

    # A piece continues a word unless it carries the word-start mark.
    words = ours.tokenizer.encode("the quokka", add_special_tokens=False).tokens
    assert [ours.is_continuation[ours.token_to_id(t)] for t in words] == \
        [not t.startswith(mark) for t in words]
    assert words[-1][0] != mark and not ours.is_continuation[list(ours.special_ids)].any()


@pytest.mark.parametrize("kind", sorted(TOKENIZERS))
def test_export_with_tokenizer_loads_in_auto_classes(tmp_path, kind):
    build, _, _ = TOKENIZERS[kind]
    ours = tok.load_tokenizer(str(build(tmp_path / "tokenizer.json")))
    architecture = {"bpe": "RobertaModel", "unigram": "XLMRobertaModel"}[kind]
    random_reference(architecture, vocab_size=ours.vocab_size, max_position_embeddings=66
                     ).save_pretrained(tmp_path / "in", safe_serialization=True)
    cfg, params = hf.load(tmp_path / "in")
    hf.save(cfg, params, tmp_path / "out", tokenizer=ours)
    auto = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    # the tokenizer.json as it is (bert_jax/data/tokenizers/hf_folder.py says why)
    assert isinstance(auto, transformers.PreTrainedTokenizerFast) and auto.model_max_length == 64
    assert (auto.cls_token_id, auto.sep_token_id, auto.pad_token_id, auto.mask_token_id) == \
        (ours.cls_id, ours.sep_id, ours.pad_id, ours.mask_id)
    for text in TEXTS:
        assert auto(text)["input_ids"] == [ours.cls_id, *ours.encode(text), ours.sep_id]
    again = tok.load_tokenizer(str(tmp_path / "out"))
    assert again.specials == ours.specials and again.encode(TEXTS[1]) == ours.encode(TEXTS[1])

    model = transformers.AutoModel.from_pretrained(tmp_path / "out").eval()
    batch = {k: np.asarray(v, np.int32) for k, v in auto(TEXTS, padding=True).items()}
    assert (batch["input_ids"] == PAD).any()  # padded by transformers itself
    reference = torch_outputs(model, batch)
    diffs = max_diffs(our_outputs(cfg, params, batch), reference,
                      batch["attention_mask"].astype(bool))
    assert max(diffs.values()) <= FP32_TOLERANCE
    # Sentence embeddings of the folder: our tokenizer, rows of at most max_sequence_length.
    vectors = sentence_embeddings.embed(
        saved_runs.load_encoder(hf_dir=str(tmp_path / "out")), TEXTS, pooling="mean")
    weights = batch["attention_mask"][:, :, None]
    expected = (reference.last_hidden_state.numpy() * weights).sum(1) / weights.sum(1)
    assert np.abs(vectors - expected).max() <= FP32_TOLERANCE

    with pytest.raises(hf.CheckpointError, match="pads with id 1 but the model's pad_token_id "
                                                 "is 0"):
        hf.save(cfg.replace(pad_token_id=0, position_offset=1), params, tmp_path / "refused",
                tokenizer=ours)
    assert not (tmp_path / "refused").exists()


def test_a_tokenizer_json_without_a_mask_token_names_the_file(tmp_path):
    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.train_from_iterator(SENTENCES, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<s>", "<pad>", "</s>", "<unk>"], show_progress=False))
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    with pytest.raises(ValueError, match=f"tokenizer {path} has no mask token"):
        tok.load_tokenizer(str(path))


# ----- end to end ---------------------------------------------------------------------------------

@pytest.mark.slow
def test_fine_tuning_a_roberta_folder_and_its_export_in_the_pipeline(tmp_path):
    """A RoBERTa folder (random weights saved by transformers, a byte-level BPE trained on the
    texts) fine-tuned by our recipe on real sentences, exported, and run by transformers'
    text-classification pipeline: the same labels and probabilities as our predictions."""
    polarity = os.path.join(demo_corpus.gensim_test_data(), "pang_lee_polarity.cor")
    with open(polarity, encoding="cp1252") as f:
        texts = [line.split(" ", 1)[1] for line in f if " " in line]
    folder = tmp_path / "roberta"
    random_reference("RobertaModel", vocab_size=600, hidden_size=64, num_attention_heads=2,
                     intermediate_size=128, max_position_embeddings=66
                     ).save_pretrained(folder, safe_serialization=True)
    byte_level_bpe(folder / "tokenizer.json", texts, vocab_size=600)

    config = tiny_finetune_config("classification", "", max_position_embeddings=None, **{
        "init.hf_dir": str(folder), "max_seq_len": 64, "learning_rate": 2e-3,
        "total_steps": 40, "data.train_path": polarity, "data.format": "fasttext",
        "data.encoding": "cp1252", "data.heldout_fraction": 0.25})
    workdir = tmp_path / "run"
    result = recipe.train_and_evaluate(config, str(workdir))
    cfg, _ = params_loading.load_params(str(workdir / "checkpoints"))
    assert (cfg.model_type, cfg.position_offset, cfg.type_vocab_size) == ("roberta", 2, 1)
    with open(workdir / "predictions" / f"step_{result.step}" / "predictions.jsonl",
              encoding="utf-8") as f:
        records = [json.loads(line) for line in f]

    runs.ours_to_hf(str(workdir / "checkpoints"), str(tmp_path / "hf"), None,
                    encoder_only=False)
    written = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert written["architectures"] == ["RobertaForSequenceClassification"]
    assert written["id2label"] == {"0": "neg", "1": "pos"}
    pipe = transformers.pipeline("text-classification", model=str(tmp_path / "hf"), device=-1)
    assert isinstance(pipe.tokenizer, transformers.PreTrainedTokenizerFast)
    got = pipe([r["text"] for r in records], truncation=True, batch_size=8)
    agree = sum(g["label"] == r["prediction"] for g, r in zip(got, records))
    score_diff = max(abs(g["score"] - max(r["probabilities"].values()))
                     for g, r in zip(got, records))
    print(f"RoBERTa classification run: pipeline agrees on {agree}/{len(records)} labels, "
          f"max |score - our probability| {score_diff:.2g}")
    assert agree == len(records) == 50
    assert score_diff <= 1e-5  # our probabilities are written with 6 decimals
