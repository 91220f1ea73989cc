"""Data parallel across machines (scripts/run_*_distribute.sh with msrun, NNODES/NODE_RANK/MASTER_ADDR), on CPU.

Machines are Linux network namespaces joined by a bridge (tests/machines.py; root only, skipped elsewhere with the
reason); the file system is shared, as a cluster's shared storage for data and checkpoints would be. Checked:
- 2 machines x 1 worker end with the weights of 1 machine x 2 workers (bit-identical) and, on rows with equal
  masked-token counts, of one process on the combined batch (float rounding); a third machine started with a
  NODE_RANK already in use is refused with one line and does not disturb the job; in bfloat16 (CPUs with native
  bfloat16), 2 workers match one process within 10x float32's tolerance;
- SQuAD v1.1 fine-tuning on 2 machines: evaluation gathered to rank 0 writes the files one process writes;
- failures: a worker killed mid-step, a node's launcher killed, then both machines killed: every process on every
  machine stops (non-zero, within 60 s), each script names the failed rank or node and its log, no checkpoint is
  half-written, and the same commands resume to the uninterrupted run's weights and losses, bit for bit;
- a bad network setup fails with one line within its stated time (CLUSTER_TIMEOUT), never hangs.
"""
import itertools
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence

import numpy as np
import pytest

from tests.finetune_helpers import TINY_FINETUNE, make_squad
from src.model import cpu_kernels
from tests.machines import Machines, machines, unavailable
from tests.pretrain_helpers import (ENV, SCRIPTS, TINY, bash, distributed_digests, free_port, metrics_by_step, ok, run,
                              tool, weights)

PRETRAIN = SCRIPTS / "run_pretrain_distribute.sh"
SQUAD = SCRIPTS / "run_squad_v1_distribute.sh"
RESUME_HINT = "To continue, run the same command again on every node to resume from the newest checkpoint"
PORTS = itertools.count(18118)  # namespaces have their own ports; a new one per job keeps TIME_WAIT out of the way


class Node(NamedTuple):
    code: int
    out: str
    err: str
    seconds: float  # from start (or from `since`) to exit


@pytest.fixture(scope="module")
def cluster():
    why = unavailable()
    if why:
        pytest.skip(f"multi-machine tests use network namespaces: {why}")
    with machines(3) as made:
        yield made


def node_env(cluster: Machines, node_rank: int, port: int, **extra: str) -> Dict[str, str]:
    """A user's environment on a node: this python first on PATH (msrun starts `python`), the job's settings."""
    return {**ENV, "PYTHON": sys.executable, "PATH": f"{Path(sys.executable).parent}:{ENV['PATH']}",
            "DEVICE_TARGET": "CPU", "NNODES": "2", "NODE_RANK": str(node_rank), "MASTER_ADDR": cluster.addresses[0],
            "MASTER_PORT": str(port), **extra}


class Job:
    """One command started on several machines at once (`machine_ranks`: machine index -> NODE_RANK)."""

    def __init__(self, cluster: Machines, work: Path, args: Sequence, machine_ranks: Dict[int, int] = None,
                 port: Optional[int] = None, cwd: Optional[Dict[int, Path]] = None, **env: str):
        """`work` is every machine's current directory unless `cwd` names another for a machine."""
        self.cluster, self.port = cluster, port or next(PORTS)
        self.machine_ranks = machine_ranks or {0: 0, 1: 1}
        self.started = time.monotonic()
        self.logs = {m: work / f"node{m}-{int(self.started * 1000)}.txt" for m in self.machine_ranks}
        self.procs = {m: cluster.popen(m, ["bash", *args], self.logs[m], cwd=(cwd or {}).get(m, work),
                                       env=node_env(cluster, rank, self.port, **env))
                      for m, rank in self.machine_ranks.items()}

    def wait(self, timeout: float = 300, since: Optional[float] = None) -> Dict[int, Node]:
        results = {}
        for machine, proc in self.procs.items():
            proc.wait(timeout=max(1.0, timeout - (time.monotonic() - self.started)))
            results[machine] = Node(proc.returncode, self.logs[machine].read_text(),
                                    Path(f"{self.logs[machine]}.err").read_text(),
                                    time.monotonic() - (since or self.started))
        return results

    def child(self, machine: int, matches) -> int:
        """The pid of the first process under this job's script on `machine` for which `matches(process)`."""
        import psutil

        for proc in psutil.Process(self.procs[machine].pid).children(recursive=True):
            try:
                if matches(proc):
                    return proc.pid
            except psutil.NoSuchProcess:
                continue
        raise AssertionError(f"no such process under the job on machine {machine}")


