"""A real two-node Slurm cluster on 127.0.0.1 for the Slurm target's tests.

``start_cluster(root)`` writes a munge key and a ``slurm.conf`` under ``root`` (state, spool, log
and tmp directories there too, free ports picked by the kernel), then starts ``munged``,
``slurmctld`` and two ``slurmd`` (``-N n1`` and ``-N n2``, both with ``NodeAddr=127.0.0.1``) in the
foreground as child processes, and waits until both nodes are idle. ``srun -N2 -n2`` then places
task 0 on n1 and task 1 on n2. Clients reach this cluster through ``SLURM_CONF`` (``env``).
``stop()`` cancels every job, waits for their step daemons and stops the daemons.

The daemons need root (slurmd starts jobs as their users) and Debian's ``slurm-wlm`` and
``munge``; ``why_unavailable()`` says what is missing so the fixture can skip with the reason.
Each node advertises 4 CPUs (``SlurmdParameters=config_overrides``) so two small jobs can share
the two real cores; ``TmpFS`` is per node so the PMIx plugin of each slurmd has its own directory.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

NODES = ("n1", "n2")
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "squeue", "scancel", "scontrol", "sinfo", "sacct")
MARKER = "MLBENCH_TEST_SLURM"  # in the daemons' environment: finds their step daemons
CPUS_PER_NODE = 4
MEMORY_MB = 2000


def _which(name: str) -> str | None:
    return shutil.which(name) or next(
        (str(p) for d in ("/usr/sbin", "/sbin") if (p := Path(d) / name).exists()), None
    )


def why_unavailable() -> str | None:
    """Why a test cluster cannot start here, or None when it can."""
    missing = [name for name in (*DAEMONS, *CLIENTS) if _which(name) is None]
    if missing:
        return (
            f"Slurm or munge is not installed ({', '.join(missing)} missing): apt-get install slurm-wlm munge"
        )
    if os.geteuid() != 0:
        return "slurmd must run as root to start jobs; these tests run only as root"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def slurm_conf(root: Path, ports: dict[str, int], host: str) -> str:
    """The cluster's ``slurm.conf``: two nodes on 127.0.0.1, partitions ``debug`` (default) and
    ``down`` (State=DOWN), no accounting database (finished jobs stay in ``squeue`` for
    MinJobAge and in the job completion file for ``sacct --completion``)."""
    nodes = "\n".join(
        f"NodeName={node} NodeHostname={host} NodeAddr=127.0.0.1 Port={ports[node]} "
        f"CPUs={CPUS_PER_NODE} RealMemory={MEMORY_MB} State=UNKNOWN"
        for node in NODES
    )
    names = ",".join(NODES)
    return f"""# mlbench test cluster (tests/support/slurm.py)
ClusterName=mlbtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ports["slurmctld"]}
SlurmdPort={ports["slurmd"]}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/run/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
TmpFS={root}/tmp/%n
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=2
MinJobAge=300
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={root}/log/jobcomp.txt
JobAcctGatherType=jobacct_gather/none
SlurmdParameters=config_overrides
{nodes}
PartitionName=debug Nodes={names} Default=YES MaxTime=INFINITE State=UP
PartitionName=down Nodes={names} MaxTime=INFINITE State=DOWN
"""


@dataclass
class SlurmCluster:
    """A running test cluster: its directory, config and daemons."""

    root: Path
    conf: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        """The environment for Slurm clients talking to this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """A Slurm client command against this cluster."""
        return subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, timeout=timeout, check=check
        )

    def node_states(self) -> dict[str, str]:
        out = self.run("sinfo", "--noheader", "--Node", "--format=%N %T", check=False).stdout
        return dict(line.split()[:2] for line in out.splitlines() if len(line.split()) >= 2)

    def wait_idle(self, timeout: float = 60) -> None:
        """Until every node is idle (registered and free)."""
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self.logs()}")
            states = self.node_states()
            if all(states.get(node, "").rstrip("*") == "idle" for node in NODES):
                return
            time.sleep(0.2)
        raise RuntimeError(f"nodes not idle after {timeout:.0f}s: {states}\n{self.logs()}")

    def step_daemons(self) -> set[int]:
        """Live step daemons of this cluster (``slurmstepd``: they inherit the daemons' marker
        and outlive them); the daemons and their own helpers (slurmscriptd) are left out."""
        needle = f"{MARKER}={self.root}".encode()
        mine = {proc.pid for proc in self.procs.values()}
        found = set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in mine:
                continue
            with contextlib.suppress(OSError):
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    stat = (entry / "stat").read_text()
                    fields = stat[stat.rfind(")") + 2 :].split()
                    if fields[0] not in ("Z", "X") and int(fields[1]) not in mine:
                        found.add(int(entry.name))
        return found

    def logs(self, tail: int = 30) -> str:
        chunks = []
        for path in sorted((self.root / "log").glob("*.log")):
            lines = path.read_text(errors="replace").splitlines()[-tail:]
            chunks.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(chunks)

    def stop(self) -> None:
        """Cancel every job, wait for their step daemons, stop the daemons (slurmd first)."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self.run("scancel", "--full", "--user", str(os.geteuid()), check=False)
            deadline = time.monotonic() + 20
            while self.step_daemons() and time.monotonic() < deadline:
                time.sleep(0.2)
        for name in (*(f"slurmd-{n}" for n in NODES), "slurmctld", "munged"):
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        for pid in self.step_daemons():  # a step daemon that outlived its slurmd
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def start_cluster(root: Path) -> SlurmCluster:
    """Write the configuration under ``root`` and start the daemons; raises when they do not
    come up (with their logs)."""
    for sub in ("state", "log", "run", "munge", *(f"spool/{n}" for n in NODES), *(f"tmp/{n}" for n in NODES)):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "munge").chmod(0o700)
    key = root / "munge" / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o600)
    ports = {name: _free_port() for name in ("slurmctld", "slurmd", *NODES)}
    host = socket.gethostname().split(".")[0]
    conf = root / "slurm.conf"
    conf.write_text(slurm_conf(root, ports, host))
    cluster = SlurmCluster(root=root, conf=conf)
    env = {**cluster.env, MARKER: str(root)}

    def spawn(name: str, argv: list[str]) -> None:
        log = open(root / "log" / f"{name}.out", "ab")  # noqa: SIM115 - the child keeps it
        cluster.procs[name] = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()

    try:
        spawn(
            "munged",
            [
                str(_which("munged")),
                "--foreground",
                "--force",
                f"--key-file={key}",
                f"--socket={root}/run/munge.sock",
                f"--pid-file={root}/run/munged.pid",
                f"--log-file={root}/log/munged.log",
                f"--seed-file={root}/munge/seed",
            ],
        )
        _wait_for(root / "run" / "munge.sock", cluster, "munged")
        spawn("slurmctld", [str(_which("slurmctld")), "-D", "-i", "-f", str(conf)])
        for node in NODES:
            spawn(f"slurmd-{node}", [str(_which("slurmd")), "-D", "-f", str(conf), "-N", node])
        cluster.wait_idle()
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _wait_for(path: Path, cluster: SlurmCluster, name: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if cluster.procs[name].poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not start:\n{cluster.logs()}")
        time.sleep(0.05)
