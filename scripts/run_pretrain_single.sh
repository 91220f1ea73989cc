#!/usr/bin/env bash
# Pretrain ALBERT on one device, in the foreground; exits with the training job's exit code.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: bash scripts/run_pretrain_single.sh                              (embedded quick start)
       bash scripts/run_pretrain_single.sh DATA_DIR OUTPUT_DIR [run_pretrain.py flags...]

With no arguments: builds a small English corpus from the documentation that ships with Python, trains a
2000-piece SentencePiece vocabulary on it, writes pretraining MindRecord (train, and eval masked with another
seed), pretrains albert_tiny, evaluates it, draws the loss curves and prints where everything went.

With arguments: runs run_pretrain.py --data_dir DATA_DIR --output_dir OUTPUT_DIR plus the given flags
(any key of pretrain_config.yaml, e.g. --albert_network albert_base_v2 --train_steps 125000 --optimizer Lamb).

Environment:
  DEVICE_TARGET  auto | CPU | GPU | Ascend (default auto: the best device present)
  DEVICE_ID      device to use on GPU/Ascend (default 0)
  PYTHON         python interpreter (default python)
  Quick start only:
  OUTPUT_DIR     where it writes (default ./output/pretrain_quickstart)
  TRAIN_STEPS    optimizer steps, a positive integer (default 400)
  SEQ_LENGTH     max_seq_length of the data (default 128)
Logs go to OUTPUT_DIR/logs/; the script prints that folder first.
USAGE
}

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then usage; exit 0; fi
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROOT="$ALBERT_ROOT"
PYTHON="${PYTHON:-python}"
DEVICE_TARGET="${DEVICE_TARGET:-auto}"
DEVICE_ID="${DEVICE_ID:-0}"

# run LOG_FILE command...: echo the command, run it with its output also in LOG_FILE, return its exit code. The
# python commands write no log of their own (src/common/run_log.py).
export ALBERT_LOG_TEED=1
run() {
  local log="$1"; shift
  echo "+ $*" | tee -a "$log"
  (cd "$ROOT" && exec "$@") 2>&1 | tee -ia "$log"
  return "${PIPESTATUS[0]}"
}

if [[ $# -eq 1 ]]; then usage >&2; exit 2; fi

if [[ $# -ge 2 ]]; then
  albert_check_places "DATA_DIR=$1" "OUTPUT_DIR=$2" || exit 2
  albert_check_flags --data_dir=DATA_DIR --output_dir=OUTPUT_DIR -- "${@:3}" || exit 2
  DATA_DIR="$(realpath -m "$1")"; OUT="$(realpath -m "$2")"; shift 2
  mkdir -p "$OUT/logs"
  echo "logs: $OUT/logs/pretrain.log"
  run "$OUT/logs/pretrain.log" "$PYTHON" run_pretrain.py --data_dir "$DATA_DIR" --output_dir "$OUT" \
    --device_target "$DEVICE_TARGET" --device_id "$DEVICE_ID" "$@"
  exit $?
fi

TRAIN_STEPS="${TRAIN_STEPS:-400}"
# Checked before any use: shell arithmetic would run a command substitution hidden in it and take 'abc' for 0.
if ! [[ "$TRAIN_STEPS" =~ ^[1-9][0-9]{0,8}$ ]]; then
  echo "error: TRAIN_STEPS must be a positive integer below 10^9, got '$TRAIN_STEPS'" >&2; exit 2
fi
SEQ_LENGTH="${SEQ_LENGTH:-128}"
if ! [[ "$SEQ_LENGTH" =~ ^[1-9][0-9]{0,2}$ && "$SEQ_LENGTH" -ge 8 && "$SEQ_LENGTH" -le 512 ]]; then
  echo "error: SEQ_LENGTH must be an integer from 8 to 512 (albert_tiny's positions), got '$SEQ_LENGTH'" >&2; exit 2
fi
albert_check_places "OUTPUT_DIR=${OUTPUT_DIR:-./output/pretrain_quickstart}" || exit 2
OUT="$(realpath -m "${OUTPUT_DIR:-./output/pretrain_quickstart}")"
DATA="$OUT/data"
LOGS="$OUT/logs"
# Before any data is rewritten: a run training in OUTPUT_DIR, or another quick start still making its data there,
# would otherwise find its data replaced under it (and evaluate on the new data).
albert_launch_check in_use --output_dir "$OUT" || exit 2
mkdir -p "$DATA" "$LOGS"
albert_hold_launch_lock "$LOGS/.quickstart.lock" || exit 2
echo "quick start: writing into $OUT (logs: $LOGS)"

run "$LOGS/data.log" "$PYTHON" -m src.sample_corpus --output_file "$DATA/corpus.txt" --overwrite true
run "$LOGS/data.log" "$PYTHON" -m src.spm_train --input_file "$DATA/corpus.txt" --model_prefix "$DATA/spm" \
  --vocab_size 2000 --overwrite true
for split in train eval; do
  if [[ $split == train ]]; then dupe=5; seed=12345; else dupe=1; seed=54321; fi
  run "$LOGS/data.log" "$PYTHON" -m src.create_pretraining_data --input_file "$DATA/corpus.txt" \
    --output_file "$DATA/$split.mindrecord" --spm_model_file "$DATA/spm.model" --max_seq_length "$SEQ_LENGTH" \
    --max_predictions_per_seq 20 --dupe_factor "$dupe" --random_seed "$seed" --progress false --overwrite true
done
run "$LOGS/pretrain.log" "$PYTHON" run_pretrain.py --data_dir "$DATA/train.mindrecord" --output_dir "$OUT" \
  --device_target "$DEVICE_TARGET" --device_id "$DEVICE_ID" --albert_network albert_tiny \
  --train_steps "$TRAIN_STEPS" --batch_size 32 --log_steps 20 --optimizer Lamb \
  --optimizer_cfg.Lamb.learning_rate 0.005 --optimizer_cfg.Lamb.warmup_steps $((TRAIN_STEPS / 10)) \
  --save_checkpoint_steps "$TRAIN_STEPS" --load_checkpoint_path "" --save_checkpoint_num 1 "$@"
CKPT="$OUT/checkpoints/albert_pretrain-$TRAIN_STEPS.ckpt"
run "$LOGS/eval.log" "$PYTHON" pretrain_eval.py --eval_data_dir "$DATA/eval.mindrecord" --eval_ckpt "$CKPT" \
  --output_dir "$OUT" --device_target "$DEVICE_TARGET" --device_id "$DEVICE_ID"
run "$LOGS/plot.log" "$PYTHON" -m src.plot_metrics "$OUT/metrics.jsonl" --output "$OUT/curves.png"

cat <<DONE

quick start finished; everything is in $OUT:
  corpus and vocabulary  $DATA/corpus.txt  $DATA/spm.model
  pretraining data       $DATA/train.mindrecord  $DATA/eval.mindrecord
  network config         $OUT/albert_config.json
  checkpoint             $CKPT
  training metrics       $OUT/metrics.jsonl  (curves: $OUT/curves.png)
  evaluation             $OUT/pretrain_eval.json
  logs                   $LOGS
DONE
