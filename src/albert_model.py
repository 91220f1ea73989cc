"""ModelZoo's import path of the ALBERT network (`from src.albert_model import AlbertConfig, AlbertModel`); the code lives in src/model/albert.py."""
from src.model.albert import *  # noqa: F401,F403
