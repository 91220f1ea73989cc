"""ModelZoo's import path of the MindDataset pipelines (`from src.dataset import ...`); the code lives in src/data/pipelines.py."""
from src.data.pipelines import *  # noqa: F401,F403
