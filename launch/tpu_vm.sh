#!/usr/bin/env bash
# Run a script on every worker of a Cloud TPU VM slice (each worker is one JAX process; on TPU
# jax.distributed.initialize() finds the coordinator by itself, see --distributed=auto).
#
#   TPU_NAME=my-v4-32 ZONE=us-central2-b launch/tpu_vm.sh experiments/pretrain.py \
#       --config=experiments/configs/bert_base.py --workdir=gs://my-bucket/bert_base
#
# Copies this checkout to every worker (rsync over gcloud's ssh), installs it with the TPU build of
# jax, then starts the script on all workers at once. --workdir must be shared storage (gs://...)
# so that every worker writes the same checkpoints.
set -euo pipefail
: "${TPU_NAME:?set TPU_NAME to the TPU VM name}"
: "${ZONE:?set ZONE to the TPU VM zone}"
if [ $# -lt 1 ]; then
  echo "usage: TPU_NAME=... ZONE=... $0 SCRIPT [FLAGS...]" >&2
  exit 2
fi
cd "$(dirname "$0")/.."
remote_dir=${REMOTE_DIR:-bert_jax}
gcloud compute tpus tpu-vm scp --recurse --zone="$ZONE" --worker=all \
  bert_jax experiments launch setup.py README.md "$TPU_NAME:~/$remote_dir/"
args=$(printf ' %q' "$@")
gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" --worker=all --command="
  set -e; cd ~/$remote_dir
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/pip install -q -e . 'jax[tpu]' -f https://storage.googleapis.com/jax-releases/libtpu_releases.html
  .venv/bin/python $args --distributed=auto"
