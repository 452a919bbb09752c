"""benchmarks/compare_embed.py's whole-command comparison: embed.py and its transformers + torch
peer (benchmarks/peers/transformers_embed.py) do the same job, so their vectors agree, and every
run is timed and counted (speed is measured by running the script on a quiet machine, never
asserted here)."""

import numpy as np

from benchmarks import compare_embed
from bert_jax.convert import hf


def test_the_commands_embed_the_same_sentences_the_same_way(tmp_path):
    report = compare_embed.commands(hf.packaged_minilm_dir(), str(tmp_path), batch_size=32,
                                    repeats=1)
    assert set(report["seconds"]) == {"ours_empty_cache", "ours_cached", "torch_transformers"}
    assert all(len(runs) == 1 and runs[0] > 0 for runs in report["seconds"].values())
    assert report["max_abs_difference"] < 1e-5  # every run of ours against the peer's
    ours = np.load(tmp_path / "command_ours_empty_cache_0.npy")
    assert ours.shape == (len(compare_embed.polarity_sentences()), 384)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, rtol=1e-5)
    # the run with an empty cache compiled into a folder of its own, the cached run reused one
    assert any((tmp_path / "empty_cache_0").iterdir())
    assert (tmp_path / "command_ours_cached_0.npy").exists()
    assert any((tmp_path / "commands_cache").iterdir())
