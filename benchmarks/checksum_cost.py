"""The cost of checkpoint checksums (bert_jax.train.checkpoint.checksums) in seconds per GB, for
each digest a record may use (CRC32, which records are written with, and BLAKE2b-128).

    python benchmarks/checksum_cost.py --size_mb=1024 --repeats=3

Writes one file of random bytes of --size_mb in a temporary folder (so it sits in the page
cache, as a just-written checkpoint does), then times `checksums.digest` over it with each of
checksums.ALGORITHMS (read in 8 MiB chunks); prints one JSON line with the best of --repeats
for each. A step's record costs one such pass over its files at save (in Orbax's finalize
thread), and its verification one more at restore.
"""

from __future__ import annotations

import json
import os
import tempfile
import time

from absl import app, flags
from etils import epath

from bert_jax.train.checkpoint import checksums

flags.DEFINE_integer("size_mb", 1024, "Size of the file hashed, in MiB.")
flags.DEFINE_integer("repeats", 3, "Timed passes per hash; the best is reported.")
FLAGS = flags.FLAGS


def _best_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv):
    del argv
    size = FLAGS.size_mb << 20
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "array")
        with open(path, "wb") as f:
            for _ in range(FLAGS.size_mb):
                f.write(os.urandom(1 << 20))
        seconds = {name: _best_seconds(lambda n=name: checksums.digest(epath.Path(path), n),
                                       FLAGS.repeats) for name in checksums.ALGORITHMS}
    gigabytes = size / 1e9
    print(json.dumps({"bytes": size, "repeats": FLAGS.repeats, "cpus": os.cpu_count(),
                      **{f"{name}_s_per_gb": round(s / gigabytes, 3)
                         for name, s in seconds.items()}}))


if __name__ == "__main__":
    app.run(main)
