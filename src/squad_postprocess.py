"""The SQuAD scoring command under ModelZoo's name, `python -m src.squad_postprocess` (and its import path); the
scoring lives in src/tasks/squad_metrics.py."""
import os
import sys
from typing import List

if not __package__:  # run as a file (python src/TOOL.py): import from the project root, as `python -m` does
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from model_utils.errors import run_cli
from src.tasks import squad_metrics
from src.tasks.squad_metrics import *  # noqa: F401,F403


def main(argv: List[str]) -> int:
    """The command (its log is squad_postprocess.log, as before the code moved)."""
    return squad_metrics.main(argv)


if __name__ == "__main__":
    sys.exit(run_cli(main))
