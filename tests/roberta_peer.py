"""The small RoBERTa of the RoBERTa tests and its byte-level BPE tokenizer (RoBERTa's pipeline,
trained on a few sentences), shared with the sentence-transformers export tests."""

import tokenizers
from tokenizers import decoders, models, pre_tokenizers, processors, trainers

PAD = 1  # RoBERTa's <pad>: positions start at row PAD + 1
SMALL = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
             intermediate_size=37, max_position_embeddings=24, type_vocab_size=1,
             pad_token_id=PAD, bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5,
             hidden_act="gelu")
FAIRSEQ_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # ids 0..4, as in RoBERTa

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A lazy dog sleeps in the sun while the fox runs away.",
    "Foxes and dogs are animals; the quick ones win races.",
    "Where is the train station? It is north of the old cathedral.",
    "Café naïve façade: Zürich's Straße is quieter than the station.",
]


def byte_level_bpe(path, texts=SENTENCES, vocab_size=320):
    """RoBERTa's pipeline trained on `texts`: byte-level BPE, <s> A </s> (</s> B </s>) by
    RobertaProcessing; saved to `path` (a tokenizer.json), which is returned."""
    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=FAIRSEQ_SPECIALS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    tokenizer.save(str(path))
    return path
