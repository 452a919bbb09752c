#!/usr/bin/env bash
# Train on the GPUs of this machine (one process sees them all; the mesh spans them).
#
#   launch/gpu_local.sh experiments/pretrain.py --config=experiments/configs/bert_base.py \
#       --workdir=$HOME/runs/bert_base
#
# Installs the CUDA build of jax into .venv on first use. XLA flags below are the usual ones for
# throughput on NVIDIA GPUs; override with XLA_FLAGS in the environment.
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 SCRIPT [FLAGS...]" >&2
  exit 2
fi
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
if ! .venv/bin/python -c "import jax, sys; sys.exit(jax.default_backend() != 'gpu')" 2>/dev/null; then
  .venv/bin/pip install -q -e . "jax[cuda12]==$(.venv/bin/python -c 'import jax; print(jax.__version__)' 2>/dev/null || echo 0.10.2)"
fi
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}
export XLA_FLAGS=${XLA_FLAGS:-"--xla_gpu_enable_latency_hiding_scheduler=true"}
exec .venv/bin/python "$@"
