"""Bad input, tried as an adversarial user would, across the scripts (issues 24, 25 item 8, 26):
each case ends in one line `<script>: error: <what>` and exit status 1, a refused run leaves its
workdir as it found it, Ctrl-C before the training loop is exit 130 and one line, and `--help`
lists the script's flags and every config key with its default.

Most cases run in this process, through what the scripts call (cli.parse_flags,
cli.run_or_exit around a recipe): SystemExit carries the line a script prints and its status.
One subprocess each shows finetune.py's real --help and pretrain.py's real Ctrl-C.
"""

import math
import os
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from absl import flags

from bert_jax import BertConfig, BertModel, cli
from bert_jax.config import run as run_config
from bert_jax.config import run_keys as run_config_keys
from bert_jax.config import settings
from bert_jax.convert import hf
from bert_jax.recipes import pretrain
from bert_jax.recipes.finetune import predict as predict_lib
from bert_jax.recipes.finetune import recipe as finetune_recipe
from bert_jax.recipes.finetune import task_data
from bert_jax.tools import saved_runs
from experiments import finetune as finetune_script
from experiments import pretrain as pretrain_script

from finetune_runs import set_keys, tiny_finetune_config
from pretrain_runs import tiny_pretrain_config as pretrain_config
from repo_root import ROOT

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["good", "bad", "movie", "film", "great", "awful", "the", "a", "is", "was", "not",
         "very", "plot", "actor", "fun", "dull", "##s", "##ly", "i", "it"]


# ----- shared inputs ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A 25-token vocabulary and small labelled TSV files."""
    folder = tmp_path_factory.mktemp("inputs")
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(SPECIALS + WORDS) + "\n", encoding="utf-8")
    rows = ["text\tlabel"] + [f"{w} movie\t{'pos' if i % 2 else 'neg'}"
                              for i, w in enumerate(WORDS * 2)]
    train = folder / "train.tsv"
    train.write_text("\n".join(rows) + "\n", encoding="utf-8")
    (folder / "corpus").mkdir()
    (folder / "corpus" / "a.txt").write_text("the movie was good\n\nit is fun\n")
    return {"vocab": str(vocab), "train": str(train), "folder": folder,
            "vocab_size": len(SPECIALS + WORDS)}


def finetune_config(files, **changes):
    config = tiny_finetune_config("classification", files["vocab"], hidden_size=16,
                                  num_hidden_layers=1, max_position_embeddings=32,
                                  **{"data.train_path": files["train"],
                                     "data.eval_path": files["train"], "max_seq_len": 16,
                                     "total_steps": 2})
    return set_keys(config, changes)


def one_line(script, fn):
    """The line `script` prints for fn's bad input (run_or_exit), checked to be one line."""
    with pytest.raises(SystemExit) as exit_:
        cli.run_or_exit(script, fn)
    message = exit_.value.code
    assert isinstance(message, str), message
    assert "\n" not in message and message.startswith(f"{script}: error: "), message
    return message


def listing(folder):
    """The files and folders under `folder` (None: it does not exist)."""
    if not os.path.exists(folder):
        return None
    return sorted(os.path.relpath(os.path.join(d, n), folder)
                  for d, dirs, names in os.walk(folder) for n in dirs + names)


# ----- config files and flags: checked first, in cli.parse_flags --------------------------------

def parse(script_module, *argv, name="pretrain.py"):
    """cli.parse_flags on a fresh set of the script's flags: (exit code or None, values)."""
    flag_values = flags.FlagValues()
    real_argv, sys.argv = sys.argv, [name, *argv]  # ml_collections finds the overrides there
    try:
        script_module.define_flags(flag_values)
        cli.parse_flags([name, *argv], flag_values)
    except SystemExit as e:
        return e.code, flag_values
    finally:
        sys.argv = real_argv
    return None, flag_values


def write_config(folder, name, body):
    path = folder / name
    path.write_text(body, encoding="utf-8")
    return str(path)


GOOD_CONFIG = ("from bert_jax.config import run as run_config\n\n\ndef get_config():\n"
               "    config = run_config.pretrain_config()\n"
               "    config.total_steps = 10\n    return config\n")


