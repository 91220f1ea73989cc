"""`python -m src.convert_checkpoint`: HF or TF ALBERT weights -> a MindSpore checkpoint (and the import path of
earlier releases); the conversion lives in src/conversion/convert_checkpoint.py."""
import os
import sys
from typing import List

if not __package__:  # run as a file (python src/TOOL.py): import from the project root, as `python -m` does
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from model_utils.errors import run_cli
from src.conversion import convert_checkpoint
from src.conversion.convert_checkpoint import *  # noqa: F401,F403


def main(argv: List[str]) -> int:
    """The command (its log is convert_checkpoint.log)."""
    return convert_checkpoint.main(argv)


if __name__ == "__main__":
    sys.exit(run_cli(main))
