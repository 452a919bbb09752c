"""Tiny fine-tuning configs shared by the fine-tuning, prediction and export tests."""

from bert_jax.config import run as run_config


def set_keys(config, changes):
    """config with each dotted key of `changes` ("data.train_path") set; returns config."""
    for key, value in changes.items():
        *parents, leaf = key.split(".")
        target = config
        for parent in parents:
            target = target[parent]
        target[leaf] = value
    return config


def tiny_finetune_config(task, tokenizer_path, hidden_size=64, num_hidden_layers=2,
                         max_position_embeddings=64, **changes):
    """A BERT of `hidden_size` and `num_hidden_layers`, no dropout, batch 16, eval batch 32,
    synchronous checkpoints; `changes` are dotted config keys."""
    config = run_config.finetune_config(task)
    config.tokenizer.path = tokenizer_path
    config.model = run_config.model_block(
        "tiny", hidden_size=hidden_size, num_hidden_layers=num_hidden_layers,
        num_attention_heads=2, intermediate_size=2 * hidden_size,
        max_position_embeddings=max_position_embeddings, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0)
    config.batch_size = 16
    config.eval_batch_size = 32
    config.log_every_steps = 50
    config.async_checkpoints = False
    return set_keys(config, changes)


# Random NER sentences over a tiny vocabulary (the words of each group are in the tests' vocabs).
NER_GROUPS = ((("john", "mary"), "PER"), (("paris", "berlin"), "LOC"), (("acme", "globex"), "ORG"))
NER_FILLER = ["visited", "met", "works", "at", "in", "the", "today", "and", "is", "old", "red"]


def ner_sentence(rng):
    """(words, BIO tags) of 3-6 words, each an entity (B-PER/LOC/ORG) with probability 0.4."""
    words, tags = [], []
    for _ in range(rng.integers(3, 7)):
        if rng.random() < 0.4:
            group, tag = NER_GROUPS[rng.integers(3)]
            words.append(group[rng.integers(2)])
            tags.append(f"B-{tag}")
        else:
            words.append(NER_FILLER[rng.integers(len(NER_FILLER))])
            tags.append("O")
    return words, tags


def text_rows(rng, count):
    """(text, label) pairs: 2-5 filler words with one entity word among them, labelled by the
    entity's kind (person, place, org)."""
    rows = []
    for _ in range(count):
        kind = rng.integers(3)
        words = list(rng.choice(NER_FILLER, rng.integers(2, 6)))
        words.insert(rng.integers(len(words) + 1), NER_GROUPS[kind][0][rng.integers(2)])
        rows.append((" ".join(words), ("person", "place", "org")[kind]))
    return rows


# The vocabulary of the tiny prediction runs (the NER groups, filler words and QA words).
WORDS = ["john", "mary", "paris", "berlin", "acme", "globex", "book", "car", "visited", "met",
         "works", "at", "in", "the", "today", "and", "is", "old", "red", "?", "where", "who",
         "has", "."]


def write_vocab(path) -> str:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    path.write_text("\n".join(specials + WORDS + ["bl", "##ack", "##burn"]) + "\n",
                    encoding="utf-8")
    return str(path)


def tiny_config(vocab, task, **changes):
    return tiny_finetune_config(task, vocab, hidden_size=32, num_hidden_layers=1, **{
        "eval_batch_size": 16, "total_steps": 30, "learning_rate": 2e-3, **changes})


def finetune_settings(task, **changes):
    """The RunSettings (settings.typed) of the schema's fine-tuning config of `task` with
    `changes` by dotted key: what the task's readers, encoders and batchers take, for tests that
    call them without a run."""
    from bert_jax.config import settings
    return settings.typed(set_keys(run_config.finetune_config(task), changes))
