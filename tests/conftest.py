"""Shared test fixtures: the project root on sys.path and the real test assets."""
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT.parent / "shared" / "assets"

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def assets() -> Path:
    """Folder of real third-party test data; tests that need it skip when it is absent."""
    if not ASSETS.is_dir():
        pytest.skip(f"test assets not found at {ASSETS} (they live in ../shared/assets beside the project)")
    return ASSETS


@pytest.fixture(scope="session")
def project_root() -> Path:
    return ROOT