@pytest.mark.parametrize("case, body, expected", [
    ("missing", None, "not found"),
    ("folder", "folder", "is a folder"),
    ("syntax", "def get_config():\n    x = (1,\n    return x\n", ":2: syntax error"),
    ("no_get_config", "CONFIG = 1\n", "defines no get_config()"),
    ("name_error", "def get_config():\n    return undefined_name\n",
     ":2: the config file raised NameError"),
    ("value_error", "def get_config():\n    raise ValueError('no such preset')\n",
     ":2: the config file raised ValueError: no such preset"),
    ("returns_none", "def get_config():\n    return None\n", "get_config() returned None"),
])
def test_config_file_faults_are_one_line_naming_file_and_line(tmp_path, case, body, expected):
    if body is None:
        path = str(tmp_path / "missing.py")
    elif body == "folder":
        path = str(tmp_path)
    else:
        path = write_config(tmp_path, f"{case}.py", body)
    # the same line whatever the other flags (a file that cannot run: wherever --config stands)
    variants = [[f"--config={path}", "--workdir=/tmp/x"], [f"--config={path}"],
                [f"--config={path}", "--config.total_steps=3", "--workdir=/tmp/x"]]
    if case in ("missing", "folder", "syntax", "no_get_config"):
        variants.append(["--config.total_steps=3", "--workdir=/tmp/x", "--config", path])
    for argv in variants:
        code, _ = parse(pretrain_script, *argv)
        assert isinstance(code, str) and "\n" not in code, code
        assert code.startswith("pretrain.py: error: ") and expected in code, code
        if case not in ("folder",):
            assert os.path.basename(path) in code, code


@pytest.mark.parametrize("argv, expected", [
    (["--config.learnin_rate=1e-3"], "learnin_rate"),  # an unknown key
    (["--config.batch_size=abc"], "abc"),  # a value of the wrong type
    (["--config.model.hidden_size=wide"], "wide"),
    (["--wrkdir=/tmp/x"], "wrkdir"),  # an unknown flag
])
def test_bad_overrides_and_flags_are_one_line(argv, expected):
    config = os.path.join(ROOT, "experiments", "configs", "demo.py")
    code, _ = parse(pretrain_script, f"--config={config}", "--workdir=/tmp/x", *argv)
    assert isinstance(code, str) and "\n" not in code, code
    assert code.startswith("pretrain.py: error: ") and expected in code, code


def test_a_missing_required_flag_is_one_line(tmp_path):
    code, _ = parse(pretrain_script, f"--config={write_config(tmp_path, 'ok.py', GOOD_CONFIG)}")
    assert code == "pretrain.py: error: --workdir is required (--help lists the flags)", code


# ----- the run config against the schema: before anything is written -----------------------------

@pytest.mark.parametrize("rate", [-1e-3, 0.0, math.inf, math.nan])
def test_a_learning_rate_that_makes_no_sense_is_refused_before_anything_is_written(
        tmp_path, rate):
    workdir = str(tmp_path / "run")
    message = one_line("pretrain.py", lambda: pretrain.train_and_evaluate(
        pretrain_config(learning_rate=rate), workdir))
    assert "config.learning_rate" in message and "positive finite" in message, message
    assert listing(workdir) is None


@pytest.mark.parametrize("key, value, expected", [
    ("accumulation_steps", 0, "config.accumulation_steps=0 must be at least 1 (micro-batches "
                              "per optimizer step)"),
    ("seed", -1, "config.seed=-1 must be in [0, 2**32)"),
    ("data.mask_rate", 2.0, "config.data.mask_rate=2.0 must be in (0, 1): the share of tokens "
                            "masked"),
    ("recipe", "finetune", "config.recipe='finetune', but this is a 'pretrain' run: train it "
                           "with experiments/finetune.py"),
])
def test_values_no_run_can_use_are_refused_before_anything_is_written(tmp_path, key, value,
                                                                      expected):
    # found by probing: accumulation_steps=0 was a ZeroDivisionError traceback, seed=-1 a
    # traceback after config.json, checkpoints/ and tensorboard/ were written, mask_rate=2 and a
    # fine-tuning config given to pretrain.py trained on silently
    workdir = str(tmp_path / "run")
    message = one_line("pretrain.py", lambda: pretrain.train_and_evaluate(
        pretrain_config(**{key: value}), workdir))
    assert message == f"pretrain.py: error: {expected}", message
    assert listing(workdir) is None


