"""The sentence-embedding peer of experiments/embed.py: transformers + torch, the same job from a
text file to a .npy file (benchmarks/compare_embed.py times it as a whole command, and calls
`embed` in-process).

    python benchmarks/peers/transformers_embed.py --input=sentences.txt --model=HF_FOLDER \
        --output=out.npy [--batch_size=32] [--normalize]

--input: one text per non-blank line (stripped), as embed.py reads a text file. The texts are
embedded as sentence-transformers' `encode` does, at its best: sorted longest first (here by
their token count, which the tokenizer gives exactly), cut into batches of --batch_size texts,
each tokenized with the folder's tokenizer padded to its longest text (truncation at the
model's length), run through AutoModel in inference mode, mean-pooled over the real tokens
(the attention mask) and, with --normalize, scaled to unit L2 norm; the vectors come back in
input order. Writes float32 [N, hidden] to --output.
"""

from __future__ import annotations

from absl import app, flags

FLAGS = flags.FLAGS


def embed(tokenizer, model, texts: list[str], batch_size: int, normalize: bool):
    """float32 numpy [len(texts), hidden]: the texts' vectors in their order (module docstring)."""
    import numpy as np
    import torch

    lengths = [len(ids) for ids in tokenizer(texts, truncation=True)["input_ids"]]
    order = np.argsort(-np.asarray(lengths), kind="stable")
    vectors = np.zeros((len(texts), model.config.hidden_size), np.float32)
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            batch = order[start:start + batch_size]
            inputs = tokenizer([texts[i] for i in batch], padding=True, truncation=True,
                               return_tensors="pt")
            hidden = model(**inputs).last_hidden_state
            mask = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
            if normalize:
                mean = torch.nn.functional.normalize(mean, dim=-1)
            vectors[batch] = mean.numpy()
    return vectors


def main(argv):
    del argv
    import numpy as np
    import transformers

    with open(FLAGS.input, encoding="utf-8") as f:
        texts = [line.strip() for line in f if line.strip()]
    tokenizer = transformers.AutoTokenizer.from_pretrained(FLAGS.model)
    model = transformers.AutoModel.from_pretrained(FLAGS.model).eval()
    np.save(FLAGS.output, embed(tokenizer, model, texts, FLAGS.batch_size, FLAGS.normalize))


if __name__ == "__main__":
    flags.DEFINE_string("input", None, "Texts, one per line.")
    flags.DEFINE_string("model", None, "A Hugging Face BERT folder.")
    flags.DEFINE_string("output", None, "Where the float32 [N, hidden] vectors go (.npy).")
    flags.DEFINE_integer("batch_size", 32, "Texts per batch.", lower_bound=1)
    flags.DEFINE_boolean("normalize", False, "Scale every vector to unit L2 norm.")
    flags.mark_flags_as_required(["input", "model", "output"])
    app.run(main)
