"""What the benchmark scripts share, none of it a question of its own: the worker protocol (one
process per measured run), the pre-training step that training runs, and the modes and data of
benchmarks/benchmark.py."""
