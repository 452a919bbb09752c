"""ModernBERT through the product's paths (bert_jax.model.families): a pre-training run of
experiments/pretrain.py that is stopped by SIGTERM and resumes exactly, then evaluate.py; a
ModernBERT folder saved by transformers (random weights) fine-tuned by finetune.py, evaluated by
evaluate.py, predicted by predict.py and exported back to a folder that transformers loads with
the same logits; sentence embeddings of a ModernBERT folder; the scanned model on an 8-device
CPU mesh against one device; the family saved with a checkpoint and read back.

Sizes are tiny and runs short: the point is the bookkeeping and the numbers agreeing, not
learning. Run as a script (`python tests/scripts/test_modernbert_runs.py OUT_DIR`) the file is the
8-device side of its mesh test (tests/eight_devices.py).
"""

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from pretrain_runs import last_logged_step, losses
from repo_root import ROOT

SCRIPTS = os.path.join(ROOT, "experiments")
MODERN = os.path.join(SCRIPTS, "configs", "modern.py")

# ModernBERT at test size through the recipe of experiments/configs/modern.py: 4 layers, so that
# the scanned layout holds one group (layer 0, then layers 1-3: local, local, global); 12 steps,
# a checkpoint every 4.
TOTAL = 12
TINY_PRETRAINING = [
    f"--config={MODERN}", "--config.data.corpus=synthetic", "--config.tokenizer.vocab_size=97",
    "--config.model.hidden_size=32", "--config.model.num_attention_heads=2",
    "--config.model.intermediate_size=48", "--config.model.num_hidden_layers=4",
    "--config.model.scan_layers=True", "--config.max_seq_len=64",
    # StableAdamW (modern.py's) clips per parameter array, which scanned layers would merge
    "--config.optimizer.name=adamw",
    "--config.data.max_predictions=20", "--config.batch_size=4", "--config.eval_batch_size=4",
    "--config.eval_batches=2", f"--config.total_steps={TOTAL}", "--config.log_every_steps=1",
    "--config.checkpoint_every_steps=4", "--config.eval_every_steps=0",
    "--config.keep_checkpoints=3",
]