def test_unknown_keys_and_wrong_types_in_a_config_file_are_refused(tmp_path):
    import ml_collections
    config = pretrain_config()
    config.unlock()
    config.learnig_rate = 1e-3  # a typo in a config file: a key the schema does not have
    message = one_line("pretrain.py", lambda: pretrain.train_and_evaluate(
        config, str(tmp_path / "a")))
    assert "learnig_rate is not in the schema" in message and "learning_rate" in message

    values = pretrain_config().to_dict()
    values["batch_size"] = "32"  # a block rebuilt in a config file, a string for a number
    message = one_line("pretrain.py", lambda: pretrain.train_and_evaluate(
        ml_collections.ConfigDict(values), str(tmp_path / "b")))
    assert "config.batch_size='32' is a str" in message and "int" in message, message
    assert listing(str(tmp_path / "a")) is None and listing(str(tmp_path / "b")) is None


SHIPPED = ["demo", "efficient", "bert_base", "bert_base:seq512", "bert_large", "finetune_conll",
           "finetune_mrpc", "finetune_polarity", "finetune_squad", "finetune_stsb", "glue"]


@pytest.mark.parametrize("name", SHIPPED)
def test_the_shipped_configs_fit_the_schema(name):
    import importlib
    module, _, argument = name.partition(":")
    config = importlib.import_module(f"experiments.configs.{module}").get_config(
        *([argument] if argument else []))
    run_config_keys.check(config.run if "run" in config else config)  # a suite: its run config


def test_an_unknown_text_encoding_is_one_line(files, tmp_path):
    workdir = str(tmp_path / "run")
    message = one_line("finetune.py", lambda: finetune_recipe.train_and_evaluate(
        finetune_config(files, **{"data.encoding": "utf-9"}), workdir))
    assert "config.data.encoding='utf-9'" in message, message
    assert listing(workdir) is None
    with pytest.raises(SystemExit) as exit_:
        cli.run_or_exit("embed.py", lambda: cli.check_text_encoding("utf-9", "--encoding"))
    assert exit_.value.code == ("embed.py: error: --encoding='utf-9' is not a text encoding "
                                "Python knows (e.g. utf-8, cp1252, latin-1)")


# ----- inputs: corpora, vocabularies, data files ------------------------------------------------

PRETRAIN_INPUT_FAULTS = {
    "glob_matches_nothing": ({"data.corpus": "text:/no/such/dir/*.txt"}, "matches no file"),
    "missing_vocabulary": ({"data.corpus": "demo", "tokenizer.path": "/no/such/vocab.txt"},
                           "/no/such/vocab.txt"),
    "catalog_corpus_without_vocabulary": ({"data.corpus": "wikipedia/20230601.en"},
                                          "config.tokenizer.path is empty"),
    "tokenizer_larger_than_model": ({"data.corpus": "text:CORPUS", "tokenizer.path": "VOCAB",
                                     "model.vocab_size": 20}, "token ids reach 24"),
    "synthetic_ids_beyond_the_model": ({"model.vocab_size": 50}, "token ids reach 96"),
}


@pytest.mark.parametrize("case", sorted(PRETRAIN_INPUT_FAULTS))
@pytest.mark.parametrize("workdir_state", ["fresh", "existing"])
def test_a_refused_pretraining_run_leaves_the_workdir_as_it_found_it(files, tmp_path, case,
                                                                      workdir_state):
    changes, expected = PRETRAIN_INPUT_FAULTS[case]
    corpus = os.path.join(str(files["folder"]), "corpus", "*.txt")
    changes = {k: v.replace("CORPUS", corpus).replace("VOCAB", files["vocab"])
               if isinstance(v, str) else v for k, v in changes.items()}
    workdir = tmp_path / "run"
    if workdir_state == "existing":
        workdir.mkdir()
        (workdir / "notes.txt").write_text("mine")
    before = listing(str(workdir))
    message = one_line("pretrain.py", lambda: pretrain.train_and_evaluate(
        pretrain_config(**changes), str(workdir)))
    assert expected in message, message
    assert listing(str(workdir)) == before


def test_a_tokenizer_larger_than_the_model_is_refused_in_fine_tuning(files, tmp_path):
    workdir = str(tmp_path / "run")
    message = one_line("finetune.py", lambda: finetune_recipe.train_and_evaluate(
        finetune_config(files, **{"model.vocab_size": 10}), workdir))
    assert f"token ids reach {files['vocab_size'] - 1}" in message and "is 10" in message
    assert listing(workdir) is None


