# Shared by scripts/run_*_single.sh and scripts/run_*_distribute.sh; sourced by them, never run on its own.
#
#   albert_run_single LOG_FILE SCRIPT [flags...]
#       python ROOT/SCRIPT flags in the foreground, output also appended to LOG_FILE; returns the job's exit code.
#   albert_run_distributed DEVICE_NUM OUTPUT_DIR SCRIPT [flags...]
#       DEVICE_NUM x NNODES workers of python ROOT/SCRIPT --distribute true --device_num W --device_target T flags,
#       started by msrun or mpirun (environment: albert_launcher_help); returns the launcher's exit code.
#   albert_finetune_main single|distribute TASK "$@"
#       the whole of scripts/run_<TASK>_{single,distribute}.sh (TASK: classifier, race, squad_v1, squad_v2).
#
# Commands run in the caller's current directory (the python scripts are named by absolute path), so relative
# paths in flags mean what they mean to the user.

ALBERT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# The environment section of every *_distribute.sh usage.
albert_launcher_help() {
  cat <<'HELP'
Environment:
  DEVICE_TARGET  auto | CPU | GPU | Ascend (default auto)
  LAUNCHER       msrun | mpirun (default: mpirun with NCCL when DEVICE_TARGET=GPU, msrun otherwise;
                 msrun works on every target, mpirun needs GPU or Ascend)
  NNODES         machines in the job (default 1). With msrun, start this script once on each machine, each
                 with its own NODE_RANK and the same MASTER_ADDR/MASTER_PORT. With mpirun, start it once, on one
                 machine, with HOSTFILE naming all NNODES machines: mpirun starts the workers on the others.
  NODE_RANK      this machine's index, 0 .. NNODES-1 (default 0; msrun)
  MASTER_ADDR    address of the machine with NODE_RANK 0 (default 127.0.0.1; msrun)
  MASTER_PORT    free TCP port on that machine (default 8118; msrun)
  HOSTFILE       mpirun host file listing the machines (needed by mpirun when NNODES > 1; DEVICE_NUM workers
                 are placed on each)
  PYTHON         python interpreter for mpirun (default python; msrun starts the python on PATH)
  DRY_RUN=1      print the launch command instead of running it
Logs: OUTPUT_DIR/logs/ (msrun: one worker_N.log per worker; mpirun: one folder per rank); the script prints it.
HELP
}

# albert_run_single LOG_FILE SCRIPT [flags...]: echo the command, run it with its output also appended to
# LOG_FILE, return its exit code.
albert_run_single() {
  local log="$1" script="$2" status=0
  shift 2
  local cmd=("${PYTHON:-python}" "$ALBERT_ROOT/$script" "$@")
  mkdir -p "$(dirname "$log")"
  echo "logs: $log"
  echo "+ ${cmd[*]}" | tee -a "$log"
  { "${cmd[@]}" 2>&1 | tee -a "$log"; status=${PIPESTATUS[0]}; } || true
  return "$status"
}

