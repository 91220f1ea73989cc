"""Device and distributed setup shared by every entry point.

`setup_device` turns `device_target` auto|CPU|GPU|Ascend into a configured MindSpore context (GRAPH mode) and, under
`distribute`, initialises the collective group *before* any cell is built (the train cell reads the parallel context
when it is created). `auto` says why a device the host has was passed over (src/devices/device_checks.py). A distributed
worker dies with its launcher, reports a cluster that does not form and a peer that stops (a collective op that
fails) in one line, and exits 3 in the latter case (src/devices/distributed_launch.py names the failed rank or node for
the scripts). `model_runtime` then says how networks are built to run on the device (src/model/albert.py's Runtime).
"""
import atexit
import os
import re
import signal
import sys
from dataclasses import dataclass, replace
from typing import Callable, Optional, Tuple

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops
from mindspore.communication import get_group_size, get_rank, init
from mindspore.context import ParallelMode

from model_utils.errors import UserError
from model_utils.signals import die_with_parent
from src.devices.device_checks import ascend_unavailable_reason, compute_type_problem, gpu_unavailable_reason
from src.devices.distributed_launch import EXIT_CLUSTER_FAILED, EXIT_USER_ERROR
from src.model import cpu_kernels
from src.model.albert import PORTABLE, Runtime

DEVICE_TARGETS = ("auto", "CPU", "GPU", "Ascend")
UNAVAILABLE_REASON = {"GPU": gpu_unavailable_reason, "Ascend": ascend_unavailable_reason}


@dataclass
class Device:
    """Where this process runs: the resolved target and its place in the data-parallel group."""

    target: str
    rank: int = 0
    group_size: int = 1

    @property
    def is_main(self) -> bool:
        """Rank 0 writes the logs, metrics and checkpoints; the other ranks hold the same weights."""
        return self.rank == 0


def pick_device_target(requested: str, log: Callable[[str], None] = print) -> str:
    """`auto` picks Ascend, then GPU, then CPU, whichever this MindSpore can use, and says why a device the host has
    was passed over (a CUDA 12 toolkit, no CUDA_HOME, a plugin that did not load); explicit targets are checked."""
    if requested not in DEVICE_TARGETS:
        raise UserError(f"device_target must be one of {', '.join(DEVICE_TARGETS)}, got {requested!r}")
    if requested == "CPU":
        return requested
    candidates = ("Ascend", "GPU") if requested == "auto" else (requested,)
    for target in candidates:
        try:
            if ms.hal.is_available(target):
                return target
        except (RuntimeError, ValueError):
            continue
    reasons = [reason for reason in (UNAVAILABLE_REASON[target]() for target in candidates) if reason]
    if requested != "auto":
        raise UserError(f"device_target {requested} is not available here: "
                        f"{reasons[0] if reasons else f'no device or no MindSpore {requested} plugin'}; "
                        f"use --device_target auto or CPU")
    for reason in reasons:
        log(f"warning: {reason}: running on CPU")
    return "CPU"


def setup_device(device_target: str, device_id: int = 0, distribute: bool = False, device_num: int = 0,
                 cpu_threads: int = 0, seed: Optional[int] = None) -> Device:
    """GRAPH mode on the chosen target; with `distribute`, join the launcher's group (msrun or mpirun) and set
    data-parallel gradient averaging. `device_num` > 0 must equal the launcher's worker count."""
    target = pick_device_target(device_target)
    if target == "CPU" and cpu_kernels.switch_problem():
        raise UserError(cpu_kernels.switch_problem())
    ms.set_context(mode=ms.GRAPH_MODE)
    if cpu_threads > 0:
        ms.device_context.cpu.op_tuning.threads_num(cpu_threads)
    if distribute:
        ms.set_device(target)  # the launcher's local rank picks the device
        join_cluster(init)
        rank, group_size = get_rank(), get_group_size()
        stop_in_one_line_on_cluster_failure(rank)
        if device_num not in (0, group_size):
            raise UserError(f"device_num is {device_num} but the launcher started {group_size} workers; "
                            f"set device_num to 0 (take the launcher's) or {group_size}")
        ms.set_auto_parallel_context(parallel_mode=ParallelMode.DATA_PARALLEL, gradients_mean=True,
                                     device_num=group_size)
    else:
        if device_num > 1:
            raise UserError(f"device_num={device_num} needs distribute=true and a launcher "
                            f"(scripts/run_pretrain_distribute.sh)")
        if target == "CPU":
            ms.set_device(target)
        else:
            ms.set_device(target, device_id)
        rank, group_size = 0, 1
    if target == "CPU":
        cpu_kernels.set_threads(cpu_threads)
    if seed is not None:
        ms.set_seed(seed)
    return Device(target=target, rank=rank, group_size=group_size)


def start_device(config) -> Tuple[Device, Callable[[str], None]]:
    """The device of a training run from its yaml's keys (`setup_device`), and the log that prints on the main rank
    only (every rank runs the same driver)."""
    device = setup_device(config.device_target, config.device_id, config.distribute, config.device_num,
                          config.cpu_threads, config.seed)

    def log(message: str) -> None:
        if device.is_main:
            print(message, flush=True)

    return device, log


