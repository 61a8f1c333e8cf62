"""The network dimension, measured: shaped links against their configured rate, what making and
removing a run's links costs, and what an unshaped emulated link costs a 2-rank step.

1. Rate: two emulated nodes whose links are shaped to 10 Mbit/s, 100 Mbit/s and 1 Gbit/s; one TCP
   stream from node 1 to node 0 for a few seconds. Printed: the configured rate, what the link
   carried (the sender's interface counter: frames as tc meters them), the payload the receiver
   got, and the link's ratio to the configured rate (goal: within 10%). Then two gloo ranks, one
   per node, all-reduce fp32 tensors: their bus bandwidth against the link.
2. Setup and teardown: a 2-node network made and removed as a run's is (``emulation.runs``:
   leftovers swept, subnet reserved, hosts file, ip/tc; then the shaping checked and everything
   removed), ``--repeats`` times; the median of each part (goal: both together at most 0.3 s).
3. Step time: two gloo ranks all-reduce a ResNet-20 gradient (272,474 fp32 values) over and over,
   on loopback (no network: the peer, as today) and in two emulated nodes with ``bandwidth:
   unlimited`` (ours: veth and bridge, no qdisc); the medians and their ratio (goal: no difference
   beyond noise).

Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN) and tbf; says so and exits otherwise.

    python -m benchmarks network [--repeats 10] [--seconds 3] [--steps 200]
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKERS = str(ROOT / "workers")
RANGE = ipaddress.IPv4Network("198.18.0.0/15")
RATES = (10_000_000, 100_000_000, 1_000_000_000)
RESNET20_PARAMETERS = 272_474
SPEC = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata: {name: net-bench}
spec: {task: 2a, workers: 2, data: synthetic, network: 100Mbit}
"""

_RECEIVER = textwrap.dedent(
    """
    import socket, sys, time
    sys.path.insert(0, {workers!r})
    from mlbench_worker.launch.netns import join
    join({netns!r})
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(({address!r}, 5201)); s.listen(1); print("ready", flush=True)
    c, _ = s.accept(); got = 0; start = None
    while True:
        chunk = c.recv(1 << 20)
        if not chunk:
            break
        if start is None:
            start = time.perf_counter()
        got += len(chunk)
    print(got / (time.perf_counter() - start), flush=True)
    """
)
_SENDER = textwrap.dedent(
    """
    import socket, sys, time
    sys.path.insert(0, {workers!r})
    from mlbench_worker.launch.netns import join
    join({netns!r})
    s = socket.create_connection(({address!r}, 5201)); block = b"x" * (1 << 16)
    stop, left = time.perf_counter() + {seconds}, float("{limit}")
    while time.perf_counter() < stop and left > 0:
        s.sendall(block)
        left -= len(block)
    s.close()
    """
)
_ALLREDUCE = textwrap.dedent(
    """
    import os, statistics, sys, time
    sys.path.insert(0, {workers!r})
    from mlbench_worker.launch.netns import join_from_environment
    join_from_environment()
    import torch, torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://" + os.environ["MASTER_ADDR"] + ":29611",
                            rank=int(os.environ["RANK"]), world_size=2)
    t = torch.ones({elements})
    for _ in range(3):
        dist.all_reduce(t)
    times = []
    deadline = time.perf_counter() + {seconds}
    while len(times) < {steps} and time.perf_counter() < deadline:
        started = time.perf_counter(); dist.all_reduce(t); times.append(time.perf_counter() - started)
    if dist.get_rank() == 0:
        print(statistics.median(times), len(times), flush=True)
    dist.destroy_process_group()
    """
)


def _reserve(runs_dir: Path, rate: int | None):
    from mlbench_tui.executors.local.network import ledger
    from mlbench_tui.executors.local.network.layout import group_ranks
    from mlbench_tui.executors.shaping import Shaping

    run_id = f"r-bench{os.getpid():06x}{time.monotonic_ns() % 0xFFFF:04x}"[:14]
    return ledger.reserve(runs_dir, run_id, group_ranks(2, 1), Shaping(rate), Shaping(rate), RANGE)


def _netns(name: str) -> str:
    from mlbench_tui.executors.local.network.links import NETNS_DIR

    return str(NETNS_DIR / name)


