"""Shared test fixtures: the project root on sys.path, the real test assets and MindSpore's execution mode."""
import gc
import signal
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT.parent / "shared" / "assets"

if str(ROOT) not in sys.path:  # before the import below: test code imports its helpers as tests.<module>
    sys.path.insert(0, str(ROOT))

from tests.ci_skips import pytest_addoption, pytest_report_header, pytest_runtest_makereport  # noqa: E402,F401


_last_module = None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    """At each module's first test, collect and then freeze what is alive (gc.freeze): MindSpore runs gc.collect()
    before compiling every graph (mindspore/graph/api.py), and in a process holding torch, transformers, OpenVINO and
    the earlier modules' imports each such collection walked every one of those objects again (0.2-0.3 s per graph:
    three quarters of the kernels' tests' time in the full suite). Frozen objects are still freed by reference
    counting; only cycles among them outlive the module that dropped them."""
    global _last_module
    if item.path != _last_module:
        _last_module = item.path
        gc.collect()
        gc.freeze()


@pytest.fixture
def stop_signals_as_started():
    """SIGINT and SIGTERM as a freshly started Python has them for one test (Python's Ctrl-C handler, SIGTERM's
    default, neither blocked), the worker's own afterwards. Tests that stop a command by a signal need it: an earlier
    test's library may leave them otherwise in the worker (MindSpore's runtime installs C handlers behind Python's
    back), and an ignored or blocked signal also passes to the subprocesses a test starts. In one full suite
    (2026-12-06) two such tests failed as a worker with SIGINT blocked or ignored makes them fail (exit 0 instead of
    130; a job never interrupted); a warning names what this finds."""
    stops = (signal.SIGINT, signal.SIGTERM)
    blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
    handlers = {number: signal.getsignal(number) for number in stops}
    found = [f"{signal.Signals(number).name} blocked" for number in stops if number in blocked]
    found += [f"{signal.Signals(number).name} ignored" for number, handler in handlers.items()
              if handler == signal.SIG_IGN]
    if found:
        warnings.warn(f"this worker had {', '.join(found)}; reset for the test")
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        yield
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


@pytest.fixture(scope="session")
def assets() -> Path:
    """Folder of real third-party test data; tests that need it skip when it is absent (fail in CI: ci_skips.py)."""
    if not ASSETS.is_dir():
        pytest.skip(f"test assets not found at {ASSETS} (they live in ../shared/assets beside the project)")
    return ASSETS


@pytest.fixture(scope="session")
def project_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def spm_path(assets) -> str:
    """The official ALBERT English SentencePiece model."""
    return str(assets / "tokenizer" / "albert_30k-clean.model")


@pytest.fixture(scope="session")
def tokenizer(spm_path):
    from src.data.tokenization import FullTokenizer
    return FullTokenizer(None, True, spm_path)


@pytest.fixture(scope="session")
def hf(spm_path):
    """HF's slow SentencePiece AlbertTokenizer on the same model: the reference for token ids."""
    transformers = pytest.importorskip("transformers")
    return transformers.AlbertTokenizer(vocab_file=spm_path, do_lower_case=True, keep_accents=False)


@pytest.fixture(scope="session")
def data(tmp_path_factory):
    """Small pretraining MindRecord files (train, eval) made by the package's own data tools."""
    from tests.pretrain_helpers import make_pretraining_data
    return make_pretraining_data(tmp_path_factory.mktemp("pretrain_data"))


@pytest.fixture(scope="module")
def graph_mode():
    """MindSpore GRAPH mode for a whole module, PyNative afterwards (the mode the other modules expect).

    A module opts in with `pytestmark = pytest.mark.usefixtures("graph_mode")`; module scope, so that the
    module's own module-scoped fixtures build their cells in GRAPH mode too."""
    import mindspore as ms

    ms.set_context(mode=ms.GRAPH_MODE)
    yield
    ms.set_context(mode=ms.PYNATIVE_MODE)


@pytest.fixture
def graph_mode_each_test():
    """MindSpore GRAPH mode for one test, then back to the mode it found: for modules whose tests switch modes
    themselves (opt in with `pytestmark = pytest.mark.usefixtures("graph_mode_each_test")`)."""
    import mindspore as ms

    previous = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE)
    yield
    ms.set_context(mode=previous)