def model_runtime(target: str, compute_type: str, kernels: bool = True) -> Runtime:
    """How networks of `compute_type` are built to train and evaluate on `target`: on CPU the compiled kernels when
    they are available (and `kernels` allows them), in float32 or with their products in bfloat16 (the kernels'
    process-wide switch is set here), otherwise MindSpore's operations with heads split and stacked and the mask
    broadcast once; elsewhere MindSpore's own operations as they are (Runtime says why). A compute type the target
    cannot run is the user's error."""
    problem = cpu_compute_type_problem(compute_type, kernels) if target == "CPU" else \
        compute_type_problem(target, compute_type)
    if problem:
        raise UserError(problem)
    if target != "CPU":
        return PORTABLE
    if kernels and compute_type in ("float32", "bfloat16") and cpu_kernels.available():
        cpu_kernels.set_bf16(compute_type == "bfloat16")
        return Runtime(kernels=True, bf16_weights=compute_type == "bfloat16", keyed_dropout=True)
    return Runtime(split_heads=True, broadcast_mask=True, keyed_dropout=True)


def serving_runtime(target: str, compute_type: str, precision: str) -> Runtime:
    """How a checkpoint is built to serve at `precision` (src.predict --precision): as `model_runtime` builds
    `compute_type`, and with the compiled kernels the dense layers' weights converted once when the checkpoint is
    loaded rather than per call (Runtime.serving_weights): their bfloat16 copy for bfloat16, int8 values and scales
    for int8 (then everything else runs float32: int8 needs the kernels, which the caller checked)."""
    if precision == "int8":
        cpu_kernels.set_bf16(False)
        return Runtime(kernels=True, serving_weights="int8")
    runtime = model_runtime(target, compute_type)
    return replace(runtime, serving_weights="bfloat16") if runtime.bf16_weights else runtime


# How to run where bfloat16 cannot: evaluating or fine-tuning a bfloat16 run's checkpoint takes its compute_type from
# the albert_config.json beside it.
USE_FLOAT32 = "; use float32 (--net_cfg.compute_type float32: a bfloat16 run's checkpoints are float32)"


def cpu_compute_type_problem(compute_type: str, kernels: bool = True) -> str:
    """Why `compute_type` cannot run on this CPU ('' when it can). bfloat16 runs only as the compiled kernels'
    products (MindSpore's CPU operations have no bfloat16), and only on a CPU with native bfloat16 dot products:
    oneDNN would emulate them elsewhere, slower than float32, so such a run is refused rather than made silently
    float32 or slow."""
    if compute_type != "bfloat16":
        return ""
    if not kernels:  # decided without building the kernels (export never needs them)
        return "compute_type bfloat16 on CPU runs only in the compiled CPU kernels, which this path does not use"
    supported, why = cpu_kernels.bf16_support()
    if not supported:
        return f"compute_type bfloat16 on CPU needs native bfloat16 dot products: {why}{USE_FLOAT32}"
    if not cpu_kernels.available():
        return (f"compute_type bfloat16 on CPU runs only in the compiled CPU kernels, and this process has "
                f"{cpu_kernels.status()}{USE_FLOAT32}")
    return ""


def kernels_status(target: str, compute_type: str = "float32") -> str:
    """One line for logs: whether networks of `compute_type` on `target` run the compiled CPU kernels, and if not,
    why."""
    if target != "CPU":
        return "MindSpore operations (not on CPU)"
    return CPU_FLOAT16 if compute_type == "float16" else cpu_kernels.status()


CPU_FLOAT16 = "MindSpore operations (float16: the compiled CPU kernels run float32 and bfloat16)"


def precision_note(target: str, compute_type: str, loss_scaling: bool) -> str:
    """One line for a training log on what a bfloat16 run on CPU computes in which precision, and that a float16 run
    there uses none of the compiled kernels ('' otherwise)."""
    if target == "CPU" and compute_type == "float16":
        return f"precision: float16 in {CPU_FLOAT16}"
    if target != "CPU" or compute_type != "bfloat16":
        return ""
    features = "/".join(flag.upper() for flag in cpu_kernels.bf16_features())
    scaling = "kept as configured, not needed" if loss_scaling else "off, not needed"
    return (f"precision: bfloat16 products with float32 accumulation ({features}) in the compiled CPU kernels; "
            f"weights, optimizer state, softmax, LayerNorm, GELU, losses and gradient sums in float32; checkpoints "
            f"float32; loss scaling {scaling} (bfloat16 has float32's exponent range)")


def stop_with_launcher() -> None:
    """Die with the launcher (Linux `PR_SET_PDEATHSIG`): a worker whose msrun was killed would otherwise train on,
    orphaned, holding its node's place in the job. The scripts export the launcher's pid, which closes the window
    before this call: a worker whose launcher is already gone stops at once."""
    if not die_with_parent(signal.SIGKILL):
        return
    launcher = os.environ.get("ALBERT_LAUNCHER_PID", "")
    if launcher.isdigit() and os.getppid() != int(launcher):
        print("error: this worker's launcher is gone (killed before the worker started): stopping", flush=True)
        os._exit(EXIT_CLUSTER_FAILED)