def _env():
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    flags = [f for f in env.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    env["XLA_FLAGS"] = " ".join(flags)  # one device, whatever the caller had
    return env


def _script(name, *args, check=True, timeout=300):
    done = subprocess.run([sys.executable, os.path.join(SCRIPTS, name), *args], env=_env(),
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if check:
        assert done.returncode == 0, done.stderr[-3000:]
    return done


def _jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def final_step(workdir):
    return _jsonl(os.path.join(workdir, "eval_metrics.jsonl"))[-1]["step"]


# ----- pre-training ----------------------------------------------------------------------------

@pytest.mark.slow
def test_modernbert_pretraining_resumes_exactly_after_sigterm_and_evaluates(tmp_path):
    import time

    from bert_jax.model import families
    from bert_jax.train.checkpoint import params as params_loading
    from bert_jax.train.checkpoint import store as checkpointing

    reference_dir = str(tmp_path / "uninterrupted")
    _script("pretrain.py", f"--workdir={reference_dir}", *TINY_PRETRAINING)
    reference = losses(reference_dir)
    assert sorted(reference) == list(range(1, TOTAL + 1))
    cfg = params_loading.load_model_config(checkpointing.checkpoint_dir(reference_dir))
    assert families.name_of(cfg) == "modernbert" and cfg.scan_layers
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size) == (4, 32, 97)

    workdir = str(tmp_path / "interrupted")
    process = subprocess.Popen(
        [sys.executable, os.path.join(SCRIPTS, "pretrain.py"), f"--workdir={workdir}",
         *TINY_PRETRAINING, "--config.data.seconds_per_batch=0.1"],  # SIGTERM lands mid-run
        env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    start = time.time()
    while last_logged_step(workdir) < 5:
        assert process.poll() is None, "the run ended before it could be interrupted"
        assert time.time() - start < 600, "timed out waiting for the run"
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr[-3000:]
    stopped_at = last_logged_step(workdir)
    assert 5 <= stopped_at < TOTAL
    saved = sorted(int(s) for s in os.listdir(os.path.join(workdir, "checkpoints")))
    assert saved[-1] == stopped_at, "SIGTERM must save the step it stopped at"

    _script("pretrain.py", f"--workdir={workdir}", *TINY_PRETRAINING)
    assert losses(workdir) == reference  # exact float equality at every step

    final = _jsonl(os.path.join(workdir, "eval_metrics.jsonl"))[-1]
    assert final["step"] == TOTAL
    _script("evaluate.py", f"--workdir={workdir}")
    with open(os.path.join(workdir, "evaluation", f"step_{TOTAL}.json")) as f:
        reloaded = json.load(f)
    for key in ("loss", "mlm_loss", "mlm_accuracy"):
        assert reloaded["metrics"][key] == final[key]


# ----- a transformers ModernBERT folder through fine-tuning, prediction and export ------------

WORDS = ["john", "mary", "paris", "berlin", "acme", "globex", "visited", "met", "works", "at",
         "in", "the", "today", "and", "is", "old", "red", "."]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
LABELS = ("person", "place", "org")

FINETUNE_CONFIG = """from bert_jax.config import run as run_config


def get_config():
    config = run_config.finetune_config("classification")
    config.init.hf_dir = {hf_dir!r}
    config.data.train_path = {train!r}
    config.data.eval_path = {dev!r}
    config.max_seq_len = 24
    config.batch_size = 16
    config.eval_batch_size = 16
    config.total_steps = 8
    config.learning_rate = 2e-3
    config.log_every_steps = 4
    config.async_checkpoints = False
    return config
"""


def _text_rows(rng, count):
    """(text, label): the label is the kind of the entity word in the text."""
    rows = []
    for _ in range(count):
        kind = int(rng.integers(3))
        words = list(rng.choice(WORDS[6:], rng.integers(2, 12)))
        words.insert(int(rng.integers(len(words) + 1)), WORDS[2 * kind + int(rng.integers(2))])
        rows.append((" ".join(words), LABELS[kind]))
    return rows


def _transformers_folder(folder, vocab):
    """ModernBertForSequenceClassification with transformers' random weights, saved with our
    WordPiece vocabulary: 4 layers, a local window of 8 tokens (smaller than the rows), mean
    pooling."""
    import torch
    import transformers
    torch.manual_seed(0)
    hf_config = transformers.ModernBertConfig(
        vocab_size=len(vocab), hidden_size=32, intermediate_size=48, num_hidden_layers=4,
        num_attention_heads=2, max_position_embeddings=64, local_attention=8,
        global_attn_every_n_layers=3, pad_token_id=0, cls_token_id=2, sep_token_id=3,
        bos_token_id=2, eos_token_id=3, classifier_pooling="mean", num_labels=3,
        initializer_range=0.1)
    model = transformers.ModernBertForSequenceClassification(hf_config)
    model.save_pretrained(folder, safe_serialization=True)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")


def _transformers_logits(folder, input_ids, attention_mask):
    import torch
    import transformers
    model = transformers.ModernBertForSequenceClassification.from_pretrained(
        folder, attn_implementation="eager").eval()
    with torch.no_grad():
        return model(input_ids=torch.as_tensor(input_ids),
                     attention_mask=torch.as_tensor(attention_mask)).logits.numpy()


@pytest.mark.slow
def test_a_transformers_modernbert_folder_fine_tuned_predicted_and_exported(tmp_path):
    import jax

    from bert_jax.convert import hf
    from bert_jax.model import families
    from bert_jax.model.modernbert import ModernBertForSequenceClassification
    from bert_jax.tools import convert_runs as runs
    from bert_jax.train.checkpoint import params as params_loading
    from bert_jax.train.checkpoint import store as checkpointing

    rng = np.random.default_rng(0)
    train, dev = _text_rows(rng, 64), _text_rows(rng, 24)
    for name, rows in (("train.tsv", train), ("dev.tsv", dev)):
        (tmp_path / name).write_text("text\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows),
                                     encoding="utf-8")
    folder = tmp_path / "modernbert"
    _transformers_folder(folder, SPECIALS + WORDS)
    config_file = tmp_path / "config.py"
    config_file.write_text(FINETUNE_CONFIG.format(
        hf_dir=str(folder), train=str(tmp_path / "train.tsv"), dev=str(tmp_path / "dev.tsv")))
    workdir = str(tmp_path / "run")

    _script("finetune.py", f"--config={config_file}", f"--workdir={workdir}")
    cfg, params = params_loading.load_params(checkpointing.checkpoint_dir(workdir))
    assert families.name_of(cfg) == "modernbert"
    assert (cfg.local_attention, cfg.classifier_pooling, cfg.num_hidden_layers) == (8, "mean", 4)
    (step_dir,) = os.listdir(os.path.join(workdir, "predictions"))
    own = _jsonl(os.path.join(workdir, "predictions", step_dir, "predictions.jsonl"))
    assert len(own) == len(dev)

    _script("evaluate.py", f"--workdir={workdir}")
    with open(os.path.join(workdir, "evaluation", f"step_{final_step(workdir)}.json")) as f:
        evaluated = json.load(f)["metrics"]
    final = _jsonl(os.path.join(workdir, "eval_metrics.jsonl"))[-1]
    assert evaluated["accuracy"] == final["accuracy"]

    unlabelled = tmp_path / "new.jsonl"
    unlabelled.write_text("".join(json.dumps({"text": t}) + "\n" for t, _ in dev))
    _script("predict.py", f"--workdir={workdir}", f"--input={unlabelled}",
            f"--output={tmp_path / 'predicted.jsonl'}")
    predicted = _jsonl(tmp_path / "predicted.jsonl")
    assert [p["prediction"] for p in predicted] == [r["prediction"] for r in own]
    for p, r in zip(predicted, own):  # {label: probability}, written with 6 decimals
        assert p["probabilities"].keys() == r["probabilities"].keys()
        assert max(abs(p["probabilities"][k] - r["probabilities"][k]) for k in LABELS) <= 2e-6

    export = tmp_path / "exported"
    runs.ours_to_hf(checkpointing.checkpoint_dir(workdir), str(export), None,
                    encoder_only=False)
    written = json.loads((export / "config.json").read_text())
    assert written["architectures"] == ["ModernBertForSequenceClassification"]
    assert sorted(written["id2label"].values()) == sorted(LABELS)
    from bert_jax.data.tokenizers.load import load_tokenizer
    tokenizer = load_tokenizer(str(export))
    rows = [[tokenizer.cls_id] + ids[:22] + [tokenizer.sep_id]
            for ids in tokenizer.encode_batch([t for t, _ in dev])]
    length = max(map(len, rows))
    input_ids = np.zeros((len(rows), length), np.int32)
    attention_mask = np.zeros((len(rows), length), np.int32)
    for i, row in enumerate(rows):
        input_ids[i, :len(row)], attention_mask[i, :len(row)] = row, 1
    ours = ModernBertForSequenceClassification(cfg, num_labels=3).apply(
        {"params": jax.device_get(params)}, input_ids, None, attention_mask, True)
    theirs = _transformers_logits(export, input_ids.astype(np.int64), attention_mask)
    difference = float(np.max(np.abs(np.asarray(ours) - theirs)))
    print(f"exported ModernBERT: max |our logits - transformers'| {difference:.2g}")
    assert difference <= 1e-5
    cfg_back, _ = hf.load(str(export))
    assert cfg_back.replace(pad_token_id=0) == cfg.replace(pad_token_id=0, dtype="float32",
                                                           remat_policy="none",
                                                           attention="auto")


QA_CONFIG = """from bert_jax.config import run as run_config


def get_config():
    config = run_config.finetune_config("span_qa")
    config.init.hf_dir = {hf_dir!r}
    config.data.train_path = {squad!r}
    config.data.eval_path = {squad!r}
    config.max_seq_len = 32
    config.squad.max_query_len = 8
    config.squad.doc_stride = 16
    config.squad.max_answer_length = 4
    config.batch_size = 8
    config.eval_batch_size = 8
    config.total_steps = 6
    config.learning_rate = 2e-3
    config.log_every_steps = 3
    config.async_checkpoints = False
    return config
"""


def _squad(path, rng, count):
    """SQuAD-style JSON: who / where questions over short contexts of WORDS."""
    paragraphs = []
    for i in range(count):
        person, place = WORDS[int(rng.integers(2))], WORDS[2 + int(rng.integers(2))]
        context = f"{person} visited {place} today and is old ."
        question, answer = (("who visited", person) if i % 2 else ("where is", place))
        paragraphs.append({"context": context, "qas": [{
            "id": f"q{i}", "question": question,
            "answers": [{"text": answer, "answer_start": context.index(answer)}]}]})
    path.write_text(json.dumps({"data": [{"title": "t", "paragraphs": paragraphs}]}),
                    encoding="utf-8")


def test_span_qa_on_a_modernbert_folder_fine_tunes_predicts_and_exports(tmp_path):
    """Span QA built BertForQuestionAnswering whatever the family (an AttributeError on a
    ModernBERT model): now the family's head, ModernBertForQuestionAnswering, fine-tunes,
    predicts, and exports as transformers' ModernBertForQuestionAnswering with our logits."""
    import jax
    import torch
    import transformers

    from bert_jax.model.modernbert_qa import ModernBertForQuestionAnswering
    from bert_jax.tools import convert_runs as runs
    from bert_jax.train.checkpoint import params as params_loading
    from bert_jax.train.checkpoint import store as checkpointing

    _squad(tmp_path / "qa.json", np.random.default_rng(0), 24)
    folder = tmp_path / "modernbert"
    _transformers_folder(folder, SPECIALS + WORDS)
    config_file = tmp_path / "config.py"
    config_file.write_text(QA_CONFIG.format(hf_dir=str(folder), squad=str(tmp_path / "qa.json")))
    workdir = str(tmp_path / "run")
    _script("finetune.py", f"--config={config_file}", f"--workdir={workdir}")
    cfg, params = params_loading.load_params(checkpointing.checkpoint_dir(workdir))
    assert sorted(params) == ["bert", "classifier"]

    questions = tmp_path / "questions.jsonl"
    questions.write_text("".join(json.dumps({"question": "who visited", "context": c}) + "\n"
                                 for c in ("mary visited paris today .", "john met acme .")))
    _script("predict.py", f"--workdir={workdir}", f"--input={questions}",
            f"--output={tmp_path / 'answers.jsonl'}")
    answers = _jsonl(tmp_path / "answers.jsonl")
    assert len(answers) == 2 and all(isinstance(a["prediction"], str) for a in answers)

    export = tmp_path / "exported"
    runs.ours_to_hf(checkpointing.checkpoint_dir(workdir), str(export), None,
                    encoder_only=False)
    written = json.loads((export / "config.json").read_text())
    assert written["architectures"] == ["ModernBertForQuestionAnswering"]
    input_ids = np.array([[2, 5, 11, 7, 3, 0], [2, 6, 12, 8, 9, 3]], np.int32)
    attention_mask = (input_ids != 0).astype(np.int32)
    start, end = ModernBertForQuestionAnswering(cfg).apply(
        {"params": jax.device_get(params)}, input_ids, None, attention_mask, True)
    theirs = transformers.ModernBertForQuestionAnswering.from_pretrained(
        export, attn_implementation="eager").eval()
    with torch.no_grad():
        out = theirs(input_ids=torch.as_tensor(input_ids.astype(np.int64)),
                     attention_mask=torch.as_tensor(attention_mask))
    real = attention_mask.astype(bool)
    for ours, hf_logits in ((start, out.start_logits), (end, out.end_logits)):
        assert np.max(np.abs(np.asarray(ours)[real] - hf_logits.numpy()[real])) <= 1e-5


def test_sentence_embeddings_of_a_modernbert_folder_are_transformers_mean_pooled_states(
        tmp_path):
    import torch
    import transformers

    from bert_jax.data.tokenizers.load import load_tokenizer
    from bert_jax.embeddings import encode as sentence_embeddings
    from bert_jax.tools import saved_runs

    torch.manual_seed(0)
    hf_config = transformers.ModernBertConfig(
        vocab_size=len(SPECIALS + WORDS), hidden_size=32, intermediate_size=48,
        num_hidden_layers=4, num_attention_heads=2, max_position_embeddings=64,
        local_attention=4, pad_token_id=0, cls_token_id=2, sep_token_id=3, bos_token_id=2,
        eos_token_id=3, initializer_range=0.1)
    transformers.ModernBertModel(hf_config).save_pretrained(tmp_path, safe_serialization=True)
    (tmp_path / "vocab.txt").write_text("\n".join(SPECIALS + WORDS) + "\n", encoding="utf-8")
    texts = [t for t, _ in _text_rows(np.random.default_rng(1), 6)]

    vectors = sentence_embeddings.embed(saved_runs.load_encoder(hf_dir=str(tmp_path)),
                                        texts, pooling="mean")
    tokenizer = load_tokenizer(str(tmp_path))
    rows = [[tokenizer.cls_id] + ids + [tokenizer.sep_id] for ids in tokenizer.encode_batch(texts)]
    input_ids = np.zeros((len(rows), max(map(len, rows))), np.int64)
    mask = np.zeros_like(input_ids)
    for i, row in enumerate(rows):
        input_ids[i, :len(row)], mask[i, :len(row)] = row, 1
    model = transformers.ModernBertModel.from_pretrained(tmp_path, attn_implementation="eager")
    with torch.no_grad():
        hidden = model.eval()(input_ids=torch.as_tensor(input_ids),
                              attention_mask=torch.as_tensor(mask)).last_hidden_state.numpy()
    expected = (hidden * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)
    assert max(map(len, rows)) > 4  # rows longer than the window of the local layers
    assert np.abs(vectors - expected).max() <= 1e-5


# ----- the family in a checkpoint --------------------------------------------------------------

def test_family_saved_with_the_checkpoint_and_a_bert_dict_still_reads_as_bert():
    from bert_jax.config.bert import BertConfig
    from bert_jax.model import families
    from bert_jax.train.checkpoint import store as checkpointing

    modern = families.get("modernbert").preset("tiny", vocab_size=97)
    assert modern.pad_token_id == 0  # ModernBERT's own ids do not fit 97 tokens
    saved = checkpointing.metadata_for(modern, {"recipe": "pretrain"})
    assert saved["model_config"]["family"] == "modernbert"
    assert families.config_from_dict(json.loads(json.dumps(saved["model_config"]))) == modern
    bert = BertConfig.preset("tiny")
    old_style = {k: v for k, v in checkpointing.metadata_for(bert)["model_config"].items()
                 if k != "family"}  # written before the family key existed
    assert families.config_from_dict(old_style) == bert
    with pytest.raises(ValueError, match="hidden_dropout_prob"):
        families.get("modernbert").preset("tiny", hidden_dropout_prob=0.1)
    with pytest.raises(ValueError, match="gpt"):
        families.get("gpt")


def test_an_unknown_family_in_the_run_config_is_one_line(tmp_path):
    """What pretrain.py does, in this process: its flags parsed (cli.parse_flags on a fresh set
    of the script's flags), then the recipe under cli.run_or_exit; the refusal is the one line
    that the script exits with (status 1, no traceback)."""
    from absl import flags

    from bert_jax import cli
    from bert_jax.recipes import pretrain
    from experiments import pretrain as pretrain_script

    workdir = str(tmp_path / "run")
    argv = [os.path.join(SCRIPTS, "pretrain.py"), f"--workdir={workdir}", *TINY_PRETRAINING,
            "--config.model.family=gpt"]
    flag_values = flags.FlagValues()
    real_argv, sys.argv = sys.argv, argv  # ml_collections finds the overrides there
    try:
        with pytest.raises(SystemExit) as refused:
            pretrain_script.define_flags(flag_values)
            cli.parse_flags(argv, flag_values)
            cli.run_or_exit("pretrain.py", lambda: pretrain.train_and_evaluate(
                flag_values.config, workdir))
    finally:
        sys.argv = real_argv
    message = refused.value.code
    assert isinstance(message, str) and "\n" not in message, message  # status 1, one line
    assert message.startswith("pretrain.py: error: ") and "'gpt'" in message, message
    assert not os.path.exists(tmp_path / "run" / "checkpoints")


# ----- the scanned model on 8 devices ----------------------------------------------------------

STEPS, BATCH, SEQ, PREDICTIONS = 2, 8, 32, 6


def _eight_device_side(out_dir):
    """In the subprocess: the losses of STEPS train steps of a scanned 7-layer ModernBERT
    (window 8; two scanned groups) on one device and on a (data, fsdp, tensor) = (2, 2, 2) mesh
    of 8 devices, where the sharding rules split every parameter kind."""
    import jax

    from bert_jax.config import settings
    from bert_jax.data.pretraining.synthetic import RandomTokenBatches
    from bert_jax.model import families
    from bert_jax.recipes import pretrain
    from bert_jax.runtime import sharding
    from bert_jax.train import optimizer, program

    import eight_devices
    from pretrain_runs import tiny_pretrain_config

    cfg = families.get("modernbert").preset(
        "tiny", vocab_size=97, hidden_size=32, num_attention_heads=4, intermediate_size=48,
        num_hidden_layers=7, local_attention=8, scan_layers=True)
    run = settings.read(tiny_pretrain_config(max_seq_len=SEQ, batch_size=BATCH, **{
        "data.max_predictions": PREDICTIONS}), "pretrain")
    task = pretrain.make_task(run, cfg)
    opt_config = settings.OptimizerConfig(learning_rate=1e-3, total_steps=STEPS, warmup_steps=0)
    results = {}
    for name, shape in (("one_device", None), ("2x2x2", (2, 2, 2))):
        mesh = (sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1]) if shape is None
                else sharding.make_mesh(*shape))
        built = program.build(task, optimizer.make_optimizer(opt_config),
                              settings.LoopConfig(total_steps=STEPS, global_batch_size=BATCH), mesh)
        batches = RandomTokenBatches(BATCH, SEQ, PREDICTIONS, cfg.vocab_size, seed=0)
        state, losses = built.state, []
        for _ in range(STEPS):
            state, metrics = built.train_step(
                state, sharding.device_put_batch(next(batches), mesh))
            losses.append(float(jax.device_get(metrics)["loss"]))
        scanned = "layers" in state.params["bert"]["encoder"]
        results[name] = {"losses": losses, "scanned": scanned}
    eight_devices.write(out_dir, results)


@pytest.mark.slow  # an 8-device program: 130 s on the loaded 2-core machine
def test_scanned_modernbert_on_eight_devices_gives_the_one_device_losses(tmp_path):
    import eight_devices
    results = eight_devices.run(__file__, str(tmp_path), timeout=600)
    reference = results["one_device"]["losses"]
    assert results["one_device"]["scanned"] and results["2x2x2"]["scanned"]
    assert np.all(np.isfinite(reference)) and reference[0] != reference[1]
    print(f"scanned ModernBERT losses: one device {reference}, 2x2x2 {results['2x2x2']['losses']}")
    np.testing.assert_allclose(results["2x2x2"]["losses"], reference, rtol=2e-5)


if __name__ == "__main__":
    _eight_device_side(sys.argv[1])
