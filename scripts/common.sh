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
# paths in flags mean what they mean to the user. Their output is logged here (with MindSpore's C++ lines, which
# Python cannot see): ALBERT_LOG_TEED=1 tells the python commands not to write their own log as well
# (src/common/run_log.py).

ALBERT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The python commands this script starts directly stop (SIGTERM) when it dies: a scheduler that stops the script
# alone left them running on, detached (model_utils/signals.py, stop_with_script).
export ALBERT_SCRIPT_PID=$$

# The environment section of every *_distribute.sh usage.
albert_launcher_help() {
  cat <<'HELP'
Environment:
  DEVICE_TARGET  auto | CPU | GPU | Ascend (default auto)
  LAUNCHER       msrun | mpirun (default msrun, on every target). mpirun (Open MPI 4.x; GPU or Ascend only) is
                 started with --allow-run-as-root when root, -x for PATH, LD_LIBRARY_PATH, PYTHONPATH, CUDA_HOME,
                 NCCL_SOCKET_IFNAME, NCCL_DEBUG, GLOG_v and ALBERT_LOG_TEED where set, and --bind-to none
  MPI_IF_INCLUDE interfaces or subnets mpirun's own traffic may use (eth1, 10.0.0.0/24; comma-separated): passed
                 as --mca oob_tcp_if_include and --mca btl_tcp_if_include (NCCL_SOCKET_IFNAME does it for NCCL)
  NNODES         machines in the job (default 1). With msrun, start this script once on each machine, each
                 with its own NODE_RANK and the same MASTER_ADDR/MASTER_PORT. With mpirun, start it once, on one
                 machine, with HOSTFILE naming all NNODES machines: mpirun starts the workers on the others.
  NODE_RANK      this machine's index, 0 .. NNODES-1 (default 0; msrun)
  MASTER_ADDR    address of the machine with NODE_RANK 0 (default 127.0.0.1; msrun)
  MASTER_PORT    free TCP port on that machine (default 8118; msrun)
  CLUSTER_TIMEOUT  seconds for all nodes to join (default 300; msrun --cluster_time_out): a node whose peers or
                 scheduler do not appear in time stops with one error line
  NODE_TIMEOUT   seconds without a sign of life before a worker or node counts as failed (default 30; MindSpore's
                 MS_NODE_TIMEOUT, also the longest a worker waits for its peers in a gradient all-reduce): a
                 failed worker or node stops the job on every node within about NODE_TIMEOUT + 5 s
  HOSTFILE       mpirun host file listing the machines (needed by mpirun when NNODES > 1; DEVICE_NUM workers
                 are placed on each)
  PYTHON         python interpreter for mpirun and the launch checks (default python; msrun starts the python
                 on PATH)
  DRY_RUN=1      print the launch command instead of running it
Logs: OUTPUT_DIR/logs/ (msrun: one worker_N.log per worker; mpirun: one folder per rank); the script prints it.
On failure (msrun) the script ends with one line naming the failed rank or node and its log; running the same
command again on every node resumes from the newest checkpoint (keep OUTPUT_DIR on storage all nodes share).
HELP
}

# albert_launch_check preflight|in_use|explain [flags]: src/devices/distributed_launch.py (no MindSpore import) checks
# an msrun setup and whether OUTPUT_DIR is in use before the launch, and names the failed rank or node after a
# failed job.
albert_launch_check() {
  "${PYTHON:-python}" "$ALBERT_ROOT/src/devices/distributed_launch.py" "$@"
}

# albert_check_mpirun: MindSpore's MPI support is built against Open MPI 4.x (libmpi.so.40); say so before a launch
# with another MPI fails in every worker.
albert_check_mpirun() {
  local version
  if ! command -v mpirun >/dev/null 2>&1; then
    echo "error: LAUNCHER=mpirun but there is no mpirun on PATH (install Open MPI 4.x, or use LAUNCHER=msrun)" >&2
    return 1
  fi
  version="$(mpirun --version 2>&1 | head -n 1)"
  if ! [[ "$version" =~ Open\ MPI\)?\ 4\. || "$version" =~ OpenRTE\)?\ 4\. ]]; then
    echo "error: LAUNCHER=mpirun needs Open MPI 4.x, found '$version' (or use LAUNCHER=msrun)" >&2
    return 1
  fi
}

# albert_check_places NAME=VALUE...: the positional arguments before the flags. One that starts with '--' means the
# flags came first (realpath would call it an unrecognized option); an OUTPUT_DIR that is a file cannot become the
# run's folder. Returns 2 with one line.
albert_check_places() {
  local pair name value
  for pair in "$@"; do
    name="${pair%%=*}"; value="${pair#*=}"
    if [[ "$value" == --* ]]; then
      echo "error: $name comes before the flags, got '$value' (see --help)" >&2; return 2
    fi
    if [[ "$name" == OUTPUT_DIR && -e "$value" && ! -d "$value" ]]; then
      echo "error: OUTPUT_DIR $value is a file, not a folder" >&2; return 2
    fi
  done
}

