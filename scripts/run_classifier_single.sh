#!/usr/bin/env bash
# Fine-tune / evaluate / predict ALBERT on GLUE / LCQMC classification or STS-B regression on one device, in the foreground;
# exits with the job's exit code. Usage: bash scripts/run_classifier_single.sh -h
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
albert_finetune_main single classifier "$@"
