"""tests/ci_skips.py: in CI mode a skip for want of assets, kernels or a dependency fails; other skips stay skips.

The hooks run in a separate pytest on a throw-away test file, so the outcome counts are pytest's own."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
SAMPLE = '''
import pytest

def test_assets():
    pytest.skip("test assets not found at /nowhere/shared/assets")

def test_kernels():
    pytest.skip("compiled CPU kernels unavailable: no C++ compiler (g++ or c++) on PATH")

def test_dependency():
    pytest.importorskip("no_such_module_for_ci_skips")

@pytest.mark.skipif(True, reason="test assets not found at /nowhere")
def test_skipif_on_assets():
    pass

def test_gpu_only():
    pytest.skip("needs a GPU")

@pytest.mark.xfail(reason="test assets not found, but expected to fail")
def test_xfail():
    assert False

def test_passes():
    pass
'''


def outcomes(tmp_path: Path, ci_env: str, *flags: str):
    """({outcome: count} of pytest's summary line, its output) for a run of SAMPLE with only ci_skips loaded."""
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    env = {**os.environ, "PYTHONPATH": str(TESTS), "CI": ci_env}
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "ci_skips", "-q", "-rfE", "-p", "no:cacheprovider",
                             "--rootdir", str(tmp_path), "-c", os.devnull, *flags, str(tmp_path)],
                            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    summary = result.stdout.strip().splitlines()[-1]
    return {word: int(count) for count, word in re.findall(r"(\d+) (\w+)", summary)}, result.stdout


@pytest.mark.parametrize("ci_env, flags", [("true", []), ("1", []), ("", ["--ci"])], ids=["CI=true", "CI=1", "--ci"])
def test_ci_mode_fails_skips_for_assets_kernels_and_dependencies(tmp_path, ci_env, flags):
    counts, output = outcomes(tmp_path, ci_env, *flags)
    # The skipif is reported at setup, so it fails as an error; the GPU skip and the xfail stay as they were.
    assert counts == {"failed": 3, "error": 1, "passed": 1, "skipped": 1, "xfailed": 1}, output
    failed = {line.split("::")[1].split()[0] for line in output.splitlines()
              if line.startswith(("FAILED", "ERROR")) and "skipped, but CI must run it" in line}
    assert failed == {"test_assets", "test_kernels", "test_dependency", "test_skipif_on_assets"}, output


def test_outside_ci_they_are_skips(tmp_path):
    counts, output = outcomes(tmp_path, "false")
    assert counts == {"passed": 1, "skipped": 5, "xfailed": 1}, output
