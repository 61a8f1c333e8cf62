"""The record of every emulated network on this machine: who made it, and which names it holds.

A run's record (``<runs dir>/.network/<run id>.json``) is written before anything is created and
removed only once everything is gone, so whatever a killed ``apply`` left is always named by a
record: ``sweep`` finds the records whose maker and ranks are gone and removes their names (and
only theirs). Subnets are handed out under a lock from the configured range, skipping those of live
records and any this machine already routes, so two runs at once never collide.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from mlbench_tui.errors import ExecutorError
from mlbench_tui.executors.local import processes
from mlbench_tui.executors.local.network import LEDGER_DIR, links
from mlbench_tui.executors.local.network.layout import NetworkLayout, candidate_blocks, plan_layout
from mlbench_tui.executors.shaping import Shaping

LOCK_FILE = "lock"
PROC = Path("/proc")


class NetworkRecord(BaseModel):
    """What a run's emulated network is made of, and the process that made it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    run_id: str
    subnet: str
    ranks: tuple[tuple[int, ...], ...]
    egress_rate_bps: int | None = None
    egress_delay_s: float = 0.0
    ingress_rate_bps: int | None = None
    owner_pid: int
    owner_ticks: int | None = None
    created: float

    def layout(self) -> NetworkLayout:
        return plan_layout(
            self.run_id,
            self.ranks,
            ipaddress.IPv4Network(self.subnet),
            Shaping(self.egress_rate_bps, self.egress_delay_s),
            Shaping(self.ingress_rate_bps, 0.0),
        )


def ledger_dir(runs_dir: Path) -> Path:
    return runs_dir / LEDGER_DIR


@contextlib.contextmanager
def _locked(runs_dir: Path) -> Iterator[Path]:
    folder = ledger_dir(runs_dir)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / LOCK_FILE, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield folder
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def records(runs_dir: Path) -> list[NetworkRecord]:
    """Every record on file (unreadable ones are skipped: they name nothing this can remove)."""
    folder = ledger_dir(runs_dir)
    found: list[NetworkRecord] = []
    with contextlib.suppress(FileNotFoundError):
        for path in sorted(folder.glob("*.json")):
            with contextlib.suppress(OSError, ValueError, ValidationError):
                found.append(NetworkRecord.model_validate_json(path.read_text()))
    return found


def read(runs_dir: Path, run_id: str) -> NetworkRecord | None:
    try:
        return NetworkRecord.model_validate_json((ledger_dir(runs_dir) / f"{run_id}.json").read_text())
    except (OSError, ValueError, ValidationError):
        return None


def _routed() -> list[ipaddress.IPv4Network]:
    """The IPv4 networks this machine routes, in any table (the local table holds a route for
    each of its addresses, so those are among them)."""
    ip = links.program_path("ip")
    if ip is None:
        return []
    nets: list[ipaddress.IPv4Network] = []
    for argv in ([ip, "-4", "-j", "route", "show", "table", "all"],):
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False).stdout
            entries = json.loads(out or "[]")
        except (OSError, subprocess.SubprocessError, ValueError):
            continue
        for entry in entries:
            for info in entry.get("addr_info", []):
                with contextlib.suppress(ValueError):
                    nets.append(ipaddress.IPv4Network(f"{info['local']}/{info['prefixlen']}", strict=False))
            dst = entry.get("dst")
            if isinstance(dst, str) and dst not in ("default", "broadcast"):
                with contextlib.suppress(ValueError):
                    nets.append(ipaddress.IPv4Network(dst, strict=False))
    return nets


@dataclass(frozen=True)
class Reservation:
    layout: NetworkLayout
    record: NetworkRecord