# albert_run_distributed DEVICE_NUM OUTPUT_DIR SCRIPT [flags...]: build the msrun/mpirun command for ROOT/SCRIPT
# with --distribute true --device_num W --device_target T before the flags; print it (DRY_RUN=1) or run it in the
# foreground with the launcher's output in OUTPUT_DIR/logs/launcher_node<NODE_RANK>.log. Returns the exit code
# (2 for a bad DEVICE_NUM or launcher setting).
albert_run_distributed() {
  local device_num="$1" out="$2" script="$3" status=0
  shift 3
  if ! [[ "$device_num" =~ ^[1-9][0-9]*$ ]]; then
    echo "error: DEVICE_NUM must be a positive integer, got '$device_num'" >&2; return 2
  fi
  local target="${DEVICE_TARGET:-auto}" nnodes="${NNODES:-1}" node_rank="${NODE_RANK:-0}"
  local launcher="${LAUNCHER:-}"
  if ! [[ "$nnodes" =~ ^[1-9][0-9]*$ ]]; then
    echo "error: NNODES must be a positive integer, got '$nnodes'" >&2; return 2
  fi
  if [[ -z "$launcher" ]]; then
    if [[ "$target" == GPU ]]; then launcher=mpirun; else launcher=msrun; fi
  fi
  local workers=$((device_num * nnodes)) logs="$out/logs"
  local args=(--distribute true --device_num "$workers" --device_target "$target" "$@")
  local cmd
  case "$launcher" in
    msrun)
      cmd=(msrun --worker_num="$workers" --local_worker_num="$device_num" --master_addr="${MASTER_ADDR:-127.0.0.1}"
           --master_port="${MASTER_PORT:-8118}" --node_rank="$node_rank" --log_dir="$logs/msrun_node$node_rank"
           --join=True "$ALBERT_ROOT/$script" "${args[@]}")
      ;;
    mpirun)
      if [[ "$target" != GPU && "$target" != Ascend ]]; then
        echo "error: LAUNCHER=mpirun needs DEVICE_TARGET=GPU or Ascend; use LAUNCHER=msrun on CPU" >&2; return 2
      fi
      if [[ "$nnodes" -gt 1 && -z "${HOSTFILE:-}" ]]; then
        echo "error: LAUNCHER=mpirun with NNODES=$nnodes needs HOSTFILE (the machines mpirun starts workers on)" >&2
        return 2
      fi
      cmd=(mpirun -n "$workers")
      if [[ -n "${HOSTFILE:-}" ]]; then cmd+=(--hostfile "$HOSTFILE" --map-by "ppr:$device_num:node"); fi
      cmd+=(--output-filename "$logs/mpirun" --merge-stderr-to-stdout "${PYTHON:-python}" "$ALBERT_ROOT/$script"
            "${args[@]}")
      ;;
    *)
      echo "error: LAUNCHER must be msrun or mpirun, got '$launcher'" >&2; return 2
      ;;
  esac
  if [[ "${DRY_RUN:-0}" == 1 ]]; then printf '%q ' "${cmd[@]}"; echo; return 0; fi
  mkdir -p "$logs"
  echo "logs: $logs (this node's launcher output: $logs/launcher_node$node_rank.log)"
  { "${cmd[@]}" 2>&1 | tee "$logs/launcher_node$node_rank.log"; status=${PIPESTATUS[0]}; } || true
  return "$status"
}

# What differs between the fine-tuning tasks: their script, data and flags, for the usage texts.
albert_task_info() {
  TASK_SCRIPT="run_$1.py"
  case "$1" in
    classifier)
      TASK_WHAT="GLUE / LCQMC sentence (pair) classification or STS-B regression"
      TASK_FLAGS="  --num_class N                    the data's label count (1 = STS-B regression; default 2)
  --assessment_method M            accuracy | f1 | macro_f1 | mcc | spearman_correlation | pearson_correlation"
      TASK_DATA="python -m src.create_finetune_data --task_name mrpc --data_dir glue/MRPC --split train \\
      --spm_model_file 30k-clean.model --output_file data/mrpc_train.mindrecord      (again with --split dev)"
      TASK_EXAMPLE="--train_data_file_path data/mrpc_train.mindrecord \\
      --eval_data_file_path data/mrpc_dev.mindrecord --load_pretrain_checkpoint_path albert_base_v2.ckpt \\
      --num_class 2 --assessment_method f1 --train_batch_size 32 --epoch_num 3"
      ;;
    race)
      TASK_WHAT="RACE multiple-choice reading comprehension"
      TASK_FLAGS="  --num_class 4                    choices per question (must match the data)"
      TASK_DATA="python -m src.create_finetune_data --task_name race --data_dir RACE --split train \\
      --max_seq_length 512 --spm_model_file 30k-clean.model --output_file data/race_train.mindrecord   (and dev)"
      TASK_EXAMPLE="--train_data_file_path data/race_train.mindrecord \\
      --eval_data_file_path data/race_dev.mindrecord --load_pretrain_checkpoint_path albert_base_v2.ckpt \\
      --train_batch_size 8 --epoch_num 2"
      ;;
    squad_v1|squad_v2)
      local version=1.1 negative=false file=v1.1 name=squad1
      if [[ "$1" == squad_v2 ]]; then version=2.0 negative=true file=v2.0 name=squad2; fi
      TASK_WHAT="SQuAD v$version extractive question answering"
      TASK_FLAGS="  --eval_json_path FILE            the SQuAD json the eval data was made from: do_eval scores against it
  --n_best_size N --max_answer_length N"
      if [[ "$1" == squad_v2 ]]; then
        TASK_FLAGS+="
  --null_score_diff_threshold X    answer \"\" above this null score (eval_results.json suggests best_f1_thresh)"
      fi
      TASK_DATA="python -m src.create_squad_data --input_file train-$file.json --is_training true \\
      --version_2_with_negative $negative --spm_model_file 30k-clean.model --output_file data/${name}_train.mindrecord
  python -m src.create_squad_data --input_file dev-$file.json --is_training false \\
      --version_2_with_negative $negative --spm_model_file 30k-clean.model --output_file data/${name}_dev.mindrecord"
      TASK_EXAMPLE="--train_data_file_path data/${name}_train.mindrecord \\
      --eval_data_file_path data/${name}_dev.mindrecord --eval_json_path dev-$file.json \\
      --load_pretrain_checkpoint_path albert_base_v2.ckpt --train_batch_size 48 --epoch_num 2"
      ;;
    *)
      echo "internal error: unknown fine-tuning task '$1'" >&2; return 2
      ;;
  esac
}

