"""The SQuAD scoring command under ModelZoo's name, `python -m src.squad_postprocess` (and its import path); the
scoring lives in src/tasks/squad_metrics.py."""
import sys

from src.tasks.squad_metrics import *  # noqa: F401,F403
from src.tasks.squad_metrics import main
from model_utils.errors import run_cli

if __name__ == "__main__":
    sys.exit(run_cli(main))