def sending(
    sender_netns: str, receiver_netns: str, address: str, *, seconds: float, limit: float = float("inf")
):
    """A TCP stream from one namespace (a file under /run/netns) to ``address`` in another, for
    ``seconds`` or ``limit`` bytes: a context that yields once it is sending and, on leaving,
    waits for its end; its ``.payload_bps`` is then what the receiver got, in bytes per second."""
    return _Stream(sender_netns, receiver_netns, address, seconds, limit)


class _Stream:
    def __init__(self, sender: str, receiver: str, address: str, seconds: float, limit: float) -> None:
        self.payload_bps = 0.0
        self._receiver = subprocess.Popen(
            [sys.executable, "-c", _RECEIVER.format(workers=WORKERS, netns=receiver, address=address)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._receiver.stdout is not None and self._receiver.stdout.readline().strip() == "ready"
        script = _SENDER.format(workers=WORKERS, netns=sender, address=address, seconds=seconds, limit=limit)
        self._sender = subprocess.Popen([sys.executable, "-c", script])

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._sender.wait(timeout=300)
            out, _ = self._receiver.communicate(timeout=60)
            self.payload_bps = float(out.strip())
        finally:
            for proc in (self._sender, self._receiver):
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()


def stream_rate(sender_netns: str, receiver_netns: str, address: str, megabytes: int) -> float:
    """Bytes per second one TCP stream of ``megabytes`` MiB carries between two namespaces."""
    with sending(sender_netns, receiver_netns, address, seconds=600, limit=megabytes * 2**20) as stream:
        pass
    return stream.payload_bps


def stream(layout, seconds: float) -> tuple[float, float]:
    """One TCP stream node 1 -> node 0: (bits/s the sender's link carried, payload bits/s received)."""
    from mlbench_tui.executors.local.network.links import read_counters

    address = str(layout.nodes[0].address)
    with sending(
        _netns(layout.namespaces[1]), _netns(layout.namespaces[0]), address, seconds=seconds + 1
    ) as flow:
        time.sleep(1.0)  # the stream is under way: the interpreter started, TCP left slow start
        before, started = read_counters("eth0", layout.namespaces[1], layout.egress), time.perf_counter()
        time.sleep(seconds)
        after, elapsed = (
            read_counters("eth0", layout.namespaces[1], layout.egress),
            time.perf_counter() - started,
        )
    assert before is not None and after is not None
    wire = (after.interface_tx_bytes - before.interface_tx_bytes) * 8 / elapsed
    return wire, flow.payload_bps * 8


def allreduce(layout, hosts: Path | None, elements: int, steps: int, seconds: float) -> float:
    """Median seconds of one fp32 all-reduce of ``elements`` between two gloo ranks: one per node
    of ``layout``, or both on loopback when ``layout`` is None."""
    procs = []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "OMP_NUM_THREADS": "1"}
        if layout is None:
            env["MASTER_ADDR"] = "127.0.0.1"
        else:
            env |= {
                "MASTER_ADDR": str(layout.nodes[0].address),
                "MLBENCH_NETNS": _netns(layout.namespaces[0]).replace("-n0", "-n{node}"),
                "MLBENCH_HOSTS_FILE": str(hosts),
                "GLOO_SOCKET_IFNAME": "eth0",
            }
        script = _ALLREDUCE.format(workers=WORKERS, elements=elements, steps=steps, seconds=seconds)
        procs.append(
            subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
        )
    out = [p.communicate(timeout=300)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit("the all-reduce ranks failed")
    return float(out[0].split()[0])


def _with_network(runs_dir: Path, rate: int | None):
    from mlbench_tui.executors.local.network import ledger, links
    from mlbench_tui.executors.local.network.runs import hosts_text

    reserved = _reserve(runs_dir, rate)
    hosts = ledger.hosts_path(runs_dir, reserved.record.run_id)
    hosts.write_text(hosts_text(reserved.layout, Path("/etc/hosts").read_text()))
    links.apply(reserved.layout)
    return reserved, hosts


def rate_section(runs_dir: Path, seconds: float) -> bool:
    from mlbench_tui.executors.local.network import ledger

    print("1. shaped links against their configured rate (one TCP stream, node 1 -> node 0)")
    print(
        f"   {'configured':>12} {'link carried':>14} {'payload':>12} {'ratio':>7}"
        f"  {'gloo busbw':>12} {'of link':>8}"
    )
    ok = True
    for rate in RATES:
        reserved, hosts = _with_network(runs_dir, rate)
        try:
            wire, payload = stream(reserved.layout, seconds)
            elements = max(250_000, int(rate / 8 * 0.5 / 4))  # about half a second per all-reduce
            took = allreduce(reserved.layout, hosts, elements, steps=5, seconds=seconds * 3)
            busbw = elements * 4 * 8 / took  # two ranks: each sends the tensor's size once
        finally:
            ledger.teardown(runs_dir, reserved.record.run_id)
        ratio = wire / rate
        ok &= abs(ratio - 1) <= 0.10
        print(
            f"   {rate / 1e6:>7g} Mbit/s {wire / 1e6:>9.1f} Mbit/s {payload / 1e6:>7.1f} Mbit/s {ratio:>6.1%}"
            f"  {busbw / 1e6:>7.1f} Mbit/s {busbw / rate:>7.0%}"
        )
    print(f"   goal: link within 10% of the configured rate: {'met' if ok else 'NOT met'}")
    return ok


def setup_section(runs_dir: Path, repeats: int) -> bool:
    from mlbench_tui.executors.local.network import runs
    from mlbench_tui.plan import expand
    from mlbench_tui.spec.loader import load_paths

    spec = runs_dir / "spec.yaml"
    spec.write_text(SPEC)
    (plan,) = expand(load_paths([spec], environ={})[0].spec)
    setups, teardowns = [], []
    for i in range(repeats):
        run_id = f"r-bench{i:07d}"
        made = runs.setup(plan, run_id, runs_dir)
        check = runs.finish(runs_dir, run_id, made)
        assert made is not None and check is not None and check.teardown_s is not None
        setups.append(made.setup_s)
        teardowns.append(check.teardown_s)
    setup, teardown = statistics.median(setups), statistics.median(teardowns)
    print(f"\n2. a 2-node run's links, made and removed {repeats} times (medians)")
    print(
        f"   setup {setup * 1e3:.0f} ms  check and teardown {teardown * 1e3:.0f} ms"
        f"  together {(setup + teardown) * 1e3:.0f} ms"
    )
    ok = setup + teardown <= 0.3
    print(f"   goal: at most 300 ms per run: {'met' if ok else 'NOT met'}")
    return ok


def step_section(runs_dir: Path, steps: int, seconds: float, rounds: int) -> None:
    from mlbench_tui.executors.local.network import ledger

    print(
        f"\n3. two gloo ranks all-reduce a ResNet-20 gradient ({RESNET20_PARAMETERS:,} fp32), median per step"
    )
    absent, present = [], []
    for _ in range(rounds):  # alternate, so load on the machine falls on both alike
        absent.append(allreduce(None, None, RESNET20_PARAMETERS, steps, seconds))
        reserved, hosts = _with_network(runs_dir, None)
        try:
            present.append(allreduce(reserved.layout, hosts, RESNET20_PARAMETERS, steps, seconds))
        finally:
            ledger.teardown(runs_dir, reserved.record.run_id)
    a, p = statistics.median(absent), statistics.median(present)
    spread = max(absent) / min(absent)
    print(
        f"   no network (loopback, the peer)   {a * 1e3:8.3f} ms"
        f"  (rounds {', '.join(f'{x * 1e3:.2f}' for x in absent)})"
    )
    print(
        f"   network: unlimited (veth, bridge) {p * 1e3:8.3f} ms"
        f"  (rounds {', '.join(f'{x * 1e3:.2f}' for x in present)})"
    )
    print(f"   ratio {p / a:.2f}x (the peer's own spread across rounds: {spread:.2f}x)")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks network")
    parser.add_argument("--repeats", type=int, default=10, help="setups and teardowns timed")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each rate measurement")
    parser.add_argument("--steps", type=int, default=300, help="all-reduces per step-time measurement")
    parser.add_argument(
        "--rounds", type=int, default=3, help="alternating rounds of the step-time comparison"
    )
    args = parser.parse_args(argv)
    from mlbench_tui.executors.local.network import probe

    caps = probe.probe()
    if caps.missing or not caps.tbf:
        print(f"cannot run here: {caps.describe()}")
        return 0
    with tempfile.TemporaryDirectory(prefix="mlbench-network-bench-") as tmp:
        runs_dir = Path(tmp)
        rate_ok = rate_section(runs_dir, args.seconds)
        setup_ok = setup_section(runs_dir, args.repeats)
        step_section(runs_dir, args.steps, args.seconds * 3, args.rounds)
    return 0 if rate_ok and setup_ok else 1