def wait_for_line(path: Path, pattern: str, timeout: float = 240, job: Optional[Job] = None) -> str:
    """The first line of `path` matching `pattern` (polled; fails after `timeout` s or when the job ended)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        found = re.search(pattern, text, re.M)
        if found:
            return found.group(0)
        if job and any(proc.poll() is not None for proc in job.procs.values()):
            raise AssertionError(f"the job ended before {pattern!r} appeared in {path}: "
                                 + "".join(n.err[-1500:] for n in job.wait(timeout=30).values()))
        time.sleep(0.05)
    raise AssertionError(f"{pattern!r} did not appear in {path} within {timeout} s")


def error_lines(node: Node) -> List[str]:
    return [line for line in node.err.splitlines() if line.startswith("error: ")]


def assert_one_line(node: Node, *parts: str) -> str:
    """The node failed with exactly one `error:` line, naming every part, and no traceback of ours or msrun's."""
    assert node.code != 0, node.out[-2000:]
    lines = error_lines(node)
    assert len(lines) == 1, node.err[-3000:]
    assert "Traceback" not in node.err + node.out, node.out[-3000:] + node.err[-3000:]
    for part in parts:
        assert part in lines[0], (part, lines[0])
    return lines[0]


# ---------------------------------------------------------------------------------------------------------------
# Pretraining: 2 machines x 1 worker = 1 machine x 2 workers = one process on the combined batch.

# decay_steps fixed: the learning rate of a step does not depend on the run's length, so the 5-step runs and the
# 60-step run on two machines (also the uninterrupted reference of the failure test) agree at step 5.
DP_RUN = ["--train_steps", "5", "--log_steps", "1", "--save_checkpoint_steps", "5", "--optimizer", "Lamb",
          "--optimizer_cfg.Lamb.learning_rate", "1e-3", "--optimizer_cfg.Lamb.warmup_steps", "0",
          "--optimizer_cfg.Lamb.decay_steps", "100", "--enable_lossscale", "false"]
MACHINES_RUN = [*DP_RUN, "--train_steps", "60", "--save_checkpoint_num", "20"]


@pytest.fixture(scope="module")
def uniform_data(data, tmp_path_factory) -> Path:
    """Rows that all carry exactly 5 masked tokens (no short sequences, masking rate 0.5), so that the mean
    masked-LM loss of a batch of 16 equals the mean of its two halves' means: data parallel must then match one
    process on the combined batch up to float rounding."""
    output = tmp_path_factory.mktemp("uniform") / "uniform.mindrecord"
    tool("create_pretraining_data", ["--input_file", data["folder"] / "corpus.txt", "--output_file", output,
                                     "--spm_model_file", data["folder"] / "spm.model", "--max_seq_length", "32",
                                     "--max_predictions_per_seq", "5", "--masked_lm_prob", "0.5",
                                     "--short_seq_prob", "0", "--dupe_factor", "1", "--progress", "false"])
    from src.data.pipelines import create_pretraining_dataset
    rows = create_pretraining_dataset(output, batch_size=100000, shuffle=False, drop_remainder=False)
    weights_per_row = next(rows.create_tuple_iterator(output_numpy=True))[6].sum(-1)
    assert (weights_per_row == 5).mean() > 0.99
    return output


@pytest.fixture(scope="module")
def one_process(uniform_data, tmp_path_factory) -> Path:
    """One process on batch 16: its final checkpoint."""
    out = tmp_path_factory.mktemp("one_process")
    single = ok(run(["run_pretrain.py", "--data_dir", str(uniform_data), "--output_dir", str(out), *TINY, *DP_RUN,
                     "--batch_size", "16"]))
    assert "1 worker(s)" in single.stdout
    return out / "checkpoints" / "albert_pretrain-5.ckpt"


