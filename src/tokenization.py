"""ModelZoo's import path of the tokenizers (`from src.tokenization import FullTokenizer`); the code lives in src/data/tokenization.py."""
from src.data.tokenization import *  # noqa: F401,F403
