#!/usr/bin/env bash
# Data-parallel ALBERT pretraining, in the foreground; exits with the job's exit code.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<'USAGE'
usage: bash scripts/run_pretrain_distribute.sh DEVICE_NUM DATA_DIR OUTPUT_DIR [run_pretrain.py flags...]

Starts DEVICE_NUM workers on this machine (times NNODES machines), each running
run_pretrain.py --distribute true --data_dir DATA_DIR --output_dir OUTPUT_DIR [flags]. Every worker reads its own
disjoint share of the rows; gradients are averaged across workers, so the weights stay identical; rank 0 writes
the log, metrics.jsonl and checkpoints. batch_size is per worker. Relative paths are relative to your current
directory.

USAGE
  albert_launcher_help
}

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then usage; exit 0; fi
if [[ $# -lt 3 ]]; then usage >&2; exit 2; fi
albert_check_places "DEVICE_NUM=$1" "DATA_DIR=$2" "OUTPUT_DIR=$3" || exit 2
albert_check_flags --data_dir=DATA_DIR --output_dir=OUTPUT_DIR --device_num=DEVICE_NUM -- "${@:4}" || exit 2
DEVICE_NUM="$1"; DATA_DIR="$(realpath -m "$2")"; OUT="$(realpath -m "$3")"; shift 3
albert_run_distributed "$DEVICE_NUM" "$OUT" run_pretrain.py --data_dir "$DATA_DIR" --output_dir "$OUT" "$@"