albert_finetune_usage() {
  local mode="$1" task="$2"
  albert_task_info "$task"
  if [[ "$mode" == single ]]; then
    cat <<USAGE
usage: bash scripts/run_${task}_single.sh OUTPUT_DIR [$TASK_SCRIPT flags...]

$TASK_WHAT on one device, in the foreground; exits with the job's exit
code. Runs
  python $TASK_SCRIPT --output_dir OUTPUT_DIR --device_target \$DEVICE_TARGET --device_id \$DEVICE_ID [flags]
with its output also in OUTPUT_DIR/logs/$task.log. Relative paths are relative to your current directory.
USAGE
  else
    cat <<USAGE
usage: bash scripts/run_${task}_distribute.sh DEVICE_NUM OUTPUT_DIR [$TASK_SCRIPT flags...]

$TASK_WHAT, data parallel, in the foreground; exits with the job's exit code.
Starts DEVICE_NUM workers on this machine (times NNODES machines), each running
  $TASK_SCRIPT --distribute true --device_num DEVICE_NUM*NNODES --output_dir OUTPUT_DIR [flags]
Training: every worker reads its own disjoint share of each epoch's rows and gradients are averaged, so the
weights stay identical; train_batch_size is per worker (the global batch is DEVICE_NUM x NNODES times it).
Evaluation/prediction: the workers split the rows and rank 0 writes the results for all of them.
Relative paths are relative to your current directory.
USAGE
  fi
  cat <<USAGE

Main flags (every key of task_${task}_config.yaml is a flag; python $TASK_SCRIPT --help lists them all):
  --do_train / --do_eval / --do_predict true|false     what to do (defaults: train and eval)
  --train_data_file_path FILE      training MindRecord
  --eval_data_file_path FILE       evaluation MindRecord (with labels)
  --predict_data_file_path FILE    MindRecord to predict on (OUTPUT_DIR/predict/)
  --load_pretrain_checkpoint_path CKPT    pretrained weights to fine-tune (run_pretrain.py or src.convert_checkpoint)
  --load_finetune_checkpoint_path CKPT    fine-tuned weights to evaluate/predict with, with --do_train false
$TASK_FLAGS
  --train_batch_size N --epoch_num N | --train_steps N --optimizer_cfg.AdamWeightDecay.learning_rate LR
Outputs: OUTPUT_DIR/checkpoints/, metrics.jsonl, eval/eval_results.json and predictions, predict/.

Example (from the repository root):
  $TASK_DATA
  python -m src.convert_checkpoint --src hf --input albert-base-v2/ --output albert_base_v2.ckpt
USAGE
  if [[ "$mode" == single ]]; then
    echo "  bash scripts/run_${task}_single.sh output/$task $TASK_EXAMPLE"
    cat <<'USAGE'

Environment:
  DEVICE_TARGET  auto | CPU | GPU | Ascend (default auto: the best device present)
  DEVICE_ID      device to use on GPU/Ascend (default 0)
  PYTHON         python interpreter (default python)
USAGE
  else
    echo "  bash scripts/run_${task}_distribute.sh 8 output/$task $TASK_EXAMPLE"
    echo
    albert_launcher_help
  fi
}

# albert_finetune_main single|distribute TASK "$@": the whole of a fine-tuning wrapper script.
albert_finetune_main() {
  local mode="$1" task="$2"
  shift 2
  local needed=1
  if [[ "$mode" == distribute ]]; then needed=2; fi
  if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then albert_finetune_usage "$mode" "$task"; exit 0; fi
  if [[ $# -lt $needed ]]; then albert_finetune_usage "$mode" "$task" >&2; exit 2; fi
  albert_task_info "$task"
  if [[ "$mode" == single ]]; then
    local out
    out="$(realpath -m "$1")"
    shift
    albert_run_single "$out/logs/$task.log" "$TASK_SCRIPT" --output_dir "$out" \
      --device_target "${DEVICE_TARGET:-auto}" --device_id "${DEVICE_ID:-0}" "$@"
  else
    local device_num="$1" out
    out="$(realpath -m "$2")"
    shift 2
    albert_run_distributed "$device_num" "$out" "$TASK_SCRIPT" --output_dir "$out" "$@"
  fi
}
