"""`python -m src.convert_checkpoint`: HF or TF ALBERT weights -> a MindSpore checkpoint (and the import path of
earlier releases); the conversion lives in src/conversion/convert_checkpoint.py."""
import sys

from src.conversion.convert_checkpoint import *  # noqa: F401,F403
from src.conversion.convert_checkpoint import main
from model_utils.errors import run_cli

if __name__ == "__main__":
    sys.exit(run_cli(main))
