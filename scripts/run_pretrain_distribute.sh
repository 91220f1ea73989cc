#!/usr/bin/env bash
# Data-parallel ALBERT pretraining, in the foreground; exits with the job's exit code.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: bash scripts/run_pretrain_distribute.sh DEVICE_NUM DATA_DIR OUTPUT_DIR [run_pretrain.py flags...]

Starts DEVICE_NUM workers on this machine (times NNODES machines), each running
run_pretrain.py --distribute true --data_dir DATA_DIR --output_dir OUTPUT_DIR [flags]. Every worker reads its own
disjoint share of the rows; gradients are averaged across workers, so the weights stay identical; rank 0 writes
the log, metrics.jsonl and checkpoints. batch_size is per worker.

Environment:
  DEVICE_TARGET  auto | CPU | GPU | Ascend (default auto)
  LAUNCHER       msrun | mpirun (default: mpirun with NCCL when DEVICE_TARGET=GPU, msrun otherwise;
                 msrun works on every target, mpirun needs GPU or Ascend)
  NNODES         machines in the job (default 1); start this script once on each machine
  NODE_RANK      this machine's index, 0 .. NNODES-1 (default 0; msrun)
  MASTER_ADDR    address of the machine with NODE_RANK 0 (default 127.0.0.1; msrun)
  MASTER_PORT    free TCP port on that machine (default 8118; msrun)
  HOSTFILE       mpirun host file for multi-machine mpirun jobs (optional)
  PYTHON         python interpreter for mpirun (default python; msrun starts the python on PATH)
  DRY_RUN=1      print the launch command instead of running it
Logs: OUTPUT_DIR/logs/ (msrun: one worker_N.log per worker; mpirun: one folder per rank); the script prints it.
USAGE
}

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then usage; exit 0; fi
if [[ $# -lt 3 ]]; then usage >&2; exit 2; fi
if ! [[ "$1" =~ ^[1-9][0-9]*$ ]]; then echo "error: DEVICE_NUM must be a positive integer, got '$1'" >&2; exit 2; fi

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEVICE_NUM="$1"; DATA_DIR="$(realpath -m "$2")"; OUT="$(realpath -m "$3")"; shift 3
DEVICE_TARGET="${DEVICE_TARGET:-auto}"
NNODES="${NNODES:-1}"; NODE_RANK="${NODE_RANK:-0}"
MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"; MASTER_PORT="${MASTER_PORT:-8118}"
PYTHON="${PYTHON:-python}"
if [[ -z "${LAUNCHER:-}" ]]; then
  if [[ "$DEVICE_TARGET" == GPU ]]; then LAUNCHER=mpirun; else LAUNCHER=msrun; fi
fi
WORKERS=$((DEVICE_NUM * NNODES))
ARGS=(--distribute true --device_num "$WORKERS" --device_target "$DEVICE_TARGET" --data_dir "$DATA_DIR"
      --output_dir "$OUT" "$@")
LOGS="$OUT/logs"

case "$LAUNCHER" in
  msrun)
    CMD=(msrun --worker_num="$WORKERS" --local_worker_num="$DEVICE_NUM" --master_addr="$MASTER_ADDR"
         --master_port="$MASTER_PORT" --node_rank="$NODE_RANK" --log_dir="$LOGS/msrun_node$NODE_RANK"
         --join=True "$ROOT/run_pretrain.py" "${ARGS[@]}")
    ;;
  mpirun)
    if [[ "$DEVICE_TARGET" != GPU && "$DEVICE_TARGET" != Ascend ]]; then
      echo "error: LAUNCHER=mpirun needs DEVICE_TARGET=GPU or Ascend; use LAUNCHER=msrun on CPU" >&2; exit 2
    fi
    CMD=(mpirun -n "$WORKERS" ${HOSTFILE:+--hostfile "$HOSTFILE"} --output-filename "$LOGS/mpirun"
         --merge-stderr-to-stdout "$PYTHON" "$ROOT/run_pretrain.py" "${ARGS[@]}")
    ;;
  *)
    echo "error: LAUNCHER must be msrun or mpirun, got '$LAUNCHER'" >&2; exit 2
    ;;
esac

if [[ "${DRY_RUN:-0}" == 1 ]]; then printf '%q ' "${CMD[@]}"; echo; exit 0; fi
mkdir -p "$LOGS"
echo "logs: $LOGS (this node's launcher output: $LOGS/launcher_node$NODE_RANK.log)"
cd "$ROOT"
set +e
"${CMD[@]}" 2>&1 | tee "$LOGS/launcher_node$NODE_RANK.log"
status=${PIPESTATUS[0]}
set -e
exit "$status"