def join_cluster(init: Callable[[], None]) -> None:
    """`init()` of the data-parallel group, its failures as one line (--verbose shows MindSpore's own message).

    Under msrun every process prints `worker pid P: rank R` first: scripts/common.sh names a worker msrun saw
    die (msrun reports pids only) by it."""
    role = os.environ.get("MS_ROLE", "")
    if role:
        stop_with_launcher()
    if role == "MS_WORKER":
        print(f"worker pid {os.getpid()}: rank {os.environ.get('MS_NODE_ID', '?')} of "
              f"{os.environ.get('MS_WORKER_NUM', '?')}", flush=True)
    try:
        init()
    except (RuntimeError, ValueError) as err:
        if not role and "OMPI_COMM_WORLD_SIZE" not in os.environ:
            raise UserError(f"distribute=true but this process was not started by a launcher: use "
                            f"scripts/run_*_distribute.sh (msrun or mpirun) (MindSpore: {first_line(str(err))})"
                            ) from err
        if not role:  # mpirun: the collective library (NCCL, HCCL) failed to start
            raise UserError(f"rank {os.environ['OMPI_COMM_WORLD_RANK']} of mpirun could not start the collective "
                            f"communication (MindSpore: {first_line(str(err))})") from err
        # Runs first at exit (atexit is last-in first-out): MindSpore's own exit handlers would spend ~20 s trying
        # to leave a cluster that never formed.
        atexit.register(_exit_now, EXIT_USER_ERROR)
        raise UserError(cluster_problem(str(err), role)) from err


def _exit_now(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def cluster_problem(message: str, role: str) -> str:
    """What MindSpore's failure to build the cluster means for the person who started the nodes."""
    where = f"{os.environ.get('MS_SCHED_HOST', '?')}:{os.environ.get('MS_SCHED_PORT', '?')}"
    if "Repeated registration" in message:
        return (f"another worker already joined the job as rank {os.environ.get('MS_NODE_ID', '?')}: two nodes "
                f"were started with the same NODE_RANK (or a worker of an earlier run is still alive); start "
                f"each node with its own NODE_RANK 0 .. NNODES-1")
    if "not successfully spawned" in message:
        return (f"the cluster did not form within CLUSTER_TIMEOUT ({os.environ.get('MS_TOPO_TIMEOUT', '?')} s): "
                f"fewer than {os.environ.get('MS_WORKER_NUM', '?')} workers joined the scheduler at {where}; start "
                f"every node (NODE_RANK 0 .. NNODES-1) with the same NNODES, MASTER_ADDR and MASTER_PORT")
    if role == "MS_SCHED":  # MindSpore's list of timed-out nodes names the survivors too (rank 0 for a killed rank 1)
        return ("the scheduler stopped: a worker or node failed (the launch script's last line names which; "
                "MindSpore's own report is in msrun_node0/scheduler.log)")
    return f"joining the job through the scheduler at {where} failed (MindSpore: {first_line(message)})"


def first_line(message: str) -> str:
    """MindSpore's own first non-empty line of an error (its messages run to pages of C++ context)."""
    line = next((line.strip() for line in message.splitlines() if line.strip()), "no message")
    return line if len(line) <= 300 else line[:297] + "..."


# How MindSpore reports a collective op that could not complete (its peer is gone): the op's kernel failed.
COLLECTIVE_OP = re.compile(r"Launch kernel failed: \S*?\b(AllReduce|AllGather|ReduceScatter|Broadcast)-op")


def stop_in_one_line_on_cluster_failure(rank: int) -> None:
    """A collective op whose peer died fails after NODE_TIMEOUT with a long kernel traceback, and the process then
    hangs while MindSpore tries to say goodbye to a scheduler that may be gone. Instead: one line and exit code 3
    (EXIT_CLUSTER_FAILED: scripts/common.sh then looks for the cause on the other nodes)."""
    previous = sys.excepthook  # MindSpore's: marks this node as failed, prints the traceback

    def hook(kind, value, trace) -> None:
        found = COLLECTIVE_OP.search(str(value)) if issubclass(kind, RuntimeError) else None
        if not found:
            previous(kind, value, trace)
            return
        print(f"error: rank {rank}: {found.group(1)} with the other workers failed: a worker or node stopped, or "
              f"the network between them failed", file=sys.stderr)
        _exit_now(EXIT_CLUSTER_FAILED)

    sys.excepthook = hook


class _SumOverRanks(nn.Cell):
    def __init__(self):
        super().__init__()
        self.all_reduce = ops.AllReduce(ops.ReduceOp.SUM)

    def construct(self, x):
        return self.all_reduce(x)


def all_ranks_sum(values: np.ndarray) -> np.ndarray:
    """Element-wise sum over the ranks of a data-parallel group (float32 on the wire; CPU AllReduce only sums)."""
    return _SumOverRanks()(Tensor(values.astype(np.float32))).asnumpy()
