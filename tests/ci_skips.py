"""In CI a test that cannot run for want of the test assets, the compiled CPU kernels, a test dependency or network
namespaces fails.

Why: locally those skips are a convenience (no ../shared beside the clone, no C++ compiler), but in CI they would
hide much of the suite behind an "s" (the assets alone gate over a third of it). CI always has ../shared/assets,
a compiler (.ci/run installs one) and requirements-dev.txt, so such a skip there means the suite did not prove what
it claims.

CI mode is `CI=true` (or 1/yes, as CI services set it) or `pytest --ci`. Skips with other reasons (a GPU-only
test on CPU, say) stay skips. tests/conftest.py imports these hooks; tests/test_ci_skips.py checks them.
"""
import os

import pytest

# Skip reasons that are failures in CI: the conftest `assets` fixture and the module-level skipifs on the assets,
# test_cpu_kernels.py / test_model_parity.py on the kernels, pytest.importorskip on a missing dependency,
# test_multi_machine.py without network namespaces (CI runs as root; .ci/run installs iproute2).
MUST_RUN_IN_CI = ("test assets not found", "compiled CPU kernels unavailable", "could not import",
                  "multi-machine tests use network namespaces")


def pytest_addoption(parser) -> None:
    parser.addoption("--ci", action="store_true", default=False,
                     help="fail (not skip) tests that lack the test assets, the compiled CPU kernels or a test "
                          "dependency; also on with the environment variable CI=true")


def ci_environment() -> bool:
    """CI=true (or 1/yes) in the environment, as CI services and .ci/run set it."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def ci_mode(config) -> bool:
    return config.getoption("--ci") or ci_environment()


def _reason(report) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or hasattr(report, "wasxfail") or not ci_mode(item.config):
        return
    reason = _reason(report)
    if any(marker in reason for marker in MUST_RUN_IN_CI):
        report.outcome = "failed"
        report.longrepr = f"skipped, but CI must run it (CI mode: CI=true or --ci): {reason}"


def pytest_report_header(config) -> str:
    if ci_mode(config):
        return f"CI mode: skips for {', '.join(repr(m) for m in MUST_RUN_IN_CI)} are failures"
    return ""
