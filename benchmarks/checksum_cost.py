"""The cost of checkpoint checksums (bert_jax.train.checksums) in seconds per GB.

    python benchmarks/checksum_cost.py --size_mb=1024 --repeats=3

Writes one file of random bytes of --size_mb in a temporary folder (so it sits in the page
cache, as a just-written checkpoint does), then times `checksums.digest` over it (BLAKE2b-128,
read in 8 MiB chunks) and, for comparison, zlib.crc32 over the same chunks; prints one JSON line
with the best of --repeats for each. A step's record costs one such pass over its files at save,
and its verification one more at restore.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import zlib

from absl import app, flags
from etils import epath

from bert_jax.train import checksums

flags.DEFINE_integer("size_mb", 1024, "Size of the file hashed, in MiB.")
flags.DEFINE_integer("repeats", 3, "Timed passes per hash; the best is reported.")
FLAGS = flags.FLAGS


def _crc32(path: str) -> int:
    value = 0
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            value = zlib.crc32(chunk, value)
    return value


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
        blake2b = _best_seconds(lambda: checksums.digest(epath.Path(path)), FLAGS.repeats)
        crc32 = _best_seconds(lambda: _crc32(path), FLAGS.repeats)
    gigabytes = size / 1e9
    print(json.dumps({"bytes": size, "repeats": FLAGS.repeats, "cpus": os.cpu_count(),
                      "blake2b_128_s_per_gb": round(blake2b / gigabytes, 3),
                      "crc32_s_per_gb": round(crc32 / gigabytes, 3)}))


if __name__ == "__main__":
    app.run(main)
