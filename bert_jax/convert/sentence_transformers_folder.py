"""The files that make a Hugging Face encoder folder a sentence-transformers model folder.

    write_modules(directory, hidden_size=384, pooling="cls", normalize=True, max_seq_len=128,
                  similarity="cosine")

beside the weights, config.json and tokenizer that `hf.save` wrote (the folder's root is the
Transformer module, as in every folder sentence-transformers publishes):

    modules.json                       the pipeline: Transformer (root) -> Pooling (1_Pooling)
                                       [-> Normalize (2_Normalize)]
    sentence_bert_config.json          {"max_seq_length": tokens with [CLS] and [SEP],
                                        "do_lower_case": false (the tokenizer lowercases itself)}
    1_Pooling/config.json              word_embedding_dimension and one pooling_mode_* true:
                                       cls_token ("cls") or mean_tokens ("mean")
    2_Normalize/                       (empty: the module has no settings) when normalize
    config_sentence_transformers.json  similarity_fn_name ("cosine", "dot", "euclidean",
                                       "manhattan"), no prompts
    tokenizer_config.json              ModernBERT: model_input_names without token_type_ids

The module type names are the long-standing `sentence_transformers.models.*` ones: releases 2.x
to 5.x write them and 6.x still loads them (measured here: 5.7 with transformers 4.57, 6.3 with
transformers 5.25). Pooling is what bert_jax.embeddings.encode.pool computes: "mean" averages the
last layer over the real tokens ([CLS] and [SEP] included), "cls" takes position 0, and
Normalize divides by the L2 norm, so `SentenceTransformer(folder).encode(texts)` gives embed.py's
vectors (tests/tools/test_sentence_transformers_export.py).
"""

from __future__ import annotations

import json
import os

POOLING_MODES = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token"}
ALL_POOLING_MODES = ("pooling_mode_cls_token", "pooling_mode_mean_tokens",
                     "pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
                     "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken")
SIMILARITIES = ("cosine", "dot", "euclidean", "manhattan")
MODULES_FILE = "modules.json"
POOLING_DIR = "1_Pooling"
NORMALIZE_DIR = "2_Normalize"


def _write_json(path: str, value) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(value, indent=2) + "\n")


def write_modules(directory: str | os.PathLike, *, hidden_size: int, pooling: str,
                  normalize: bool, max_seq_len: int, similarity: str = "cosine") -> None:
    """Write the sentence-transformers files (module docstring) into `directory`, which already
    holds an encoder folder transformers' AutoModel loads. ValueError for an unknown pooling
    or similarity, or a length that leaves no room beside [CLS] and [SEP]."""
    if pooling not in POOLING_MODES:
        raise ValueError(f"pooling {pooling!r} is unknown; choose one of {tuple(POOLING_MODES)}")
    if similarity not in SIMILARITIES:
        raise ValueError(f"similarity {similarity!r} is unknown; choose one of {SIMILARITIES}")
    if max_seq_len < 3:
        raise ValueError(f"max_seq_len={max_seq_len} leaves no room beside [CLS] and [SEP]")
    directory = os.fspath(directory)
    modules = [{"idx": 0, "name": "0", "path": "",
                "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": POOLING_DIR,
                "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": NORMALIZE_DIR,
                        "type": "sentence_transformers.models.Normalize"})
    _write_json(os.path.join(directory, MODULES_FILE), modules)
    _write_json(os.path.join(directory, "sentence_bert_config.json"),
                {"max_seq_length": int(max_seq_len), "do_lower_case": False})
    os.makedirs(os.path.join(directory, POOLING_DIR), exist_ok=True)
    _write_json(os.path.join(directory, POOLING_DIR, "config.json"),
                {"word_embedding_dimension": int(hidden_size),
                 **{mode: mode == POOLING_MODES[pooling] for mode in ALL_POOLING_MODES},
                 "include_prompt": True})
    if normalize:
        os.makedirs(os.path.join(directory, NORMALIZE_DIR), exist_ok=True)
    _tokenizer_inputs_the_model_takes(directory)
    _write_json(os.path.join(directory, "config_sentence_transformers.json"),
                {"__version__": {}, "model_type": "SentenceTransformer", "prompts": {},
                 "default_prompt_name": None, "similarity_fn_name": similarity})


def _tokenizer_inputs_the_model_takes(directory: str) -> None:
    """A ModernBERT folder's tokenizer_config.json gets model_input_names without token_type_ids:
    ModernBertModel.forward takes none, and sentence-transformers 5.x passes every tokenizer
    output to it (TypeError), as transformers' published ModernBERT tokenizers say too."""
    with open(os.path.join(directory, "config.json"), encoding="utf-8") as f:
        model_type = json.load(f).get("model_type")
    path = os.path.join(directory, "tokenizer_config.json")
    if model_type != "modernbert" or not os.path.isfile(path):
        return
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    config["model_input_names"] = ["input_ids", "attention_mask"]
    _write_json(path, config)


def read_settings(directory: str | os.PathLike) -> dict | None:
    """(pooling, normalize, max_seq_len, similarity) of a sentence-transformers folder written by
    write_modules (or any with one of those two pooling modes), as a dict; None when the folder
    has no modules.json."""
    directory = os.fspath(directory)
    if not os.path.isfile(os.path.join(directory, MODULES_FILE)):
        return None
    with open(os.path.join(directory, MODULES_FILE), encoding="utf-8") as f:
        modules = json.load(f)
    settings = {"pooling": "mean", "normalize": False, "max_seq_len": None,
                "similarity": "cosine"}
    for module in modules:
        kind = module["type"].rsplit(".", 1)[-1].lower()
        where = os.path.join(directory, module.get("path", ""))
        if kind == "pooling":
            with open(os.path.join(where, "config.json"), encoding="utf-8") as f:
                pooling = json.load(f)
            chosen = [name for name, key in POOLING_MODES.items() if pooling.get(key)]
            mode = pooling.get("pooling_mode")  # the 6.x spelling
            settings["pooling"] = chosen[0] if chosen else {"cls": "cls"}.get(mode, "mean")
        elif kind == "normalize":
            settings["normalize"] = True
    for name, key in (("sentence_bert_config.json", "max_seq_length"),
                      ("config_sentence_transformers.json", "similarity_fn_name")):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                value = json.load(f).get(key)
            if value is not None:
                settings["max_seq_len" if key == "max_seq_length" else "similarity"] = value
    return settings
