"""Fine-tuning examples from TFDS catalog names (network access needed the first time).

`read_tfds(name, split)` returns the same example types as the file readers of
`bert_jax.data.finetuning.readers` (TextExample, TaggedSentence, QAExample), with class labels as
their names, so label maps do not depend on where the data came from. Datasets are read as TFDS
`array_record` data sources (no TensorFlow).
"""

from __future__ import annotations

import importlib
from typing import Any, Optional

from bert_jax.data.finetuning.readers import DataError, TaggedSentence, TextExample, qa_example

# name -> (module that registers the builder, text key, pair key or None, label key)
TFDS_TEXT_TASKS = {
    "glue/sst2": ("tensorflow_datasets.text.glue", "sentence", None, "label"),
    "glue/mrpc": ("tensorflow_datasets.text.glue", "sentence1", "sentence2", "label"),
    "glue/stsb": ("tensorflow_datasets.text.glue", "sentence1", "sentence2", "label"),
    "glue/mnli": ("tensorflow_datasets.text.glue", "premise", "hypothesis", "label"),
    "glue/cola": ("tensorflow_datasets.text.glue", "sentence", None, "label"),
    "glue/qqp": ("tensorflow_datasets.text.glue", "question1", "question2", "label"),
    "glue/qnli": ("tensorflow_datasets.text.glue", "question", "sentence", "label"),
    "glue/rte": ("tensorflow_datasets.text.glue", "sentence1", "sentence2", "label"),
    "glue/wnli": ("tensorflow_datasets.text.glue", "sentence1", "sentence2", "label"),
}
TFDS_TAGGING_TASKS = {"conll2003": ("tensorflow_datasets.text.conll2003", "tokens", "ner")}
TFDS_QA_TASKS = {"squad": "tensorflow_datasets.datasets.squad",
                 "squad/v1.1": "tensorflow_datasets.datasets.squad",
                 "squad/v2.0": "tensorflow_datasets.datasets.squad"}
TFDS_NAMES = tuple(TFDS_TEXT_TASKS) + tuple(TFDS_TAGGING_TASKS) + tuple(TFDS_QA_TASKS)


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def tfds_source(name: str, split: str, data_dir: Optional[str] = None, download: bool = True):
    """(random-access data source, features) of a TFDS dataset, prepared on first use.

    With download=False a dataset not yet prepared in data_dir is an error that says so (no
    network is touched); with download=True TFDS downloads and prepares it (network needed).
    """
    import tensorflow_datasets as tfds

    module = (TFDS_TEXT_TASKS.get(name, (None,))[0] or TFDS_TAGGING_TASKS.get(name, (None,))[0]
              or TFDS_QA_TASKS.get(name))
    if module is None:
        raise DataError(f"TFDS dataset {name!r} is not supported; choose one of {TFDS_NAMES}")
    importlib.import_module(module)  # registers the builder (not imported without TensorFlow)
    builder = tfds.builder(name, data_dir=data_dir or None)
    if not builder.is_prepared():
        if not download:
            raise DataError(
                f"TFDS dataset {name!r} is not prepared in {builder.data_dir}; run once with "
                "network access and download enabled (data.tfds_download=True), or point "
                "data.tfds_data_dir at a folder where it is prepared")
        try:
            builder.download_and_prepare(file_format="array_record")
        except Exception as e:  # offline: requests' ConnectionError after retries, and others
            raise DataError(f"TFDS dataset {name!r} could not be downloaded and prepared into "
                            f"{builder.data_dir} (network access is needed the first time): "
                            f"{type(e).__name__}: {e}") from e
    if split not in builder.info.splits:
        raise DataError(f"TFDS dataset {name!r} has no split {split!r}; it has "
                        f"{sorted(builder.info.splits)}")
    return builder.as_data_source(split=split), builder.info.features


def read_tfds(name: str, split: str, data_dir: Optional[str] = None, download: bool = True):
    """Examples of a supported TFDS dataset: TextExamples, TaggedSentences or QAExamples.

    Class labels come back as their names (from the dataset's ClassLabel), so label maps are
    the same whether data comes from TFDS or from files.
    """
    source, features = tfds_source(name, split, data_dir, download)
    if name in TFDS_TEXT_TASKS:
        _, text_key, pair_key, label_key = TFDS_TEXT_TASKS[name]
        names = getattr(features[label_key], "names", None)  # None: stsb's float score
        examples = []
        for record in source:
            label = record[label_key]
            if names is not None:
                if int(label) < 0:
                    continue  # GLUE test splits hide their labels (-1)
                label = names[int(label)]
            else:
                label = float(label)
            examples.append(TextExample(_text(record[text_key]),
                                        _text(record[pair_key]) if pair_key else None, label))
        return examples
    if name in TFDS_TAGGING_TASKS:
        _, words_key, tags_key = TFDS_TAGGING_TASKS[name]
        names = features[tags_key].feature.names
        return [TaggedSentence(tuple(_text(w) for w in r[words_key]),
                               tuple(names[int(t)] for t in r[tags_key])) for r in source]
    examples = []
    for record in source:
        answers = record["answers"]
        pairs = [(_text(t), int(s)) for t, s in zip(answers["text"], answers["answer_start"])]
        examples.append(qa_example(_text(record["id"]), _text(record["question"]),
                                   _text(record["context"]), pairs,
                                   bool(record.get("is_impossible", False)), f"tfds:{name}"))
    return examples