@pytest.fixture(scope="module")
def two_workers(uniform_data, tmp_path_factory) -> Path:
    """1 machine x 2 workers of batch 8 (msrun on loopback): the output folder."""
    out = tmp_path_factory.mktemp("two_workers")
    ok(bash([PRETRAIN, 2, uniform_data, out, *TINY, *DP_RUN], {"DEVICE_TARGET": "CPU",
                                                               "MASTER_PORT": str(free_port())}))
    return out


@pytest.fixture(scope="module")
def two_workers_accumulating(uniform_data, tmp_path_factory) -> Path:
    """1 machine x 2 workers of batch 4 with accumulation_steps 2 (16 rows per optimizer step, as one_process)."""
    out = tmp_path_factory.mktemp("two_workers_accumulating")
    ok(bash([PRETRAIN, 2, uniform_data, out, *TINY, *DP_RUN, "--batch_size", "4", "--accumulation_steps", "2"],
            {"DEVICE_TARGET": "CPU", "MASTER_PORT": str(free_port())}))
    return out


class MachinesRun(NamedTuple):
    work: Path  # the current directory of both nodes; the job wrote into work/dp
    nodes: Dict[int, Node]
    intruder: Node


@pytest.fixture(scope="module")
def two_machines(cluster, uniform_data, tmp_path_factory) -> MachinesRun:
    """2 machines x 1 worker for 60 steps; once the job runs, a third machine starts with NODE_RANK 1 too."""
    work = tmp_path_factory.mktemp("two_machines")
    job = Job(cluster, work, [PRETRAIN, 1, uniform_data, "dp", *TINY, *MACHINES_RUN])
    wait_for_line(work / "dp" / "logs" / "msrun_node0" / "worker_0.log", r"^plan: ", job=job)
    intruder = Job(cluster, work, [PRETRAIN, 1, uniform_data, "intruder", *TINY, *MACHINES_RUN], {2: 1}, job.port)
    return MachinesRun(work, job.wait(), intruder.wait(timeout=120)[2])


def assert_replicas_agree(logs: Path) -> str:
    """Ranks 0 and 1 printed the same final weights digest; returns it."""
    digests = distributed_digests(logs)
    assert [line.split(":")[0].split()[-1] for line in digests] == ["0", "1"], digests
    assert len({line.split()[-1] for line in digests}) == 1, digests
    return digests[0].split()[-1]


@pytest.mark.slow
def test_two_msrun_workers_stay_identical_and_match_one_process_on_the_combined_batch(two_workers, one_process):
    assert_replicas_agree(two_workers / "logs")
    ours = weights(two_workers / "checkpoints" / "albert_pretrain-5.ckpt")
    reference = weights(one_process)
    for name in reference:  # 5 Lamb steps of lr 1e-3 move the weights by ~5e-3 of their norm; rounding ~1e-7
        np.testing.assert_allclose(ours[name], reference[name], rtol=1e-4, atol=2e-6, err_msg=name)


BF16 = [pytest.mark.skipif(not cpu_kernels.available(), reason="compiled CPU kernels unavailable"),
        pytest.mark.skipif(not cpu_kernels.bf16_support()[0], reason=cpu_kernels.bf16_support()[1] or "bf16")]


@pytest.mark.slow
@BF16[0]
@BF16[1]
def test_two_msrun_workers_in_bfloat16_match_one_process_on_the_combined_batch(uniform_data, tmp_path):
    """compute_type bfloat16 (the kernels' bfloat16 products): the workers stay identical, and each row's products
    are rounded as one process rounds them, so only the float32 sums' order differs from one process."""
    bf16 = ["--net_cfg.compute_type", "bfloat16"]
    ok(run(["run_pretrain.py", "--data_dir", str(uniform_data), "--output_dir", str(tmp_path / "one"), *TINY, *DP_RUN,
            *bf16, "--batch_size", "16"]))
    ok(bash([PRETRAIN, 2, uniform_data, tmp_path / "two", *TINY, *DP_RUN, *bf16],
            {"DEVICE_TARGET": "CPU", "MASTER_PORT": str(free_port())}))
    assert_replicas_agree(tmp_path / "two" / "logs")
    ours = weights(tmp_path / "two" / "checkpoints" / "albert_pretrain-5.ckpt")
    reference = weights(tmp_path / "one" / "checkpoints" / "albert_pretrain-5.ckpt")
    for name in reference:  # 10x float32's tolerance (above); the largest difference measured 0.38 of it
        np.testing.assert_allclose(ours[name], reference[name], rtol=1e-3, atol=2e-5, err_msg=name)


