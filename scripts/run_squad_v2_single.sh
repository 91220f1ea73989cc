#!/usr/bin/env bash
# Fine-tune / evaluate / predict ALBERT on SQuAD v2.0 question answering on one device, in the foreground;
# exits with the job's exit code. Usage: bash scripts/run_squad_v2_single.sh -h
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
albert_finetune_main single squad_v2 "$@"