# albert_check_flags FLAG=PLACE... -- ARGS...: the flags after the script's arguments. A first one that is no flag
# (ModelZoo's DEVICE_ID EPOCH_SIZE DATA_DIR ... order) failed in Python after OUTPUT_DIR/logs was made; a flag the
# script sets from its argument PLACE, given again, won in Python while the logs went by the first (one run in two
# folders). Returns 2 with one line.
albert_check_flags() {
  local pairs=() arg pair
  while [[ "$1" != -- ]]; do pairs+=("$1"); shift; done
  shift
  if [[ $# -gt 0 && "$1" != --* ]]; then
    echo "error: '$1' is no flag: after its arguments the script takes only flags (see --help)" >&2; return 2
  fi
  for arg in "$@"; do
    for pair in "${pairs[@]}"; do
      if [[ "$arg" == "${pair%%=*}" || "$arg" == "${pair%%=*}="* ]]; then
        echo "error: ${pair%%=*} is ${pair#*=}, the script's argument: drop the flag (see --help)" >&2; return 2
      fi
    done
  done
}

# albert_move_aside PATH: rename PATH, when there is one, to the first free PATH.previous, PATH.previous-1, ...: the
# logs of an earlier start (a failed run's, which its error line named) are kept, never overwritten.
albert_move_aside() {
  [[ -e "$1" || -L "$1" ]] || return 0
  local aside="$1.previous" n=0
  while [[ -e "$aside" || -L "$aside" ]]; do n=$((n + 1)); aside="$1.previous-$n"; done
  mv -- "$1" "$aside"
}

# albert_hold_launch_lock LOCK_FILE: hold an exclusive lock on LOCK_FILE while this script and the job it starts
# live (the fd is inherited): the workers take OUTPUT_DIR's own lock only once the cluster has formed (the quick
# start's training only after its data is made), so a second start on the same OUTPUT_DIR would otherwise move the
# first one's logs aside (rewrite its data) meanwhile.
albert_hold_launch_lock() {
  command -v flock >/dev/null 2>&1 || return 0
  exec {ALBERT_LAUNCH_LOCK}>>"$1"
  if ! flock -n "$ALBERT_LAUNCH_LOCK"; then
    echo "error: another start is launching into $(dirname "$(dirname "$1")") (lock $1): wait for" \
         "it to end, or use another OUTPUT_DIR" >&2
    return 2
  fi
}

# albert_log_file LOG_FILE: return 2 with one line when LOG_FILE is a symbolic link, or exists as anything but a
# regular file: a log is never written through a link planted where it goes (its target would get the output).
albert_log_file() {
  if [[ -L "$1" || ( -e "$1" && ! -f "$1" ) ]]; then
    echo "error: $1 is a symbolic link or not a regular file: a log file is never opened through one; remove it" >&2
    return 2
  fi
}

# albert_run_single LOG_FILE SCRIPT [flags...]: echo the command, run it with its output also appended to
# LOG_FILE, return its exit code.
albert_run_single() {
  local log="$1" script="$2" status=0
  shift 2
  local cmd=("${PYTHON:-python}" "$ALBERT_ROOT/$script" "$@")
  albert_log_file "$log" || return 2
  mkdir -p "$(dirname "$log")"
  echo "logs: $log"
  echo "+ ${cmd[*]}" | tee -a "$log"
  { ALBERT_LOG_TEED=1 "${cmd[@]}" 2>&1 | tee -ia "$log"; status=${PIPESTATUS[0]}; } || true
  return "$status"
}

# albert_run_distributed DEVICE_NUM OUTPUT_DIR SCRIPT [flags...]: build the msrun/mpirun command for ROOT/SCRIPT
# with --distribute true --device_num W --device_target T before the flags; print it (DRY_RUN=1) or run it in the
# foreground with the launcher's output in OUTPUT_DIR/logs/launcher_node<NODE_RANK>.log. Returns the exit code
# (2 for a bad DEVICE_NUM, launcher or network setting). A failed msrun job ends with one line naming the failed
# rank or node (albert_launch_check explain).
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
  [[ -n "$launcher" ]] || launcher=msrun
  export ALBERT_LOG_TEED=1  # the workers' output is in the launcher's logs
  local workers=$((device_num * nnodes)) logs="$out/logs"
  local args=(--distribute true --device_num "$workers" --device_target "$target" "$@")
  local cmd env=() settings=()
  case "$launcher" in
    msrun)
      local node_timeout="${NODE_TIMEOUT:-${MS_NODE_TIMEOUT:-30}}" cluster_timeout="${CLUSTER_TIMEOUT:-300}"
      settings=(--nnodes "$nnodes" --node_rank "$node_rank" --master_addr "${MASTER_ADDR:-127.0.0.1}"
                --master_port "${MASTER_PORT:-8118}" --cluster_timeout "$cluster_timeout" --node_timeout "$node_timeout")
      albert_launch_check preflight --offline "${settings[@]}" || return 2
      env=("MS_NODE_TIMEOUT=$node_timeout")
      # --tail_worker_log=-2 (no worker): this script shows the worker logs itself (albert_follow_msrun).
      cmd=(msrun --worker_num="$workers" --local_worker_num="$device_num" --master_addr="${MASTER_ADDR:-127.0.0.1}"
           --master_port="${MASTER_PORT:-8118}" --node_rank="$node_rank" --log_dir="$logs/msrun_node$node_rank"
           --join=True --cluster_time_out="$cluster_timeout" --tail_worker_log=-2 "$ALBERT_ROOT/$script" "${args[@]}")
      ;;
    mpirun)
      if [[ "$target" != GPU && "$target" != Ascend ]]; then
        echo "error: LAUNCHER=mpirun needs DEVICE_TARGET=GPU or Ascend; use LAUNCHER=msrun on CPU" >&2; return 2
      fi
      if [[ "$nnodes" -gt 1 && -z "${HOSTFILE:-}" ]]; then
        echo "error: LAUNCHER=mpirun with NNODES=$nnodes needs HOSTFILE (the machines mpirun starts workers on)" >&2
        return 2
      fi
      [[ "${DRY_RUN:-0}" == 1 ]] || albert_check_mpirun || return 2
      cmd=(mpirun -n "$workers")
      # GPU containers often run as root; other machines get this shell's environment (CUDA, the interpreter's
      # libraries); no core binding (each worker runs data-pipeline threads besides its device).
      if [[ "$(id -u)" == 0 ]]; then cmd+=(--allow-run-as-root); fi
      local name
      for name in PATH LD_LIBRARY_PATH PYTHONPATH CUDA_HOME NCCL_SOCKET_IFNAME NCCL_DEBUG GLOG_v ALBERT_LOG_TEED; do
        if [[ -n "${!name:-}" ]]; then cmd+=(-x "$name"); fi
      done
      cmd+=(--bind-to none)
      # Open MPI uses every interface unless told: MPI_IF_INCLUDE keeps its launch (oob) and transport (btl) traffic on
      # the given interfaces or subnets.
      if [[ -n "${MPI_IF_INCLUDE:-}" ]]; then
        cmd+=(--mca oob_tcp_if_include "$MPI_IF_INCLUDE" --mca btl_tcp_if_include "$MPI_IF_INCLUDE")
      fi
      if [[ -n "${HOSTFILE:-}" ]]; then cmd+=(--hostfile "$HOSTFILE" --map-by "ppr:$device_num:node"); fi
      cmd+=(--output-filename "$logs/mpirun" --merge-stderr-to-stdout "${PYTHON:-python}" "$ALBERT_ROOT/$script"
            "${args[@]}")
      ;;
    *)
      echo "error: LAUNCHER must be msrun or mpirun, got '$launcher'" >&2; return 2
      ;;
  esac
  if [[ "${DRY_RUN:-0}" == 1 ]]; then printf '%q ' "${env[@]}" "${cmd[@]}"; echo; return 0; fi
  albert_launch_check in_use --output_dir "$out" || return 2  # before this start moves any log aside
  albert_log_file "$logs/launcher_node$node_rank.log" || return 2
  if [[ "$launcher" == mpirun ]]; then
    mkdir -p "$logs"
    albert_hold_launch_lock "$logs/.launcher_node$node_rank.lock" || return 2
    albert_move_aside "$logs/launcher_node$node_rank.log"
    echo "logs: $logs (this node's launcher output: $logs/launcher_node$node_rank.log)"
    { "${cmd[@]}" 2>&1 | tee -i "$logs/launcher_node$node_rank.log"; status=${PIPESTATUS[0]}; } || true
    return "$status"
  fi
  albert_launch_check preflight "${settings[@]}" || return 2
  mkdir -p "$logs"
  albert_hold_launch_lock "$logs/.launcher_node$node_rank.lock" || return 2
  echo "logs: $logs (this node's launcher output: $logs/launcher_node$node_rank.log)"
  albert_follow_msrun "$logs" "$node_rank" "$device_num" "${env[@]}" "${cmd[@]}" && status=0 || status=$?
  if [[ "$status" == 130 || "$status" == 143 ]]; then
    echo "error: stopped by a signal: this node's workers were stopped and the other nodes stop within" \
         "NODE_TIMEOUT. To continue, run the same command again on every node to resume from the newest checkpoint" >&2
  elif [[ "$status" != 0 ]]; then
    albert_launch_check explain "${settings[@]}" --logs "$logs" --device_num "$device_num" --status "$status" || true
  fi
  return "$status"
}

