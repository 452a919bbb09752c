"""Throughput, comparison and profiling scripts: ours against reference implementations
(peers/), each measuring the program that training runs (bert_jax.train.program)."""
