"""`python -m src.convert_checkpoint`: HF or TF ALBERT weights -> a MindSpore checkpoint (and the import path of
earlier releases); the conversion lives in src/conversion/convert_checkpoint.py."""
import sys
from typing import List

from model_utils.errors import run_cli
from src.conversion import convert_checkpoint
from src.conversion.convert_checkpoint import *  # noqa: F401,F403


def main(argv: List[str]) -> int:
    """The command (its log is convert_checkpoint.log)."""
    return convert_checkpoint.main(argv)


if __name__ == "__main__":
    sys.exit(run_cli(main))