# albert_follow_msrun LOGS NODE_RANK DEVICE_NUM NAME=VALUE MSRUN_COMMAND...: run msrun in the background (with the
# variable set and ALBERT_LAUNCHER_PID, which its workers check; stopped if this script dies, see distributed_launch.py
# with_parent) and its output in LOGS/launcher_node<K>.log; show
# that log and this node's worker logs here until msrun exits. msrun's own `tail -f` of the worker logs would
# outlive a killed msrun and hold this script forever. Returns msrun's exit code (130 after Ctrl-C, 143 after
# SIGTERM or SIGHUP, which is passed on to msrun: its workers die with it).
albert_follow_msrun() {
  local logs="$1" node_rank="$2" device_num="$3" variable="$4" pid status=0 stopped=0 i
  shift 4
  local launcher_log="$logs/launcher_node$node_rank.log" workers=()
  for ((i = node_rank * device_num; i < (node_rank + 1) * device_num; i++)); do
    workers+=("$logs/msrun_node$node_rank/worker_$i.log")
  done
  # An earlier start's logs (checked before: not those of a job still running here) are kept aside; `tail` would
  # show their old lines first, and msrun would rewrite them.
  albert_move_aside "$launcher_log"
  albert_move_aside "$logs/msrun_node$node_rank"
  local script_pid=$BASHPID  # msrun's parent: msrun is stopped when it dies (even by SIGKILL)
  (export ALBERT_LAUNCHER_PID="$BASHPID" "$variable"
   exec "${PYTHON:-python}" "$ALBERT_ROOT/src/devices/distributed_launch.py" with_parent "$script_pid" "$@"
  ) >"$launcher_log" 2>&1 &
  pid=$!
  trap 'stopped=130' INT  # the terminal's Ctrl-C reaches msrun too: it stops its workers and exits
  trap 'stopped=143; kill -TERM "$pid" 2>/dev/null' TERM HUP
  tail -q -n +1 -F --pid="$pid" "$launcher_log" "${workers[@]}" 2>/dev/null | albert_console_filter &
  local follower=$!
  while :; do
    wait "$pid" 2>/dev/null && status=0 || status=$?  # 2>/dev/null: no "Killed" job notice
    kill -0 "$pid" 2>/dev/null || break  # still running: the wait was cut short by a signal
  done
  wait "$follower" 2>/dev/null || true
  trap - INT TERM HUP
  if [[ "$stopped" != 0 ]]; then return "$stopped"; fi
  return "$status"
}

