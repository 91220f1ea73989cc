"""Checks before and a one-line report after an msrun job, for scripts/common.sh (the standard library and
src/common/atomic_files.py only, so it answers in a fraction of a second, before MindSpore is imported anywhere).

    python src/devices/distributed_launch.py preflight [--offline] --nnodes N --node_rank K --master_addr A
        --master_port P --cluster_timeout S --node_timeout S
    python src/devices/distributed_launch.py in_use --output_dir DIR
    python src/devices/distributed_launch.py with_parent PID msrun ...   (msrun, stopped when PID dies)
    python src/devices/distributed_launch.py explain --logs DIR --node_rank K --device_num D --master_addr A
        --master_port P --status CODE

Why: msrun meets a bad setup by waiting (a wrong MASTER_ADDR, a rank nobody starts) or with its own traceback
(a port in use, an address it cannot route to), and a failed job ends in a traceback of msrun's that names no
worker. `preflight` refuses what can be checked up front, each with one line; the scheduler's address is waited
for at most CLUSTER_TIMEOUT seconds. `explain` reads this node's launcher and worker logs (and the scheduler's,
on node 0) and names the rank or node that failed first and its log, and says how to resume.
"""
import argparse
import ctypes
import errno
import ipaddress
import os
import re
import signal
import socket
import sys
import time
from pathlib import Path
from typing import List, Optional, Tuple

# A distributed worker that stops because another worker, a node or the network failed (not its own fault)
# exits with this code (src/devices/device_setup.py), so that the report looks for the cause elsewhere.
EXIT_CLUSTER_FAILED = 3
EXIT_USER_ERROR = 2
RESUME = "run the same command again on every node to resume from the newest checkpoint"
PROBE_TIMEOUT = 2.0  # seconds for one TCP connection attempt to the scheduler
MAX_NODES = 100000  # as the yamls' device_num
MAX_TIMEOUT = 86400  # seconds (CLUSTER_TIMEOUT, NODE_TIMEOUT): a day


class SetupError(Exception):
    """A bad launch setting: printed as one `error:` line, exit 2."""


def bounded_int(name: str, text: str, low: int, high: int) -> int:
    """`text` (an environment variable) as an integer in [low, high]; more than 9 digits never is one."""
    if not re.fullmatch(r"\d{1,9}", text or "") or not low <= int(text) <= high:
        shown = text if len(text or "") <= 20 else f"{text[:20]}..."
        raise SetupError(f"{name} must be an integer {low} .. {high}, got '{shown}'")
    return int(text)


def check_settings(args) -> None:
    """The settings that need no network: ranges, and NODE_RANK against NNODES."""
    nnodes = bounded_int("NNODES", args.nnodes, 1, MAX_NODES)
    bounded_int("NODE_RANK", args.node_rank, 0, MAX_NODES - 1)
    if int(args.node_rank) >= nnodes:
        raise SetupError(f"NODE_RANK is {args.node_rank} but NNODES is {nnodes}: the nodes are numbered "
                         f"0 .. {nnodes - 1}, each started with its own NODE_RANK")
    bounded_int("MASTER_PORT", args.master_port, 1024, 65535)
    bounded_int("CLUSTER_TIMEOUT", args.cluster_timeout, 1, MAX_TIMEOUT)
    bounded_int("NODE_TIMEOUT", args.node_timeout, 1, MAX_TIMEOUT)
    if not args.master_addr:
        raise SetupError("MASTER_ADDR is empty: set it to the address of the node with NODE_RANK 0")


def resolve(address: str) -> str:
    """MASTER_ADDR as an IPv4/IPv6 address (host names resolved once)."""
    try:
        return socket.getaddrinfo(address.strip("[]"), None, proto=socket.IPPROTO_TCP)[0][4][0]
    except (socket.gaierror, UnicodeError) as err:
        raise SetupError(f"MASTER_ADDR '{address}' does not resolve to an address ({err})") from err


def _family(address: str) -> int:
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def is_local(address: str) -> bool:
    """Whether `address` belongs to this machine (binding to it succeeds only then)."""
    with socket.socket(_family(address), socket.SOCK_STREAM) as sock:
        try:
            sock.bind((address, 0))
            return True
        except OSError as err:
            if err.errno == errno.EADDRNOTAVAIL:
                return False
            raise


