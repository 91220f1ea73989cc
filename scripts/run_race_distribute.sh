#!/usr/bin/env bash
# Data-parallel fine-tuning / evaluation / prediction of ALBERT on RACE multiple choice (msrun or mpirun),
# in the foreground; exits with the job's exit code. Usage: bash scripts/run_race_distribute.sh -h
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
albert_finetune_main distribute race "$@"
