#!/usr/bin/env bash
# Multi-host training on one machine: N local CPU processes joined by jax.distributed, each with
# D fake CPU devices, the way a pod runs one process per host.
#
#   launch/multihost_local.sh N D <script.py> [flags...]
#   launch/multihost_local.sh 2 4 experiments/pretrain.py --config=experiments/configs/demo.py \
#       --workdir=/tmp/mh --config.total_steps=20
#
# Every process gets --coordinator_address, --num_processes and --process_id; logs go to
# <workdir or /tmp>/process_<i>.log and process 0 also prints to the terminal. Exits non-zero if
# any process fails.
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 NUM_PROCESSES DEVICES_PER_PROCESS SCRIPT [FLAGS...]" >&2
  exit 2
fi
num_processes=$1; devices=$2; script=$3; shift 3
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
port=${COORDINATOR_PORT:-$((20000 + RANDOM % 20000))}
logdir=${LOGDIR:-$(mktemp -d)}
pids=()
for ((i = 0; i < num_processes; i++)); do
  # The caller's XLA_FLAGS are kept; the device count is added after them.
  XLA_FLAGS="${XLA_FLAGS:-} --xla_force_host_platform_device_count=${devices}" JAX_PLATFORMS=cpu \
    "$python" "$script" "$@" --coordinator_address="127.0.0.1:${port}" \
    --num_processes="$num_processes" --process_id="$i" >"$logdir/process_$i.log" 2>&1 &
  pids+=($!)
done
echo "started $num_processes processes (logs in $logdir)"
tail -n +1 -f "$logdir/process_0.log" --pid "${pids[0]}" &
status=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "process $i failed; its log: $logdir/process_$i.log" >&2
    tail -n 20 "$logdir/process_$i.log" >&2
    status=1
  fi
done
exit $status
