"""Helpers for the pretraining tests that run the entry points as subprocesses."""
import json
import os
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np
import pytest

from src.data import schema

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
ENV = dict(os.environ, GLOG_v="3", PYTHONUNBUFFERED="1")  # GLOG_v=3: MindSpore logs errors only
# A tiny network (embedding 16 != hidden 32) and small batches keep each run to a few seconds.
TINY = ["--albert_network", "albert_tiny", "--net_cfg.hidden_size", "32", "--net_cfg.embedding_size", "16",
        "--net_cfg.num_hidden_layers", "2", "--net_cfg.num_attention_heads", "2", "--net_cfg.intermediate_size", "64",
        "--batch_size", "8", "--device_target", "CPU"]


# A run long enough to be killed mid-way: accumulation, Lamb, loss scaling with its own state, 2 kept checkpoints.
RESUME_RUN = ["--train_steps", "300", "--log_steps", "1", "--save_checkpoint_steps", "40", "--save_checkpoint_num",
              "2", "--accumulation_steps", "2", "--optimizer", "Lamb", "--optimizer_cfg.Lamb.learning_rate", "3e-3",
              "--optimizer_cfg.Lamb.warmup_steps", "30", "--loss_scale_value", "65536", "--scale_window", "50"]


def pretrain(data: Dict[str, Path], out: Path, *extra: str) -> List[str]:
    """run_pretrain.py's arguments for the tiny network on `data["train"]`, writing into `out`."""
    return ["run_pretrain.py", "--data_dir", str(data["train"]), "--output_dir", str(out), *TINY, *extra]


def run(args: List[str], timeout: int = 300, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable] + args, cwd=ROOT, env=ENV, capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def run_together(commands: Sequence[List[str]], timeout: int = 300) -> List[subprocess.CompletedProcess]:
    """`run` for independent commands, two at a time: a tiny network's run keeps about one core busy (mostly graph
    compilation), so two of them share a 2-core machine in about the time of one."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(lambda args: run(args, timeout), commands))


def tool(module: str, args: Sequence) -> None:
    """Run a data tool (`python -m src.<module> args`) inside the test process, through the same `main(argv)` its
    command line calls: the data other tests build on, without a MindSpore start-up (~2 s) per file. The tools'
    command lines themselves (exit codes, one-line errors, kills) are tested as subprocesses in test_create_*.py
    and test_crash_safety.py."""
    from importlib import import_module

    assert import_module(f"src.{module}").main([str(arg) for arg in args]) == 0, (module, args)


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def one_line_error(result: subprocess.CompletedProcess, *parts: str) -> str:
    """Check that `result` failed as a user error (exit 2, one `error:` line, no traceback) naming all `parts`."""
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    for part in parts:
        assert part in errors[0], errors[0]
    return errors[0]


def bash(args, env_extra: Dict[str, str] = None, timeout: int = 600, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """A scripts/*.sh run as a user would: this test's python as PYTHON and first on PATH (msrun starts the
    `python` on PATH)."""
    env = dict(ENV, PYTHON=sys.executable, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    env.update(env_extra or {})
    return subprocess.run(["bash"] + [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def free_port() -> int:
    """A TCP port free right now, for msrun's MASTER_PORT (each distributed test takes its own)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def distributed_digests(logs: Path) -> List[str]:
    """The `rank R: final weights sha256 ...` lines of every msrun worker log under `logs`, sorted by rank."""
    lines = [line for log in sorted(logs.glob("**/worker_*.log")) for line in log.read_text().splitlines()
             if "final weights sha256" in line]
    return sorted(lines)


def weights(path: Path, prefixes: Sequence[str] = ("albert.", "predictions.", "sop_classifier.")
            ) -> Dict[str, np.ndarray]:
    """The network weights of a checkpoint (names starting with `prefixes`; no optimizer state)."""
    import mindspore as ms

    return {name: value.asnumpy() for name, value in ms.load_checkpoint(str(path)).items()
            if name.startswith(tuple(prefixes))}


def flip_tensor_bytes(source: Path, target: Path, count: int = 512) -> None:
    """Copy `source` to `target` with `count` bytes inverted in the middle of the word embedding table's bytes."""
    import mindspore as ms

    table = ms.load_checkpoint(str(source))["albert.embeddings.word_embeddings.embedding_table"].asnumpy()
    data = bytearray(source.read_bytes())
    start = data.find(np.ascontiguousarray(table).tobytes()[:256]) + table.nbytes // 2
    assert start > table.nbytes // 2, "the table's bytes were not found in the file"
    data[start:start + count] = bytes(b ^ 0xFF for b in data[start:start + count])
    target.write_bytes(bytes(data))


def metrics_by_step(path: Path) -> Dict[int, dict]:
    rows: Dict[int, dict] = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        rows[row["step"]] = row  # a resumed run re-logs steps after its checkpoint: the newest row wins
    return rows


def tensorboard(folder: Path):
    """The summaries in `folder` as TensorBoard reads them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    return events


def check_curves(folder: Path, rows: Dict[int, dict], keys=("loss", "mlm_loss", "sop_loss", "lr", "loss_scale",
                                                             "overflow_count", "samples_per_s", "tokens_per_s")):
    """OUTPUT_DIR/tensorboard holds train/<key> once at every step of metrics.jsonl, with its value; a value that
    is no finite number (null in metrics.jsonl) is not logged."""
    events = tensorboard(folder / "tensorboard")
    for key in keys:
        finite = {step: row[key] for step, row in rows.items() if row[key] is not None}
        logged = [(event.step, event.value) for event in events.Scalars(f"train/{key}")]
        assert [step for step, _ in logged] == sorted(finite), key
        for step, value in logged:
            assert value == pytest.approx(finite[step], rel=1e-6), (key, step)
    return events


def digest(stdout: str) -> str:
    return next(line.split()[-1] for line in stdout.splitlines() if "final weights sha256" in line)


def make_pretraining_data(folder: Path) -> Dict[str, Path]:
    """Pretraining data at seq 32 from the pydoc corpus with a 1000-piece vocabulary."""
    tool("sample_corpus", ["--output_file", folder / "corpus.txt"])
    tool("spm_train", ["--input_file", folder / "corpus.txt", "--model_prefix", folder / "spm", "--vocab_size", "1000"])
    for split, seed in (("train", "1"), ("eval", "2")):
        tool("create_pretraining_data", ["--input_file", folder / "corpus.txt", "--output_file",
                                         folder / f"{split}.mindrecord", "--spm_model_file", folder / "spm.model",
                                         "--max_seq_length", "32", "--max_predictions_per_seq", "5", "--dupe_factor",
                                         "1", "--random_seed", seed, "--progress", "false"])
    return {"train": folder / "train.mindrecord", "eval": folder / "eval.mindrecord", "folder": folder}


def pretraining_records(data) -> List[bytes]:
    """The records of a pretraining MindRecord data set (a file, a folder or a part), in file order, each as the bytes
    of its columns in create_pretraining_data's order: data sets that must agree are compared record by record."""
    import mindspore.dataset as ds

    import dataset

    files = dataset.resolve_mindrecord_files(data)
    rows = ds.MindDataset(files, shuffle=False).create_dict_iterator(output_numpy=True, num_epochs=1)
    return [b"".join(np.asarray(row[name]).tobytes() for name in schema.PRETRAINING.names) for row in rows]
