"""Task 0a's all-reduce measurement vs a raw ``torch.distributed.all_reduce`` loop, 2 gloo ranks.

Goal (issue 4): for tensors of 1 MB and more, the bus bandwidth the task reports is at least
0.95x what a bare loop measures. Ours is the task's own ``measure`` (preallocated buffer view,
warm-up, barrier, per-repetition timing, slowest rank, median) through the ``Comm`` layer; the
peer times the same number of bare ``dist.all_reduce`` calls on a fresh tensor and applies the
same statistics. Per size, rounds alternate ours/raw; rank 0 prints the median busbw of each
and the median of the paired ratios with a bootstrap 95% interval.

    python benchmarks/allreduce_task.py [--rounds 31] [--reps 20] [--max-mb 64]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "workers")]  # run as a script by torchrun, too

from benchmarks.stats import median_interval  # noqa: E402


def rank_main(args: argparse.Namespace) -> None:
    import numpy as np
    import torch
    import torch.distributed as dist
    from mlbench_worker.comm import TorchComm
    from mlbench_worker.context import limit_threads
    from mlbench_worker.tasks.allreduce import bus_bandwidth, measure

    limit_threads(1)
    dist.init_process_group("gloo")
    comm = TorchComm("gloo")
    world = comm.world_size
    sizes = []
    mb = 1
    while mb <= args.max_mb:
        sizes.append(mb * 2**20 // 4)  # fp32 elements
        mb *= 4
    buffer = torch.zeros(sizes[-1], dtype=torch.float32)

    def raw(size: int) -> float:
        tensor = torch.zeros(size, dtype=torch.float32)
        for _ in range(args.warmup):
            dist.all_reduce(tensor)
        dist.barrier()
        times = torch.empty(args.reps, dtype=torch.float64)
        for i in range(args.reps):
            start = time.perf_counter()
            dist.all_reduce(tensor)
            times[i] = time.perf_counter() - start
        dist.all_reduce(times, op=dist.ReduceOp.MAX)
        p50 = float(np.percentile(times.numpy(), 50))  # as the task does (torch's median is the lower one)
        return bus_bandwidth(size * 4 / p50 / 1e9, world)

    def ours(size: int) -> float:
        comm.barrier()
        return measure(comm, "fp32", buffer, size, args.reps, args.warmup, lambda: None).busbw

    rows = []
    for size in sizes:
        got: dict[str, list[float]] = {"ours": [], "raw": []}
        for r in range(args.rounds):
            for name in ("ours", "raw") if r % 2 == 0 else ("raw", "ours"):
                got[name].append(ours(size) if name == "ours" else raw(size))
        ratios = [o / w for o, w in zip(got["ours"], got["raw"], strict=True)]
        low, high = median_interval(ratios)
        rows.append(
            (
                size,
                statistics.median(got["ours"]),
                statistics.median(got["raw"]),
                statistics.median(ratios),
                low,
                high,
            )
        )
    if comm.rank == 0:
        print(f"all-reduce busbw, fp32, {world} gloo ranks, {args.reps} reps x {args.rounds} rounds per size")
        print(f"  {'MB':>6} {'ours GB/s':>10} {'raw GB/s':>10} {'ours/raw':>9}  95% interval")
        for size, o, w, ratio, low, high in rows:
            print(f"  {size * 4 / 2**20:>6.0f} {o:>10.3f} {w:>10.3f} {ratio:>9.3f}  {low:.3f} .. {high:.3f}")
        worst = min(r[3] for r in rows)
        print(f"  worst ratio for sizes >= 1 MB: {worst:.3f}  (goal: >= 0.95)")
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--max-mb", type=int, default=64)
    parser.add_argument("--rank-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rank_worker:
        rank_main(args)
        return 0
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    argv_rank = [
        torchrun, "--standalone", "--nproc_per_node", "2", "--no-python",
        sys.executable, str(Path(__file__).resolve()), "--rank-worker", "--rounds", str(args.rounds),
        "--reps", str(args.reps), "--warmup", str(args.warmup), "--max-mb", str(args.max_mb),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(argv_rank, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