# albert_console_filter: the terminal's copy of a job's output, without msrun's closing traceback (the script's
# own error line replaces it; the launcher log keeps it) and msrun's warnings about the worker logs it does not tail.
albert_console_filter() {
  # Line by line in the shell: awk (mawk) reads a pipe in blocks, which held the output back for seconds and lost it
  # to a Ctrl-C.
  local line held="" holding=0
  while IFS= read -r line || [[ -n "$line" ]]; do
    [[ "$line" == *--tail_worker_log* ]] && continue
    if [[ "$line" == "Traceback (most recent call last):"* ]]; then held="$line"; holding=1; continue; fi
    if ((holding)); then
      held+=$'\n'"$line"
      if [[ "$line" =~ ^[A-Za-z_][A-Za-z0-9_.]*(Error|Exception|Interrupt)(:|$) ]]; then
        [[ "$line" == "RuntimeError: Distributed job exited with exception"* ]] || printf '%s\n' "$held"
        holding=0
      fi
      continue
    fi
    printf '%s\n' "$line"
  done
  if ((holding)); then printf '%s\n' "$held"; fi
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
    albert_check_places "OUTPUT_DIR=$1" || exit 2
    albert_check_flags --output_dir=OUTPUT_DIR -- "${@:2}" || exit 2
    out="$(realpath -m "$1")"
    shift
    albert_run_single "$out/logs/$task.log" "$TASK_SCRIPT" --output_dir "$out" \
      --device_target "${DEVICE_TARGET:-auto}" --device_id "${DEVICE_ID:-0}" "$@"
  else
    local device_num="$1" out
    albert_check_places "DEVICE_NUM=$1" "OUTPUT_DIR=$2" || exit 2
    albert_check_flags --output_dir=OUTPUT_DIR --device_num=DEVICE_NUM -- "${@:3}" || exit 2
    out="$(realpath -m "$2")"
    shift 2
    albert_run_distributed "$device_num" "$out" "$TASK_SCRIPT" --output_dir "$out" "$@"
  fi
}
