"""How a corpus is split among the hosts (processes) of a training run.

Each host reads one contiguous range of the records of the split, `shard_range`, disjoint from the
others' and together covering the split; the sizes differ by at most one record. Contiguous rather
than strided (record i to host i % N): the records of a TFDS dataset lie in consecutive
`array_record` files, so a host opens about 1/N of the files (at most one more) instead of every
file, and its reads stay local. The ranges are as well mixed as strides: TFDS writes the records
of a generated dataset (the "demo" and "text:GLOB" corpora, most catalog datasets) in an order
hashed from their keys, and every global batch holds rows of every host.

A position in the data belongs to one host layout: it says where in *its* range each host is.
When a run resumes on another number of hosts, no such position exists in the new ranges, so the
run starts a new pass over the data in a new order (`pass_seed`): the model state resumes
exactly, the rest of the interrupted pass is not read, and every later resume on the same layout
is exact again
(bert_jax.data.pretraining.iterator.PretrainingIterator.set_state_of_other_layout).
"""

from __future__ import annotations

import numpy as np

_LAYOUT_STREAM = 0x6C61796F  # "layo": separates the seeds of new passes from other uses


def shard_range(num_records: int, process_index: int, process_count: int) -> range:
    """The record indices of host `process_index` of `process_count`: a contiguous range.

    Host i reads [i * n // N, (i + 1) * n // N) of n records; with one host, all of them in order.
    """
    if not 0 <= process_index < process_count:
        raise ValueError(f"process_index={process_index} not in [0, {process_count})")
    return range(num_records * process_index // process_count,
                 num_records * (process_index + 1) // process_count)


def pass_seed(seed: int, layout_changes: int) -> int:
    """The seed of the data after `layout_changes` resumes on another host layout: `seed` itself
    when there was none (so a run that never changes layout reads what it always read), otherwise
    a seed in [0, 2**32) drawn from (seed, layout_changes), different for every change."""
    if layout_changes == 0:
        return seed
    return int(np.random.SeedSequence([seed, _LAYOUT_STREAM, layout_changes]).generate_state(1)[0])
