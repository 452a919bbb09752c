r"""Measures the exact top-k search of bert_jax/embeddings/search.py in queries per second, on the
devices of the machine it runs on (the corpus sharded over all of them).

  python benchmarks/retrieval_search.py --corpus=1000000 --dim=384 --queries=4096 --k=100
  XLA_FLAGS=--xla_force_host_platform_device_count=8 python benchmarks/retrieval_search.py

Random unit vectors (the search cost does not depend on the values), similarity cos. One search
of the first query block compiles the program (not timed); then the timed searches of all
--queries, --repeats times, each to its host copy of the results. Prints one JSON object per
--query_blocks value: {"platform", "device_kind", "devices", "corpus", "dim", "dtype", "k",
"query_block", "queries", "seconds" (the best repeat), "queries_per_s", "corpus_bytes_per_device"}.
"""

import json
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from bert_jax.embeddings import search
from bert_jax.runtime import sharding

FLAGS = flags.FLAGS
flags.DEFINE_integer("corpus", 100_000, "Corpus vectors.")
flags.DEFINE_integer("dim", 384, "Dimensions per vector (384: MiniLM, 768: BERT-base).")
flags.DEFINE_integer("queries", 1024, "Queries per timed search.")
flags.DEFINE_integer("k", 100, "Results per query.")
flags.DEFINE_list("query_blocks", ["256"], "Queries per device program; each is timed.")
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "How the corpus is stored.")
flags.DEFINE_integer("repeats", 3, "Timed searches per setting; the best is reported.")


def main(argv):
    del argv
    rng = np.random.default_rng(0)
    corpus = rng.standard_normal((FLAGS.corpus, FLAGS.dim), np.float32)
    queries = rng.standard_normal((FLAGS.queries, FLAGS.dim), np.float32)
    mesh = sharding.make_mesh()
    index = search.shard_corpus(corpus, mesh, "cos", jnp.dtype(FLAGS.dtype))
    jax.block_until_ready(index.vectors)
    for block in (int(b) for b in FLAGS.query_blocks):
        search.search(index, queries[:block], FLAGS.k, block)  # compiles
        best = float("inf")
        for _ in range(FLAGS.repeats):
            start = time.perf_counter()
            search.search(index, queries, FLAGS.k, block)
            best = min(best, time.perf_counter() - start)
        device = jax.devices()[0]
        print(json.dumps({
            "platform": device.platform, "device_kind": device.device_kind,
            "devices": jax.device_count(), "corpus": FLAGS.corpus, "dim": FLAGS.dim,
            "dtype": FLAGS.dtype, "k": FLAGS.k, "query_block": block, "queries": FLAGS.queries,
            "seconds": round(best, 4), "queries_per_s": round(FLAGS.queries / best, 1),
            "corpus_bytes_per_device": index.rows_per_device * FLAGS.dim
            * jnp.dtype(FLAGS.dtype).itemsize}), flush=True)


if __name__ == "__main__":
    app.run(main)