@pytest.mark.slow
def test_data_parallel_with_gradient_accumulation_matches_one_process(two_workers_accumulating, one_process):
    """The all-reduce inside the accumulation window's conditional branch: 2 workers x 2 micro-batches of 4 rows
    read the 16 rows one process reads per step, so the weights must agree."""
    assert_replicas_agree(two_workers_accumulating / "logs")
    ours = weights(two_workers_accumulating / "checkpoints" / "albert_pretrain-5.ckpt")
    reference = weights(one_process)
    for name in reference:
        np.testing.assert_allclose(ours[name], reference[name], rtol=1e-4, atol=2e-6, err_msg=name)


@pytest.mark.slow
def test_two_machines_end_with_the_weights_of_two_local_workers(cluster, two_machines, two_workers, one_process):
    for node in two_machines.nodes.values():
        assert node.code == 0, node.out[-3000:] + node.err[-3000:]
    assert "device: CPU (2 worker(s))" in two_machines.nodes[0].out
    assert_replicas_agree(two_machines.work / "dp" / "logs")
    ours = weights(two_machines.work / "dp" / "checkpoints" / "albert_pretrain-5.ckpt")
    local = weights(two_workers / "checkpoints" / "albert_pretrain-5.ckpt")
    reference = weights(one_process)
    for name in reference:  # the same ring all-reduce over a network as over loopback: the same bits
        assert np.array_equal(ours[name], local[name]), name
        np.testing.assert_allclose(ours[name], reference[name], rtol=1e-4, atol=2e-6, err_msg=name)
    assert cluster.pids(0) == [] and cluster.pids(1) == [] and cluster.pids(2) == []


@pytest.mark.slow
def test_a_second_node_with_the_same_node_rank_is_refused_in_one_line(two_machines):
    assert_one_line(two_machines.intruder, "rank 1 on node 1 stopped with: another worker already joined the job as "
                                           "rank 1: two nodes were started with the same NODE_RANK", "Correct that")
    assert all(node.code == 0 for node in two_machines.nodes.values())  # the job itself went on


# ---------------------------------------------------------------------------------------------------------------
# SQuAD v1.1 fine-tuning across machines, evaluation gathered to rank 0.

@pytest.mark.slow
def test_squad_v1_on_two_machines_evaluates_as_one_process(cluster, assets, tmp_path):
    data = make_squad(tmp_path, "1.1", paragraphs=2, seq=64)
    flags = [*TINY_FINETUNE, "--train_data_file_path", data["train"].name, "--eval_data_file_path",
             data["dev"].name, "--eval_json_path", data["dev_json"].name, "--eval_batch_size", "8",
             "--train_batch_size", "4", "--train_steps", "4", "--log_steps", "1",
             "--net_cfg.hidden_dropout_prob", "0", "--net_cfg.attention_probs_dropout_prob", "0"]
    nodes = Job(cluster, tmp_path, [SQUAD, 1, "dp", *flags]).wait()
    for node in nodes.values():
        assert node.code == 0, node.out[-3000:] + node.err[-3000:]
    assert_replicas_agree(tmp_path / "dp" / "logs")
    results = (tmp_path / "dp" / "eval" / "eval_results.json").read_text()
    assert '"devices": 2' in results
    alone = ok(bash([SCRIPTS / "run_squad_v1_single.sh", "alone", *flags, "--do_train", "false",
                     "--load_finetune_checkpoint_path", "dp/checkpoints/albert_squad_v1-4.ckpt"],
                    {"DEVICE_TARGET": "CPU"}, cwd=tmp_path))
    assert f"with {tmp_path / 'dp' / 'checkpoints' / 'albert_squad_v1-4.ckpt'}" in alone.stdout
    for name in ("predictions.json", "nbest_predictions.json"):  # rank 0 wrote every question's answer
        assert (tmp_path / "dp" / "eval" / name).read_bytes() == (tmp_path / "alone" / "eval" / name).read_bytes()