def reserve(
    runs_dir: Path,
    run_id: str,
    ranks: tuple[tuple[int, ...], ...],
    egress: Shaping,
    ingress: Shaping,
    network_range: ipaddress.IPv4Network,
) -> Reservation:
    """Pick a free subnet for the run and record its network before anything is created."""
    with _locked(runs_dir) as folder:
        path = folder / f"{run_id}.json"
        if path.exists():
            raise ExecutorError(f"run {run_id} already has an emulated network on this machine")
        live = [ipaddress.IPv4Network(r.subnet) for r in records(runs_dir)]
        taken_links = {r.layout().bridge for r in records(runs_dir)}
        try:
            blocks = candidate_blocks(network_range, len(ranks))
        except ValueError as exc:
            raise ExecutorError(str(exc), hint="widen emulated_network in settings.toml") from None
        ours = [ipaddress.IPv4Network(r.subnet) for r in records(runs_dir)]
        foreign = [
            net for net in _routed() if not any(net.subnet_of(own) for own in ours if net.version == 4)
        ]
        for block in blocks:
            if any(block.overlaps(net) for net in live) or any(block.overlaps(net) for net in foreign):
                continue
            layout = plan_layout(run_id, ranks, block, egress, ingress)
            if layout.bridge in taken_links:
                raise ExecutorError(f"run {run_id}'s link names collide with a running run's; start it again")
            owner = os.getpid()
            record = NetworkRecord(
                run_id=run_id,
                subnet=str(block),
                ranks=ranks,
                egress_rate_bps=egress.rate_bps,
                egress_delay_s=egress.delay_s,
                ingress_rate_bps=ingress.rate_bps,
                owner_pid=owner,
                owner_ticks=processes.start_ticks(owner),
                created=time.time(),
            )
            tmp = path.with_suffix(".tmp")
            tmp.write_text(record.model_dump_json())
            os.replace(tmp, path)
            return Reservation(layout, record)
    busy = ", ".join(str(net) for net in foreign if net.overlaps(network_range)) or "runs going on"
    raise ExecutorError(
        f"no free subnet left in the emulated network range {network_range} (taken by {busy})",
        hint="set emulated_network in settings.toml to a range this machine does not use",
    )


def hosts_path(runs_dir: Path, run_id: str) -> Path:
    """The run's hosts file, which its ranks see as /etc/hosts."""
    return ledger_dir(runs_dir) / f"{run_id}.hosts"


def release(runs_dir: Path, run_id: str) -> None:
    """Forget a run's record and its hosts file (its names are gone)."""
    for path in (hosts_path(runs_dir, run_id), ledger_dir(runs_dir) / f"{run_id}.json"):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def namespace_pids(names: tuple[str, ...]) -> set[int]:
    """Processes whose network namespace is one of ``names`` (by inode, as ``ip netns pids``)."""
    inodes = set()
    for name in names:
        with contextlib.suppress(OSError):
            inodes.add(f"net:[{os.stat(links.NETNS_DIR / name).st_ino}]")
    if not inodes:
        return set()
    found = set()
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(entry / "ns" / "net") in inodes:
                    found.add(int(entry.name))
    return found


def in_use(record: NetworkRecord) -> bool:
    """Whether a record's network may still be needed: its maker lives, or a process is inside it."""
    if processes.is_alive(record.owner_pid, record.owner_ticks):
        return True
    return bool(namespace_pids(record.layout().namespaces))


def teardown(runs_dir: Path, run_id: str) -> list[str]:
    """Remove a run's network by its record's names; returns what could not be removed."""
    record = read(runs_dir, run_id)
    if record is None:
        return []
    left = links.remove(record.layout())
    if not left:
        release(runs_dir, run_id)
    return left


def sweep(runs_dir: Path) -> list[str]:
    """Remove the networks of runs whose maker and ranks are gone (a killed ``apply``); returns a
    note per run cleaned or kept."""
    notes: list[str] = []
    for record in records(runs_dir):
        if in_use(record):
            continue
        left = links.remove(record.layout())
        if left:
            notes.append(
                f"could not remove the emulated network of run {record.run_id}: {', '.join(left)} remain"
            )
        else:
            release(runs_dir, record.run_id)
            notes.append(f"removed the emulated network left by run {record.run_id}")
    return notes