def check_port_free(address: str, port: int) -> None:
    """The scheduler's port must be free here: taken, msrun would fail with a traceback after its timeout."""
    with socket.socket(_family(address), socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the scheduler binds: TIME_WAIT is no clash
        try:
            sock.bind((address, port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise SetupError(f"MASTER_PORT {port} is already in use on this machine ({address}): another job "
                                 f"or a run that is still going holds it; choose another MASTER_PORT on every "
                                 f"node") from err
            raise


def check_master(args, address: str) -> None:
    """NODE_RANK 0 runs msrun's scheduler, which msrun starts only where MASTER_ADDR is a local address."""
    nnodes, node_rank = int(args.nnodes), int(args.node_rank)
    local = is_local(address)
    if node_rank == 0:
        if not local:
            raise SetupError(f"MASTER_ADDR {args.master_addr} is not an address of this machine, but NODE_RANK 0 "
                             f"runs the scheduler at MASTER_ADDR: start NODE_RANK 0 on the machine with that "
                             f"address (another node already using NODE_RANK 0?) or correct MASTER_ADDR")
        if nnodes > 1 and ipaddress.ip_address(address).is_loopback:
            raise SetupError(f"MASTER_ADDR {args.master_addr} is a loopback address, which the other "
                             f"{nnodes - 1} node(s) cannot reach: set MASTER_ADDR to this machine's network address "
                             f"on every node")
        check_port_free(address, int(args.master_port))
    elif local:
        raise SetupError(f"NODE_RANK is {node_rank} but MASTER_ADDR {args.master_addr} is this machine's own "
                         f"address: only NODE_RANK 0 runs at MASTER_ADDR (two msrun nodes cannot share one "
                         f"machine's network); check NODE_RANK and MASTER_ADDR")


def wait_for_scheduler(address: str, port: int, timeout: float, say=print) -> None:
    """Nodes other than 0 wait (at most `timeout` s, one attempt a second) until the scheduler accepts a
    connection: a wrong or unreachable MASTER_ADDR fails here with the reason instead of after msrun's timeout."""
    deadline = time.monotonic() + timeout
    reason, said = "", False
    for _ in range(int(timeout) + 1):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            with socket.create_connection((address, port), timeout=min(PROBE_TIMEOUT, remaining)):
                return
        except OSError as err:
            reason = err.strerror or str(err) or type(err).__name__
        if not said:
            say(f"waiting up to {timeout:g} s (CLUSTER_TIMEOUT) for the scheduler of NODE_RANK 0 at "
                f"{address}:{port} ...", flush=True)
            said = True
        time.sleep(max(0.0, min(1.0, deadline - time.monotonic())))
    raise SetupError(f"no scheduler answered at MASTER_ADDR {address}, MASTER_PORT {port} within {timeout:g} s "
                     f"(CLUSTER_TIMEOUT; last attempt: {reason.lower()}): start NODE_RANK 0 first, and check "
                     f"MASTER_ADDR, MASTER_PORT and that this machine can reach that address")


def preflight(args) -> None:
    check_settings(args)
    if args.offline:
        return
    address = resolve(args.master_addr)
    check_master(args, address)
    if int(args.node_rank) > 0:
        wait_for_scheduler(address, int(args.master_port), float(args.cluster_timeout))


def check_not_in_use(output_dir: str) -> None:
    """A second start on the OUTPUT_DIR of a job still running here would move that job's logs aside and mix its
    console into this one's before the workers' own lock check refused it: refused first."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from model_utils.errors import UserError
    from src.common.atomic_files import check_not_in_use as probe

    try:
        probe(output_dir, f"OUTPUT_DIR {output_dir}")
    except UserError as err:
        raise SetupError(str(err)) from None


# ---------------------------------------------------------------------------------------------------------------
# After a failed job: which rank or node failed first.

FAILED_WORKER = re.compile(r"Worker process (\d+) exit with exception\. Error code: (-?\d+)")
WORKER_PID = re.compile(r"^worker pid (\d+): rank (\d+)", re.M)
TIMED_OUT_NODE = re.compile(r"The node: (\d+) is timed out")


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def worker_log(node_dir: Path, pid: int) -> Tuple[Optional[int], Optional[Path]]:
    """(rank, log) of the worker with this pid: each worker prints `worker pid P: rank R` when it joins the job.
    One that stopped before (a bad flag, say) is found by its `error:` line: the first such log by rank."""
    logs = sorted(node_dir.glob("worker_*.log"), key=lambda path: int(re.sub(r"\D", "", path.stem) or 0))
    for log in logs:
        for found_pid, rank in WORKER_PID.findall(_read(log)):
            if int(found_pid) == pid:
                return int(rank), log
    for log in logs:
        if last_error(log) and not WORKER_PID.search(_read(log)):
            return int(re.sub(r"\D", "", log.stem)), log
    return None, None


def last_error(log: Optional[Path]) -> str:
    lines = [line.strip() for line in _read(log).splitlines() if line.startswith("error: ")] if log else []
    return lines[-1][len("error: "):] if lines else ""


def scheduler_reachable(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=PROBE_TIMEOUT):
            return True
    except OSError:
        return False


def remote_cause(args, logs: Path) -> Optional[Tuple[str, str]]:
    """(cause, log) of a failure elsewhere that this node can see: a rank the scheduler (on node 0) saw time out,
    or, from another node, a scheduler that no longer answers; None when neither."""
    timed_out = TIMED_OUT_NODE.findall(_read(logs / f"msrun_node{args.node_rank}" / "scheduler.log"))
    if timed_out:
        rank = int(timed_out[0])
        node = rank // int(args.device_num)
        return (f"rank {rank} on node {node} stopped answering the scheduler (killed, crashed, or its node or "
                f"network went down)", f"{logs}/msrun_node{node}/worker_{rank}.log on node {node}")
    if int(args.node_rank) > 0 and not scheduler_reachable(resolve(args.master_addr), int(args.master_port)):
        return (f"node 0 (MASTER_ADDR {args.master_addr}, which runs the scheduler) stopped or became "
                f"unreachable", f"{logs}/launcher_node0.log on node 0")
    return None


ELSEWHERE = ("a worker on another node stopped (this node's workers lost their peers); that node's launcher names "
             "it", "the launcher_node<K>.log of the other nodes")


def local_cause(args, logs: Path, pid: int, code: int) -> Tuple[str, str]:
    """(cause, log) for the first of this node's workers that msrun saw fail: its own fault, or (exit code 3, or
    SIGTERM, which MindSpore sends to the workers of a failed cluster) a failure elsewhere."""
    node_dir = logs / f"msrun_node{args.node_rank}"
    rank, log = worker_log(node_dir, pid)
    who = f"rank {rank} on node {args.node_rank}" if rank is not None else \
        f"a worker (pid {pid}) on node {args.node_rank}"
    where = str(log) if log else f"{node_dir}/worker_*.log"
    if code in (EXIT_CLUSTER_FAILED, -signal.SIGTERM):
        found = remote_cause(args, logs)
        if found or code == EXIT_CLUSTER_FAILED:
            return found or ELSEWHERE
    if code < 0:
        return f"{who} was killed by {signal_name(-code)}", where
    message = last_error(log)
    return (f"{who} stopped with: {message}" if message else f"{who} exited with code {code}"), where


def explain(args) -> str:
    """The one line a failed msrun job ends with on this node."""
    logs = Path(args.logs)
    status = int(args.status)
    if status > 128:
        return (f"error: this node's launcher (msrun) was killed by {signal_name(status - 128)}; its workers stop "
                f"with it and the other nodes stop within NODE_TIMEOUT; log: {logs}/launcher_node{args.node_rank}"
                f".log. To continue, {RESUME}")
    failed = FAILED_WORKER.findall(_read(logs / f"launcher_node{args.node_rank}.log"))
    if failed:
        pid, code = int(failed[0][0]), int(failed[0][1])
        cause, log = local_cause(args, logs, pid, code)
        if code == EXIT_USER_ERROR:  # a setting or input to correct: starting again as it is would fail again
            return (f"error: the distributed job failed: {cause}; log: {log}. Correct that, then start every node "
                    f"again (a run resumes from its newest checkpoint)")
    else:
        cause, log = remote_cause(args, logs) or ELSEWHERE
    return f"error: the distributed job failed: {cause}; log: {log}. To continue, {RESUME}"


def parse(argv: List[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="distributed_launch.py", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("preflight")
    check.add_argument("--offline", action="store_true", help="check the settings only (no network)")
    in_use = commands.add_parser("in_use")
    in_use.add_argument("--output_dir", required=True)
    report = commands.add_parser("explain")
    report.add_argument("--logs", required=True)
    report.add_argument("--device_num", required=True)
    report.add_argument("--status", required=True)
    for sub in (check, report):
        for name in ("nnodes", "node_rank", "master_addr", "master_port", "cluster_timeout", "node_timeout"):
            sub.add_argument(f"--{name}", default="")
    return parser.parse_args(argv)


def run_with_parent(parent: int, command: List[str]) -> int:
    """Become `command` (msrun), set to get SIGTERM when `parent` (the launch script) dies: a script killed with
    SIGKILL left msrun and its workers training on, detached (SIGTERM makes msrun stop its workers; they also die
    with it). Linux only; elsewhere a plain exec."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG, kept by exec
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the script was gone before the line above
        print("error: the launch script is gone: not starting msrun", file=sys.stderr, flush=True)
        return EXIT_CLUSTER_FAILED
    os.execvp(command[0], command)
    return EXIT_USER_ERROR  # not reached: execvp raises OSError or does not return


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["with_parent"]:
        return run_with_parent(int(argv[1]), argv[2:])
    args = parse(argv)
    try:
        if args.command == "preflight":
            preflight(args)
        elif args.command == "in_use":
            check_not_in_use(args.output_dir)
        else:
            print(explain(args), file=sys.stderr, flush=True)
    except SetupError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return EXIT_USER_ERROR
    except OSError as err:
        print(f"error: checking the network setup failed: {err.strerror or err}", file=sys.stderr, flush=True)
        return EXIT_USER_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
