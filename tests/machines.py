"""Several 'machines' on one Linux host, for the multi-node tests: one network namespace per machine, each with
its own address on a private /24, all joined by a bridge that lives in a namespace of its own.

Why: msrun runs the scheduler on the node whose address is MASTER_ADDR and one scheduler per network stack, so two
msrun nodes need two network stacks; namespaces give each its own, as separate machines would. The file system
stays shared, as a cluster's shared storage would be.

Only root can create namespaces; `unavailable()` says why they cannot be had. `machines(n)` creates them under
names holding this process's id and always deletes them (and ends the processes still running inside, which the
tests started), also when a test fails. Nothing is routed: traffic stays between the namespaces' own addresses.
"""
import os
import shutil
import signal
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional, Sequence

SUBNET = "10.231.7"  # private, unused here; machine i gets SUBNET.(i + 1)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def unavailable() -> Optional[str]:
    """Why namespaces cannot be created here (None when they can)."""
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    if shutil.which("ip") is None:
        return "creating network namespaces needs iproute2's `ip` (apt-get install iproute2)"
    probe = f"albtprobe{os.getpid()}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed here: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


@dataclass
class Machines:
    """The namespaces of one test module: `names[i]` holds address `addresses[i]`."""

    names: List[str]
    addresses: List[str]

    def command(self, machine: int, args: Sequence[str]) -> List[str]:
        """`args` run on machine `machine` (inside its namespace)."""
        return ["ip", "netns", "exec", self.names[machine], *[str(a) for a in args]]

    def popen(self, machine: int, args: Sequence[str], log: Path, **kwargs) -> subprocess.Popen:
        """Start `args` on a machine with stdout in `log` and stderr in `log` + `.err`."""
        with open(log, "w") as out, open(f"{log}.err", "w") as err:
            return subprocess.Popen(self.command(machine, args), stdout=out, stderr=err, text=True, **kwargs)

    def pids(self, machine: int) -> List[int]:
        """The processes running on a machine (all started by the tests)."""
        listed = _ip("netns", "pids", self.names[machine], check=False).stdout.split()
        return [int(pid) for pid in listed if pid.isdigit()]

    def kill_all(self, machine: int) -> None:
        """SIGKILL every process on a machine, as a power cut would stop them."""
        for pid in self.pids(machine):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _create(names: List[str], switch: str, tag: str) -> None:
    _ip("netns", "add", switch)
    _ip("-n", switch, "link", "add", "br0", "type", "bridge")
    _ip("-n", switch, "link", "set", "br0", "up")
    for index, name in enumerate(names):
        _ip("netns", "add", name)
        inside, port = f"{tag}n{index}", f"{tag}s{index}"  # interface names hold at most 15 characters
        _ip("link", "add", inside, "type", "veth", "peer", "name", port)
        _ip("link", "set", inside, "netns", name)
        _ip("link", "set", port, "netns", switch)
        _ip("-n", switch, "link", "set", port, "master", "br0")
        _ip("-n", switch, "link", "set", port, "up")
        _ip("-n", name, "addr", "add", f"{SUBNET}.{index + 1}/24", "dev", inside)
        _ip("-n", name, "link", "set", inside, "up")
        _ip("-n", name, "link", "set", "lo", "up")


@contextmanager
def machines(count: int) -> Iterator[Machines]:
    """`count` machines at SUBNET.1 .. SUBNET.count, deleted on exit whatever happened."""
    tag = f"a{os.getpid()}"
    names, switch = [f"albert{tag}m{index}" for index in range(count)], f"albert{tag}sw"
    try:
        _create(names, switch, tag)
        yield Machines(names, [f"{SUBNET}.{index + 1}" for index in range(count)])
    finally:
        machines_left = Machines(names, [])
        for index, name in enumerate(names):
            machines_left.kill_all(index)
            _ip("netns", "del", name, check=False)  # its veth end goes with it, and so does the peer
            _ip("link", "del", f"{tag}n{index}", check=False)  # a pair that never left this namespace
        _ip("netns", "del", switch, check=False)