# ---------------------------------------------------------------------------------------------------------------
# Failures and resume.

DETECTED_WITHIN = 60  # seconds: every other process on every machine has exited after a failure
QUICK = {"NODE_TIMEOUT": "15"}  # failures noticed in ~NODE_TIMEOUT + 5 s (measured ~36 s with the default 30)


def assert_whole_checkpoints(folder: Path) -> List[int]:
    """Every file under a checkpoint's name reads back whole (a cut-short write keeps its temporary name)."""
    from src.common.checkpoint_io import read_checkpoint

    steps = []
    for path in sorted(folder.glob("albert_pretrain-*.ckpt")):
        assert read_checkpoint(str(path)), path
        steps.append(int(path.stem.split("-")[1]))
    return sorted(steps)


def assert_nothing_left(cluster: Machines, grace: float = 10) -> None:
    """No process runs on either machine (a killed process may take a moment to be gone)."""
    deadline = time.monotonic() + grace
    while (cluster.pids(0) or cluster.pids(1)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for machine in (0, 1):
        assert cluster.pids(machine) == [], f"processes left on machine {machine}: {cluster.pids(machine)}"


def start_and_run_until(cluster: Machines, work: Path, command: Sequence, steps: int) -> Job:
    """The job started on both machines, run until rank 0 logged `steps` optimizer steps beyond where it resumed."""
    rank0_log = work / "out" / "logs" / "msrun_node0" / "worker_0.log"
    rank0_log.unlink(missing_ok=True)  # a previous run's lines must not count
    job = Job(cluster, work, command, **QUICK)
    wait_for_line(rank0_log, r"^step \d+/", job=job)  # by then the log says where the run resumed, if it did
    resumed = re.search(r"^resumed from .*: optimizer step (\d+) of", rank0_log.read_text(), re.M)
    wait_for_line(rank0_log, rf"^step {(int(resumed.group(1)) if resumed else 0) + steps}/", job=job)
    return job


@pytest.mark.slow
def test_failures_stop_every_node_and_the_same_commands_resume_bit_identically(cluster, two_machines,
                                                                               uniform_data, tmp_path):
    """The uninterrupted run is the fixture's; here the same job (checkpoints every 5 steps) is killed three times
    and resumed."""
    command = [PRETRAIN, 1, uniform_data, "out", *TINY, *MACHINES_RUN]
    out = tmp_path / "out"
    checkpoints, worker_log = out / "checkpoints", f"{out}/logs/msrun_node1/worker_1.log"

    # 1. A worker killed mid-step (rank 1, on machine 1): both machines stop, each naming rank 1 and its log.
    job = start_and_run_until(cluster, tmp_path, command, 12)
    killed_at = time.monotonic()
    os.kill(job.child(1, lambda p: p.environ().get("MS_ROLE") == "MS_WORKER"), signal.SIGKILL)
    nodes = job.wait(since=killed_at)
    assert_one_line(nodes[1], f"rank 1 on node 1 was killed by SIGKILL; log: {worker_log}.", RESUME_HINT)
    assert_one_line(nodes[0], "rank 1 on node 1 stopped answering the scheduler",
                    f"log: {worker_log} on node 1.", RESUME_HINT)
    assert max(node.seconds for node in nodes.values()) < DETECTED_WITHIN, nodes
    assert_nothing_left(cluster)
    assert assert_whole_checkpoints(checkpoints)[-1] >= 10

    # 2. Resumed, then node 0's launcher (msrun, with the scheduler) killed: node 1 names node 0.
    job = start_and_run_until(cluster, tmp_path, command, 12)
    killed_at = time.monotonic()
    os.kill(job.child(0, lambda p: p.name() == "msrun"), signal.SIGKILL)
    nodes = job.wait(since=killed_at)
    assert_one_line(nodes[0], "this node's launcher (msrun) was killed by SIGKILL", RESUME_HINT)
    assert_one_line(nodes[1], f"node 0 (MASTER_ADDR {cluster.addresses[0]}, which runs the scheduler) stopped or "
                              f"became unreachable; log: {out}/logs/launcher_node0.log on node 0.", RESUME_HINT)
    assert max(node.seconds for node in nodes.values()) < DETECTED_WITHIN, nodes
    assert_nothing_left(cluster)
    newest = assert_whole_checkpoints(checkpoints)[-1]
    assert newest >= 20

    # Node 1 started in another directory, so "out" is another folder there (as without shared storage): rank 1
    # would start from scratch while rank 0 resumes. Both refuse in one line before any step.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    nodes = Job(cluster, tmp_path, command, cwd={1: elsewhere}, **QUICK).wait()
    for machine, node in nodes.items():
        assert_one_line(node, f"rank {machine} on node {machine} stopped with: the ranks would resume from "
                              f"different steps (rank 0: micro-step {newest}, rank 1: micro-step 0): every node must "
                              f"see the same checkpoints in ", "Correct that")
    assert not (elsewhere / "out" / "checkpoints").exists() and assert_whole_checkpoints(checkpoints)[-1] == newest

    # 3. Resumed, then both machines lose every process at once (a power cut).
    job = start_and_run_until(cluster, tmp_path, command, 6)
    cluster.kill_all(0)
    cluster.kill_all(1)
    job.wait(timeout=60)
    assert_nothing_left(cluster)
    assert assert_whole_checkpoints(checkpoints)[-1] > newest

    # 4. The same commands once more: they finish where the uninterrupted run finished, bit for bit.
    nodes = Job(cluster, tmp_path, command, **QUICK).wait()
    assert all(node.code == 0 for node in nodes.values()), nodes[0].err[-3000:] + nodes[1].err[-3000:]
    assert "resumed from" in nodes[0].out
    reference = two_machines.work / "dp"
    assert assert_replicas_agree(out / "logs") == assert_replicas_agree(reference / "logs")
    expected, got = metrics_by_step(reference / "metrics.jsonl"), metrics_by_step(out / "metrics.jsonl")
    assert sorted(got) == sorted(expected) == list(range(1, 61))
    for step in expected:
        for key in ("loss", "mlm_loss", "sop_loss", "lr", "loss_scale", "overflow_count"):
            assert got[step][key] == expected[step][key], (step, key)


# ---------------------------------------------------------------------------------------------------------------
# A bad network setup: one line, within the stated time, never a hang.

class Launched:
    """The pretraining script started on one machine with `env` over a 2-node setup, writing into `out`."""

    def __init__(self, cluster: Machines, machine: int, work: Path, out: str, port: int, data: Path, **env: str):
        self.started = time.monotonic()
        self.proc = subprocess.Popen(cluster.command(machine, ["bash", PRETRAIN, 1, data, work / out, *TINY]),
                                     env=node_env(cluster, int(env.pop("NODE_RANK")), port, **env), cwd=work,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def wait(self, timeout: float = 120) -> Node:
        out, err = self.proc.communicate(timeout=timeout)
        return Node(self.proc.returncode, out, err, time.monotonic() - self.started)


def test_settings_are_checked_before_anything_starts(tmp_path):
    """No machines needed: the checks that use no network, also under DRY_RUN."""
    cases = [({"NNODES": "2", "NODE_RANK": "2"},
              "NODE_RANK is 2 but NNODES is 2: the nodes are numbered 0 .. 1, each started with its own NODE_RANK"),
             ({"NODE_RANK": "-1"}, "NODE_RANK must be an integer 0 .. 99999, got '-1'"),
             ({"MASTER_PORT": "80"}, "MASTER_PORT must be an integer 1024 .. 65535, got '80'"),
             ({"CLUSTER_TIMEOUT": "soon"}, "CLUSTER_TIMEOUT must be an integer 1 .. 86400, got 'soon'"),
             ({"NODE_TIMEOUT": "0"}, "NODE_TIMEOUT must be an integer 1 .. 86400, got '0'"),
             # int() of more than 4300 digits was a ValueError traceback
             ({"NNODES": "9" * 5000}, f"NNODES must be an integer 1 .. 100000, got '{'9' * 20}...'")]
    for env, message in cases:
        for dry in ("0", "1"):
            result = bash([PRETRAIN, 1, "/data", tmp_path / "out"], dict(env, DRY_RUN=dry, DEVICE_TARGET="CPU"))
            assert result.returncode == 2 and result.stderr == f"error: {message}\n", (env, result.stderr)
            assert result.stdout == "" and not (tmp_path / "out").exists()
    dry = ok(bash([PRETRAIN, 2, "/data", tmp_path / "out"], {"DRY_RUN": "1", "NODE_TIMEOUT": "12",
                                                              "CLUSTER_TIMEOUT": "45"}))
    assert dry.stdout.startswith("MS_NODE_TIMEOUT=12 msrun --worker_num=2 ")
    assert "--join=True --cluster_time_out=45 --tail_worker_log=-2 " in dry.stdout


def test_a_port_in_use_is_named_at_once(tmp_path):
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        result = bash([PRETRAIN, 2, "/data", tmp_path / "out"], {"DEVICE_TARGET": "CPU", "MASTER_PORT": str(port)})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr == (f"error: MASTER_PORT {port} is already in use on this machine (127.0.0.1): another job "
                             f"or a run that is still going holds it; choose another MASTER_PORT on every node\n")
    assert not (tmp_path / "out").exists()


def test_a_bad_network_setup_fails_with_one_line_within_its_timeout(cluster, data, tmp_path):
    port, here = next(PORTS), cluster.addresses[0]
    # NODE_RANK 0 alone (on its own port): its scheduler waits CLUSTER_TIMEOUT for node 1, then the job stops.
    alone = Launched(cluster, 0, tmp_path, "alone", next(PORTS), data["train"], NODE_RANK="0", CLUSTER_TIMEOUT="5")
    instant = [  # (machine, env, the error's words): refused before msrun starts
        (1, {"NODE_RANK": "0"}, f"MASTER_ADDR {here} is not an address of this machine, but NODE_RANK 0 runs the "
                                f"scheduler at MASTER_ADDR"),
        (0, {"NODE_RANK": "0", "MASTER_ADDR": "127.0.0.1"}, "MASTER_ADDR 127.0.0.1 is a loopback address, which the "
                                                            "other 1 node(s) cannot reach"),
        (0, {"NODE_RANK": "1"}, f"NODE_RANK is 1 but MASTER_ADDR {here} is this machine's own address"),
        (1, {"NODE_RANK": "1", "MASTER_ADDR": "no-such-host.invalid"},
         "MASTER_ADDR 'no-such-host.invalid' does not resolve to an address"),
    ]
    for machine, env, message in instant:
        node = Launched(cluster, machine, tmp_path, "out", port, data["train"], **env).wait()
        assert_one_line(node, message)
        assert node.code == 2 and node.seconds < 10, node
    # Nothing answers at MASTER_ADDR: nobody there (a wrong address), or nobody started NODE_RANK 0 yet.
    for address in (f"{here[:-1]}9", here):
        node = Launched(cluster, 1, tmp_path, "out", port, data["train"], NODE_RANK="1", MASTER_ADDR=address,
                        CLUSTER_TIMEOUT="4").wait()
        assert_one_line(node, f"no scheduler answered at MASTER_ADDR {address}, MASTER_PORT {port} within 4 s "
                              f"(CLUSTER_TIMEOUT; last attempt:")
        assert node.code == 2 and node.seconds < 4 + 6, node
    assert not (tmp_path / "out").exists()
    node = alone.wait()
    assert_one_line(node, "rank 0 on node 0 stopped with: the cluster did not form within CLUSTER_TIMEOUT (5 s): "
                          "fewer than 2 workers joined the scheduler")
    assert node.seconds < 5 + 45, node  # the timeout plus a worker's start (imports, data checks)
    assert cluster.pids(0) == []
