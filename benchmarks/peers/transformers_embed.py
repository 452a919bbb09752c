"""The sentence-embedding peer of experiments/embed.py as a command: transformers + torch, the
same job from a text file to a .npy file, for benchmarks/compare_embed.py's whole-command figure.

    python benchmarks/peers/transformers_embed.py --input=sentences.txt --model=HF_FOLDER \
        --output=out.npy [--batch_size=32] [--normalize]

--input: one text per non-blank line (stripped), as embed.py reads a text file. Each batch of
--batch_size texts, in file order, is tokenized with the folder's tokenizer (padding=True: to the
batch's longest text; truncation at the model's length), run through AutoModel in inference mode,
mean-pooled over the real tokens (the attention mask) and, with --normalize, scaled to unit L2
norm (sentence-transformers' mean pooling). Writes float32 [N, hidden] to --output.
"""

from __future__ import annotations

from absl import app, flags

FLAGS = flags.FLAGS


def main(argv):
    del argv
    import numpy as np
    import torch
    import transformers

    with open(FLAGS.input, encoding="utf-8") as f:
        texts = [line.strip() for line in f if line.strip()]
    tokenizer = transformers.AutoTokenizer.from_pretrained(FLAGS.model)
    model = transformers.AutoModel.from_pretrained(FLAGS.model).eval()
    vectors = []
    with torch.inference_mode():
        for start in range(0, len(texts), FLAGS.batch_size):
            inputs = tokenizer(texts[start:start + FLAGS.batch_size], padding=True,
                               truncation=True, return_tensors="pt")
            hidden = model(**inputs).last_hidden_state
            mask = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
            vectors.append(torch.nn.functional.normalize(mean, dim=-1) if FLAGS.normalize
                           else mean)
    np.save(FLAGS.output, torch.cat(vectors).numpy().astype(np.float32))


if __name__ == "__main__":
    flags.DEFINE_string("input", None, "Texts, one per line.")
    flags.DEFINE_string("model", None, "A Hugging Face BERT folder.")
    flags.DEFINE_string("output", None, "Where the float32 [N, hidden] vectors go (.npy).")
    flags.DEFINE_integer("batch_size", 32, "Texts per batch.", lower_bound=1)
    flags.DEFINE_boolean("normalize", False, "Scale every vector to unit L2 norm.")
    flags.mark_flags_as_required(["input", "model", "output"])
    app.run(main)