@pytest.mark.parametrize("case", ["missing", "empty", "binary", "wrong_format", "bad_vocab"])
def test_bad_fine_tuning_files_are_one_line_and_write_nothing(files, tmp_path, case):
    path = tmp_path / "train.tsv"
    changes = {"data.train_path": str(path)}
    if case == "empty":
        path.write_text("")
    elif case == "binary":
        path.write_bytes(np.random.default_rng(0).bytes(2000))
    elif case == "wrong_format":  # a TSV file read as the config's fastText format says
        path.write_text(open(files["train"]).read())
        changes["data.format"] = "fasttext"
    elif case == "bad_vocab":
        vocab = tmp_path / "vocab.txt"
        vocab.write_bytes(np.random.default_rng(1).bytes(500))
        changes = {"tokenizer.path": str(vocab)}
        path = vocab
    workdir = str(tmp_path / "run")
    message = one_line("finetune.py", lambda: finetune_recipe.train_and_evaluate(
        finetune_config(files, **changes), workdir))
    assert str(path) in message, message
    assert listing(workdir) is None


# ----- outputs and workdirs -------------------------------------------------------------------

def test_outputs_that_cannot_be_files_are_one_line(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    for path, expected in ((str(tmp_path), "is a folder"),
                           (str(a_file / "out.json"), f"{a_file} is a file, not a folder"),
                           (str(a_file / "deeper" / "out.json"), f"{a_file} is a file")):
        with pytest.raises(SystemExit) as exit_:
            cli.check_output("evaluate.py", path)
        assert exit_.value.code.startswith("evaluate.py: error: --output=")
        assert expected in exit_.value.code, exit_.value.code
    assert cli.output_file_fault(str(tmp_path / "new" / "out.json")) is None
    assert cli.workdir_fault(str(a_file)) == f"--workdir={a_file} is a file, not a folder"
    assert "is a file, not a folder" in cli.workdir_fault(str(a_file / "run"))
    assert cli.workdir_fault(str(tmp_path / "run")) is None


def test_a_file_that_cannot_be_written_is_one_line(tmp_path):
    def write_to_read_only():
        raise OSError(30, "Read-only file system", str(tmp_path / "evaluation"))
    message = one_line("evaluate.py", write_to_read_only)
    assert message == f"evaluate.py: error: {tmp_path / 'evaluation'}: Read-only file system"


# ----- prediction and embeddings: token ids beyond the model ------------------------------------

def test_prediction_refuses_a_tokenizer_larger_than_the_saved_model(files, tmp_path,
                                                                     monkeypatch):
    workdir = tmp_path / "run"
    config = finetune_config(files)
    run = settings.read(config, "finetune")
    data = task_data.build_task_data(run, predict_lib.common.finetuning_tokenizer(run))
    workdir.mkdir()
    (workdir / "config.json").write_text(config.to_json())
    task_data.save_task_file(str(workdir), data)
    small = BertConfig.preset("tiny", vocab_size=10, hidden_size=16, num_hidden_layers=1,
                              num_attention_heads=2, intermediate_size=32)
    monkeypatch.setattr(predict_lib.common, "load_checkpoint",
                        lambda *args, **kwargs: (1, small, {}))
    (tmp_path / "new.txt").write_text("good movie\n")
    options = predict_lib.PredictOptions(str(tmp_path / "new.txt"), str(tmp_path / "out.jsonl"),
                                         file_format="lines", progress=False)
    message = one_line("predict.py", lambda: predict_lib.predict_file(str(workdir), options))
    assert f"token ids reach {files['vocab_size'] - 1}" in message and "is 10" in message
    assert not (tmp_path / "out.jsonl").exists()


def test_embeddings_refuse_a_tokenizer_larger_than_the_model(files, tmp_path):
    cfg = BertConfig(vocab_size=10, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=16, type_vocab_size=2)
    shapes = jax.eval_shape(BertModel(cfg).init, jax.random.key(0), np.ones((1, 4), np.int32))
    params = jax.tree.map(lambda leaf: np.zeros(leaf.shape, leaf.dtype), shapes["params"])
    folder = str(tmp_path / "hf")
    hf.save(cfg, params, folder)
    with open(os.path.join(folder, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write(open(files["vocab"], encoding="utf-8").read())
    message = one_line("embed.py", lambda: saved_runs.load_encoder(hf_dir=folder))
    assert f"has {files['vocab_size']} tokens" in message and "only 10" in message, message


# ----- Ctrl-C during start-up -------------------------------------------------------------------

def test_ctrl_c_before_the_training_loop_is_exit_130_and_one_line(tmp_path, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pretrain, "make_data", interrupted)  # after the lock, before step 1
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(SystemExit) as exit_:
        with cli.interrupts_stop("pretrain.py"):
            cli.run_or_exit("pretrain.py", lambda: pretrain.train_and_evaluate(
                pretrain_config(), str(tmp_path / "run")))
    assert exit_.value.code == cli.INTERRUPTED
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith("pretrain.py: interrupted (Ctrl-C)"), lines
    assert signal.getsignal(signal.SIGINT) is before  # restored


def test_a_swallowed_ctrl_c_still_stops_the_process(monkeypatch, capsys):
    exits = []
    monkeypatch.setattr(cli, "_exit_now", exits.append)
    monkeypatch.setattr(cli._interrupts, "reported", False)
    with pytest.raises(SystemExit) as exit_:
        with cli.interrupts_stop("pretrain.py", grace=0.2):
            try:  # what a gc callback does with an exception: "Exception ignored in ..."
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)
            except KeyboardInterrupt:
                pass
            deadline = time.time() + 10
            while not exits and time.time() < deadline:
                time.sleep(0.05)
    assert exits == [cli.INTERRUPTED]  # the timer stopped the process ...
    assert exit_.value.code == cli.INTERRUPTED  # ... and so would leaving the start-up
    assert "pretrain.py: interrupted (Ctrl-C)" in capsys.readouterr().err


def test_ctrl_c_in_a_real_start_up_exits_130_with_one_line(tmp_path):
    from tests import pretrain_runs
    workdir = str(tmp_path / "run")
    process = subprocess.Popen(pretrain_runs.command(workdir), env=pretrain_runs.env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pretrain_runs.wait_for(lambda: os.path.exists(os.path.join(workdir, "run.lock")), process)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == cli.INTERRUPTED, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    last = stderr.strip().splitlines()[-1]
    # before the loop: this line; had the loop begun, its own save-and-stop line
    assert (last.startswith("pretrain.py: interrupted (Ctrl-C)")
            or "stopped by signal 2" in last), stderr[-3000:]


# ----- --help -----------------------------------------------------------------------------------

def own_flag_names(script_module):
    flag_values = flags.FlagValues()
    script_module.define_flags(flag_values)
    return sorted(name for name in flag_values if "." not in name)


def assert_help_names_everything(text, flag_names, schema):
    for name in flag_names:
        assert f"--{name}" in text or f"--[no]{name}" in text, name
    for key, default in run_config_keys.flat(schema).items():
        assert f"  {key} = {default!r}" in text, key
    for theirs in ("--logtostderr", "--jax_platforms", "--only_check_args"):
        assert theirs not in text  # the libraries' flags: --helpfull


def test_pretrain_help_lists_its_flags_and_every_config_key(tmp_path, capsys):
    code, _ = parse(pretrain_script, "--help")
    assert code == 0
    text = capsys.readouterr().out
    assert_help_names_everything(text, own_flag_names(pretrain_script),
                                 run_config.pretrain_config())
    meanings = run_config_keys.describe("pretrain")
    assert "  learning_rate = 0.0001  # the peak, after the warm-up" in text
    assert all(meanings.get(key) for key in run_config_keys.flat(run_config.pretrain_config()))

    # with a config file, its values beside the defaults
    code, _ = parse(pretrain_script, "--config=" + write_config(tmp_path, "c.py", GOOD_CONFIG),
                    "--help")
    assert code == 0
    assert "  total_steps = 0 (the file: 10)" in capsys.readouterr().out

    code, _ = parse(pretrain_script, "--helpfull")  # absl's listing of every flag, exit 0 too
    assert code == 0 and "bert_jax.cli:\n  --config" in capsys.readouterr().out


def test_finetune_help_exits_0_and_lists_its_flags_and_every_config_key():
    done = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "finetune.py"),
                           "--help"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr[-3000:]
    schema = run_config.finetune_config("classification")
    assert_help_names_everything(done.stdout, own_flag_names(finetune_script), schema)
    meanings = run_config_keys.describe("finetune")
    assert all(meanings.get(key) for key in run_config_keys.flat(schema))
